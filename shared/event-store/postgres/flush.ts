import { z } from 'zod';
import type { PlainConnection } from '../../db/plainConnection.ts';
import { sqlStateOf } from '../../db/sqlState.ts';
import type { QueuedAppend } from './groupCommit.ts';
import { appendOutcome } from './appendOutcomes.ts';
import { NOTIFY_CHANNEL } from './wakeups.ts';
import type { createWakeupSchedule } from './wakeupSchedule.ts';

/** The flush's statement, prepared once per append connection; `$9` is the wake-up's channel or null. */
const APPEND_BATCH_STATEMENT =
  'select outcomes, revisions, commits, prepares from es_append_batch($1::int4[], $2::text[], $3::text[], $4::int4[], $5::uuid[], $6::text[], $7::jsonb[], $8::jsonb[], $9::text)';
/** Its row; pg gives bigint[] elements as text. */
const batchRow = z.object({
  outcomes: z.array(z.enum(['appended', 'duplicate', 'wrong_expected_revision', 'event_id_conflict', 'not_attempted'])),
  revisions: z.array(z.string().nullable()),
  commits: z.array(z.string().nullable()),
  prepares: z.array(z.string().nullable()),
});

/**
 * The group commit's flush on `flushConnections` (one per lane), carrying the readers' wake-up
 * when `wakeSchedule` says so.
 */
export function createFlush(flushConnections: readonly PlainConnection[], wakeSchedule: ReturnType<typeof createWakeupSchedule>) {
  /**
   * One flush: every queued request in one statement, one transaction, one round trip, carrying
   * the readers' wake-up when the schedule says so.
   */
  async function flush(requests: readonly QueuedAppend[], lane: number): Promise<void> {
    const req: number[] = [];
    const streams: string[] = [];
    const expected: string[] = [];
    const counts: number[] = [];
    const ids: string[] = [];
    const types: string[] = [];
    const data: string[] = [];
    const metadata: string[] = [];
    requests.forEach((request, r) => {
      for (const part of request.parts) {
        req.push(r);
        streams.push(part.streamId);
        expected.push(String(part.expectedRevision ?? 'any'));
        counts.push(part.events.length);
        for (const e of part.events) {
          ids.push(e.id);
          types.push(e.type);
          data.push(JSON.stringify(e.data));
          metadata.push(JSON.stringify(e.metadata ?? {}));
        }
      }
    });
    const values = [req, streams, expected, counts, ids, types, data, metadata];
    const send = async (mayCarry: boolean): Promise<z.infer<typeof batchRow>> => {
      const wake = wakeSchedule.begin(mayCarry);
      try {
        const row = await appendBatch(lane, [...values, wake.carried ? NOTIFY_CHANNEL : null]);
        wakeSchedule.settle(wake, row.outcomes.includes('appended') ? 'appended' : 'nothing appended');
        return row;
      } catch (error) {
        wakeSchedule.settle(wake, 'failed');
        // PostgreSQL refused the NOTIFY at commit (its notification queue is full: a listener that
        // never reads), and with it the appends: they go again without it (the wake-up is owed).
        if (wake.carried && sqlStateOf(error) === '54000') return send(false);
        throw error;
      }
    };
    const row = await send(true);
    let part = 0;
    for (const request of requests) {
      const { results, failure } = appendOutcome(row, request.parts, part);
      part += request.parts.length;
      if (failure) request.reject(failure);
      else request.resolve(results);
    }
  }

  /**
   * `es_append_batch` on the flush lane's connection. A statement that fails in PostgreSQL
   * leaves the connection as it was (the statement was its own transaction); any other failure
   * (socket closed or broken) drops it and fails as a lost connection (SQLSTATE 08006), which
   * group commit does not retry: whether that transaction committed is unknown.
   */
  async function appendBatch(lane: number, values: unknown[]): Promise<z.infer<typeof batchRow>> {
    const connection = flushConnections[lane];
    if (!connection) throw new Error(`no flush connection for lane ${lane}`);
    const result = await connection.run({ name: 'es_append_batch', text: APPEND_BATCH_STATEMENT, values }, 'event store append');
    const parsed = batchRow.safeParse(result.rows[0]);
    if (!parsed.success) throw new Error(`es_append_batch returned an unexpected row: ${parsed.error.message}`);
    return parsed.data;
  }

  return flush;
}
