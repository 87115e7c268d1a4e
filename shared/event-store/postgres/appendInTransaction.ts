import { z } from 'zod';
import { ignoredRows, sql, type Queryable } from '../../db/pool.ts';
import { WrongExpectedRevisionError } from '../../errors.ts';
import type { PersonalDataPolicy } from '../../personal-data/policy.ts';
import { assertAppendManyRequests, type AppendRequest, type AppendResult, type StreamSeen } from '../port.ts';
import { appendOutcome } from './appendOutcomes.ts';
import { NOTIFY_CHANNEL } from './wakeups.ts';

const revisionRow = z.object({ stream_id: z.string(), revision: z.string() });

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
 *
 * It goes around the sealing boundary too, so it refuses, before writing anything, an event of
 * any type `policy` names as personal: stored as given, its fields would be in the clear. It
 * refuses rather than seals because sealing needs the subject's data key, which is made in a
 * transaction of its own and which this path's one caller, the erasure, destroys in this very
 * transaction; what it appends (the erasure, an address's release) carries nothing personal.
 */
export async function appendInTransaction(
  tx: Queryable,
  requests: readonly AppendRequest[],
  policy: Pick<PersonalDataPolicy, 'fields'>,
): Promise<AppendResult[]> {
  assertAppendManyRequests(requests);
  for (const request of requests) {
    const personal = request.events.find((e) => policy.fields[e.type] !== undefined);
    if (personal) {
      throw new PersonalEventRefusedError(
        `appendInTransaction stores events unsealed and refuses ${personal.type} on ${request.streamId}, a type with personal fields: append it through the sealing boundary`,
      );
    }
  }
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
  const { results, failure } = appendOutcome(row, requests);
  if (failure) throw failure;
  return results;
}

/**
 * For a caller that decided from streams it read before its transaction (as an append plans
 * from them), in that transaction: takes the locks an append to `seen` and to `appending` takes,
 * in the order every append takes them (so no cycle forms with the flushes), then fails with
 * WrongExpectedRevisionError when one of `seen` moved since it was read. Until the caller
 * commits, no append to those streams commits, so its decision holds at its commit; the append it
 * makes in the same transaction finds the locks its own. The transaction must read committed
 * (the pool's default): under a snapshot taken before the locks, the check would pass on it.
 */
export async function holdStreamsAsSeen(tx: Queryable, seen: readonly StreamSeen[], appending: readonly string[]): Promise<void> {
  const streams = [...seen.map((s) => s.streamId), ...appending];
  if (streams.length === 0) return;
  await tx.query(sql.type(ignoredRows)`
    select pg_advisory_xact_lock(k.h)::text
    from (select distinct hashtextextended(s, 0) as h from unnest(${sql.array(streams, 'text')}::text[]) s order by 1) k
  `);
  if (seen.length === 0) return;
  // A statement of its own: its snapshot is taken once the locks are held.
  const now = await tx.any(sql.type(revisionRow)`
    select s.stream_id, coalesce((select max(e.revision) from es_events e where e.stream_id = s.stream_id), -1)::text as revision
    from unnest(${sql.array(
      seen.map((s) => s.streamId),
      'text',
    )}::text[]) as s(stream_id)
  `);
  const revisions = new Map(now.map((r) => [r.stream_id, Number(r.revision)]));
  const named = (revision: number) => (revision < 0 ? 'no_stream' : revision);
  for (const { streamId, revision } of seen) {
    const actual = revisions.get(streamId) ?? -1;
    if (actual !== revision) throw new WrongExpectedRevisionError(streamId, String(named(revision)), named(actual));
  }
}

/** An event with personal fields given to a path that would store it in the clear. */
export class PersonalEventRefusedError extends Error {
  override readonly name = 'PersonalEventRefusedError';
}
