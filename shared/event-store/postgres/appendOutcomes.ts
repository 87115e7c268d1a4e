import { ConflictError, WrongExpectedRevisionError } from '../../errors.ts';
import type { AppendResult, ExpectedRevision } from '../port.ts';

/** What `es_append_batch` answers: per part (stream of a request), its outcome and, when written, its revision and position. */
export type AppendBatchRow = {
  readonly outcomes: readonly string[];
  readonly revisions: readonly (string | null)[];
  readonly commits: readonly (string | null)[];
  readonly prepares: readonly (string | null)[];
};

/**
 * The result of one atomic request whose parts sit at `offset` onwards in `row`: every part's
 * revision and position, or the failure of the first part refused (all or nothing: the others
 * of a refused request are `not_attempted`). The one reading of the batch's answer, for group
 * commit's flush and for an append inside a caller's transaction alike.
 */
export function appendOutcome(
  row: AppendBatchRow,
  parts: ReadonlyArray<{ readonly streamId: string; readonly expectedRevision?: ExpectedRevision }>,
  offset = 0,
): { readonly results: AppendResult[]; readonly failure?: Error } {
  const results: AppendResult[] = [];
  let failure: Error | undefined;
  parts.forEach(({ streamId, expectedRevision }, j) => {
    const i = offset + j;
    const outcome = row.outcomes[i];
    const revision = row.revisions[i] ?? null;
    const commit = row.commits[i] ?? null;
    const prepare = row.prepares[i] ?? null;
    if (outcome === 'appended' || outcome === 'duplicate') {
      if (revision === null || commit === null || prepare === null) throw new Error('es_append_batch returned no position');
      results.push({ nextRevision: Number(revision), position: { commit: BigInt(commit), prepare: BigInt(prepare) } });
    } else if (outcome === 'wrong_expected_revision') {
      failure ??= new WrongExpectedRevisionError(
        streamId,
        String(expectedRevision ?? 'any'),
        revision === null ? 'no_stream' : Number(revision),
      );
    } else if (outcome === 'event_id_conflict') {
      failure ??= new ConflictError('Some of these event ids were already used by other events');
    } else if (outcome !== 'not_attempted') {
      throw new Error(`unexpected append outcome ${String(outcome)}`);
    }
  });
  if (!failure && results.length !== parts.length) throw new Error('es_append_batch attempted no part of a request and named no failure');
  return failure ? { results, failure } : { results };
}
