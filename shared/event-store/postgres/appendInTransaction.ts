import { z } from 'zod';
import { sql, type Queryable } from '../../db/pool.ts';
import { ConflictError, WrongExpectedRevisionError } from '../../errors.ts';
import { assertAppendManyRequests, type AppendRequest, type AppendResult } from '../port.ts';
import { NOTIFY_CHANNEL } from './wakeups.ts';

const batchRow = z.object({
  outcomes: z.array(z.string()),
  revisions: z.array(z.string().nullable()),
  commits: z.array(z.string().nullable()),
  prepares: z.array(z.string().nullable()),
});

/**
 * An atomic multi-stream append (`appendMany`'s semantics) inside a transaction the caller holds,
 * for a write that must commit or fail with other rows of the same database: the log on
 * PostgreSQL is then one commit with them. It goes around group commit (one statement of
 * `es_append_batch`, as a flush sends) and wakes the log's readers at commit. Only for the
 * PostgreSQL adapter, on its own database; events are stored as given.
 */
export async function appendInTransaction(tx: Queryable, requests: readonly AppendRequest[]): Promise<AppendResult[]> {
  assertAppendManyRequests(requests);
  const events = requests.flatMap((r) => r.events);
  const row = await tx.one(sql.type(batchRow)`
    select outcomes, revisions::text[] as revisions, commits, prepares::text[] as prepares from es_append_batch(
      ${sql.array(
        requests.map(() => 0),
        'int4',
      )},
      ${sql.array(
        requests.map((r) => r.streamId),
        'text',
      )},
      ${sql.array(
        requests.map((r) => String(r.expectedRevision ?? 'any')),
        'text',
      )},
      ${sql.array(
        requests.map((r) => r.events.length),
        'int4',
      )},
      ${sql.array(
        events.map((e) => e.id),
        'uuid',
      )},
      ${sql.array(
        events.map((e) => e.type),
        'text',
      )},
      ${sql.array(
        events.map((e) => JSON.stringify(e.data)),
        'jsonb',
      )},
      ${sql.array(
        events.map((e) => JSON.stringify(e.metadata ?? {})),
        'jsonb',
      )},
      ${NOTIFY_CHANNEL}
    )
  `);
  return requests.map(({ streamId, expectedRevision }, i) => {
    const outcome = row.outcomes[i];
    const revision = row.revisions[i] ?? null;
    const commit = row.commits[i] ?? null;
    const prepare = row.prepares[i] ?? null;
    if (outcome === 'appended' || outcome === 'duplicate') {
      if (revision === null || commit === null || prepare === null) throw new Error('es_append_batch returned no position');
      return { nextRevision: Number(revision), position: { commit: BigInt(commit), prepare: BigInt(prepare) } };
    }
    // All or nothing: the first refused part names the failure (as `appendMany` does).
    const refused = requests.findIndex((_, j) => row.outcomes[j] === 'wrong_expected_revision' || row.outcomes[j] === 'event_id_conflict');
    const failed = requests[refused];
    if (failed && row.outcomes[refused] === 'wrong_expected_revision') {
      const actual = row.revisions[refused] ?? null;
      throw new WrongExpectedRevisionError(
        failed.streamId,
        String(failed.expectedRevision ?? 'any'),
        actual === null ? 'no_stream' : Number(actual),
      );
    }
    if (failed) throw new ConflictError('Some of these event ids were already used by other events');
    throw new Error(`unexpected append outcome ${String(outcome)} for ${streamId} (expected ${String(expectedRevision ?? 'any')})`);
  });
}
