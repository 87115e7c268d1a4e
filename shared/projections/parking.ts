import type { FragmentSqlToken, IdentifierSqlToken } from 'slonik';
import { z } from 'zod';
import { ignoredRows, sql, type DatabaseTransactionConnection, type Queryable, type DatabasePool } from '../db/pool.ts';
import type { GlobalPosition, RecordedEvent } from '../event-store/port.ts';
import { recordLateApplies } from './applyOrder.ts';
import { readCheckpoint } from './checkpoints.ts';
import { pageCommitMode, setCommitMode } from './commitMode.ts';
import { classifyFailure, describeFailure } from './failures.ts';
import { copyToPark } from './parkedRedactions.ts';
import type { Projection } from './projection.ts';

/**
 * The dead-letter table of the projection runner. An event that a projection cannot apply
 * (after bounded retries) is parked here with its error and everything needed to apply it
 * later (type, data, metadata, position), then skipped, so one bad event never stalls the
 * projection for every tenant. Later events of the same stream are parked behind it (status
 * `parked`, error naming the blocker), so that a stream's events are never applied out of
 * order. `projections retry <name>` re-applies parked events in log order after a fix.
 *
 * Rows belong to the projection version that parked them: a rebuild to another version starts
 * from a clean slate, and counts, metrics and retries only look at the version that is live.
 */
export const PARKED_EVENTS_TABLE = 'projection_parked_events';

/** The advisory lock a rebuild of the projection holds from its start to its swap (rebuild.ts). */
export const replayLockKey = (name: string): string => `projection-replay:${name}`;

/**
 * A rebuild found, in its swap, events the live projector parked after the build had applied
 * them in place (the live projector far behind the build): swapping would put their changes
 * behind readers already past them. Nothing is swapped; the next build defers them. A
 * projector's start-up builds again on its own (with backoff); an operator runs the replay again.
 */
export class RebuildRaceError extends Error {
  constructor(name: string, eventIds: readonly string[]) {
    super(
      `projection ${name}: the live projector parked ${eventIds.length} event(s) this rebuild had already applied in place (${eventIds.slice(0, 5).join(', ')}); nothing was swapped, build again`,
    );
    this.name = 'RebuildRaceError';
  }
}

/** `retry` while a rebuild of the projection is building: it would place what it applies wrongly in the new model. */
export class RebuildInProgressError extends Error {
  constructor(name: string) {
    super(`a rebuild of projection ${name} is running: retry once it has swapped in (projections status)`);
    this.name = 'RebuildInProgressError';
  }
}

export type ParkedStatus = 'parked' | 'retried' | 'resolved';

const parkedRow = z.object({
  projection: z.string(),
  version: z.number(),
  commit_position: z.string(),
  prepare_position: z.string(),
  event_id: z.string(),
  stream_id: z.string(),
  revision: z.number(),
  event_type: z.string(),
  tenant_id: z.string().nullable(),
  data: z.unknown(),
  metadata: z.record(z.string(), z.unknown()),
  recorded_at: z.string(),
  error: z.string(),
  attempts: z.number(),
  first_failed_at: z.string(),
  last_failed_at: z.string(),
  status: z.enum(['parked', 'retried', 'resolved']),
  erased: z.boolean(),
});

export type ParkedEvent = {
  readonly projection: string;
  readonly version: number;
  /** `redacted: true` when its personal fields were blanked for an erasure, as the sealing boundary hands such an event. */
  readonly event: RecordedEvent;
  readonly tenantId: string | null;
  readonly error: string;
  readonly attempts: number;
  readonly firstFailedAt: string;
  readonly lastFailedAt: string;
  readonly status: ParkedStatus;
  /**
   * The person of its stream was erased: a projection shows the erasure only once this event and
   * those before it of the stream are applied (`retry`) or given up on (`resolve`).
   */
  readonly erased: boolean;
};

const toParked = (row: z.infer<typeof parkedRow>): ParkedEvent => ({
  projection: row.projection,
  version: row.version,
  event: {
    id: row.event_id,
    streamId: row.stream_id,
    revision: row.revision,
    type: row.event_type,
    data: row.data,
    metadata: row.metadata,
    position: { commit: BigInt(row.commit_position), prepare: BigInt(row.prepare_position) },
    recordedAt: row.recorded_at,
    ...(row.erased && { redacted: true as const }),
  },
  tenantId: row.tenant_id,
  error: row.error,
  attempts: row.attempts,
  firstFailedAt: row.first_failed_at,
  lastFailedAt: row.last_failed_at,
  status: row.status,
  erased: row.erased,
});

/** Whether the person of parked row `p`'s stream was erased (an erasure recorded it, or its copy was parked redacted). */
const ofErased = sql.fragment`(p.redacted or exists (select 1 from projection_parked_redactions r where r.stream_id = p.stream_id))`;

// Every copy of an erased person's stream is handed back redacted, as every projection reads an
// event of a person erased from there on, whether or not it held a personal field: applied plain,
// an assignment of a role, say, would be given to whoever holds their freed address now. `redacted`
// is set when a copy is parked or blanked; the streams recorded as erased also mark the copies
// written before that column existed, or by a process still on older code meanwhile.
const parkedColumns = sql.fragment`
  p.projection, p.version, p.commit_position::text, p.prepare_position::text, p.event_id, p.stream_id, p.revision, p.event_type,
  p.tenant_id, p.data, p.metadata, p.recorded_at, p.error, p.attempts, p.first_failed_at, p.last_failed_at, p.status,
  ${ofErased} as erased
`;

const tenantOf = (event: RecordedEvent): string | null => (typeof event.metadata.tenantId === 'string' ? event.metadata.tenantId : null);

/**
 * Parks one event (inside the caller's transaction, so it commits with the checkpoint that skips it).
 * The event is stored as the projection was handed it, opened, but without the fields of a person
 * erased meanwhile, and marked redacted then (parkedRedactions.ts: it throws RetryLaterError while
 * such an erasure is in flight).
 */
export async function parkEvent(
  tx: Queryable,
  projection: Pick<Projection, 'name' | 'version'>,
  event: RecordedEvent,
  failure: { readonly error: string; readonly attempts: number },
): Promise<void> {
  const { data, redacted } = await copyToPark(tx, event);
  // Parked again (a replay of the same version): a blanked copy is never put back in the clear.
  await tx.query(sql.type(ignoredRows)`
    insert into projection_parked_events as p (
      projection, version, commit_position, prepare_position, event_id, stream_id, revision, event_type, tenant_id,
      data, metadata, recorded_at, error, attempts, redacted
    ) values (
      ${projection.name}, ${projection.version}, ${event.position.commit.toString()}, ${event.position.prepare.toString()},
      ${event.id}, ${event.streamId}, ${event.revision}, ${event.type}, ${tenantOf(event)},
      ${sql.jsonb(JSON.parse(JSON.stringify(data ?? null)))}, ${sql.jsonb(JSON.parse(JSON.stringify(event.metadata)))},
      ${event.recordedAt}, ${failure.error}, ${failure.attempts}, ${redacted}
    )
    on conflict (projection, version, event_id) do update set
      error = excluded.error, attempts = p.attempts + excluded.attempts, last_failed_at = now(), status = 'parked', resolved_at = null,
      data = case when excluded.redacted then excluded.data else p.data end, redacted = p.redacted or excluded.redacted
  `);
}

const parkedEventIdRow = z.object({ stream_id: z.string(), event_id: z.string() });

/**
 * Streams of `streamIds` that have a parked event in this projection version before `before`
 * (the first event of the page at hand): their events from `before` on wait behind it. A row
 * at or after it (a same-version replay that ran ahead of the live projector parks under the
 * live version) blocks nothing yet: the page's own events are tried, and parked, in order.
 */
export async function parkedStreams(
  db: Queryable,
  projection: Pick<Projection, 'name' | 'version'>,
  streamIds: readonly string[],
  before: GlobalPosition,
): Promise<Map<string, string>> {
  if (streamIds.length === 0) return new Map();
  const rows = await db.any(sql.type(parkedEventIdRow)`
    select distinct on (stream_id) stream_id, event_id from projection_parked_events
    where projection = ${projection.name} and version = ${projection.version} and status = 'parked'
      and stream_id = any(${sql.array([...streamIds], 'text')})
      and (commit_position, prepare_position) < (${before.commit.toString()}::numeric, ${before.prepare.toString()}::numeric)
    order by stream_id, commit_position, prepare_position
  `);
  return new Map(rows.map((r) => [r.stream_id, r.event_id]));
}

const wasParkedRow = z.object({ parked: z.boolean() });

/**
 * Whether the projection ever parked this tenant's event at `position` (any version, any status:
 * parked rows are kept). Across tenants (the parked events are not tenant-scoped).
 */
export async function wasParkedAt(db: Queryable, projection: string, tenantId: string, position: GlobalPosition): Promise<boolean> {
  return db.oneFirst(sql.type(wasParkedRow)`
    select exists (
      select 1 from projection_parked_events
      where projection = ${projection} and tenant_id = ${tenantId}
        and commit_position = ${position.commit.toString()}::numeric and prepare_position = ${position.prepare.toString()}::numeric
    ) as parked
  `);
}

const oneRow = z.object({ one: z.number() });

/** Whether this projection version has any parked event (the runner skips the per-page lookup when not). */
export async function hasParkedEvents(db: Queryable, projection: Pick<Projection, 'name' | 'version'>): Promise<boolean> {
  return db.exists(sql.type(oneRow)`
    select 1 as one from projection_parked_events
    where projection = ${projection.name} and version = ${projection.version} and status = 'parked'
  `);
}

const parkedPositionRow = z.object({ event_id: z.string(), commit_position: z.string(), prepare_position: z.string() });

/**
 * The events parked (not yet retried or resolved) in the projection's live version, of the
 * types `projection` reads: id → log position. (A build never meets the other types.)
 */
export async function liveParkedEvents(
  db: Queryable,
  projection: Pick<Projection, 'name' | 'eventTypes'>,
): Promise<Map<string, GlobalPosition>> {
  const rows = await db.any(sql.type(parkedPositionRow)`
    select p.event_id, p.commit_position::text, p.prepare_position::text from projection_parked_events p
    join projection_checkpoints c on c.name = p.projection and c.version = p.version
    where p.projection = ${projection.name} and p.status = 'parked' and p.event_type = any(${sql.array([...projection.eventTypes], 'text')})
  `);
  return new Map(rows.map((r) => [r.event_id, { commit: BigInt(r.commit_position), prepare: BigInt(r.prepare_position) }]));
}

const parkedCountRow = z.object({ name: z.string(), parked: z.number() });

/**
 * Parked events per projection, for the live version of each (the one in projection_checkpoints).
 * Every built projection appears, with 0 when nothing is parked.
 */
export function countParkedEvents(db: Queryable): Promise<Map<string, number>> {
  return countParked(db, sql.fragment`true`);
}

/**
 * Of those, the events of erased people (ParkedEvent.erased): each is an erasure the projection's
 * model does not show yet, until they are retried or resolved.
 */
export function countParkedEventsOfErased(db: Queryable): Promise<Map<string, number>> {
  return countParked(db, ofErased);
}

async function countParked(db: Queryable, which: FragmentSqlToken): Promise<Map<string, number>> {
  const rows = await db.any(sql.type(parkedCountRow)`
    select c.name, count(p.event_id)::int8 as parked
    from projection_checkpoints c
    left join projection_parked_events p on p.projection = c.name and p.version = c.version and p.status = 'parked' and ${which}
    group by c.name order by c.name
  `);
  return new Map(rows.map((r) => [r.name, r.parked]));
}

/** The parked events of a projection's live version, in log order. */
export async function listParkedEvents(
  db: Queryable,
  name: string,
  options: { status?: ParkedStatus; limit?: number } = {},
): Promise<ParkedEvent[]> {
  const rows = await db.any(sql.type(parkedRow)`
    select ${parkedColumns} from projection_parked_events p
    where projection = ${name} and version = (select version from projection_checkpoints where name = ${name})
      and (${options.status ?? null}::text is null or status = ${options.status ?? null})
    order by commit_position, prepare_position limit ${options.limit ?? 1_000}
  `);
  return rows.map(toParked);
}

export type RetryResult = { readonly retried: number; readonly stillParked: number };

/**
 * Re-applies the parked events of a projection's live version, in log order, in ONE
 * transaction with the live model: the checkpoint row is locked first, so the live projector
 * cannot commit in between. An event applied here is marked `retried` in the same
 * transaction, so it is never applied twice (the live projector is already past it). One that
 * still fails stays parked with attempts + 1, and so do the later events of its stream.
 * A copy blanked for an erasure is handed over redacted (toParked), so an erased person's events
 * apply as they would from the log, and the erasure parked behind them takes effect.
 * A transient failure (see failures.ts) rolls the whole retry back and is thrown; so is
 * RebuildInProgressError while a rebuild of the projection holds its replay lock.
 */
export async function retryParkedEvents<T extends string>(
  pool: DatabasePool,
  projection: Projection<T>,
  tables: Readonly<Record<T, IdentifierSqlToken>>,
): Promise<RetryResult> {
  return pool.transaction(async (tx) => {
    // Not while a rebuild builds: it read the late applies when it started, so what this applies
    // would go at its log position in the new model, behind readers already past it. (A rebuild
    // that starts meanwhile waits for this transaction.)
    await assertNoRebuild(tx, projection.name);
    // Durable like the projection's live pages, whatever the database's default.
    await tx.query(setCommitMode(pageCommitMode(projection)));
    const checkpoint = await readCheckpoint(tx, projection.name, true);
    if (checkpoint === null) throw new Error(`projection ${projection.name} is not built`);
    const { version } = checkpoint;
    if (version !== projection.version) {
      throw new Error(`projection ${projection.name} is built at version ${version}, this code is version ${projection.version}`);
    }
    const rows = await tx.any(sql.type(parkedRow)`
      select ${parkedColumns} from projection_parked_events p
      where projection = ${projection.name} and version = ${version} and status = 'parked'
      order by commit_position, prepare_position
      for update of p
    `);
    const blocked = new Map<string, string>();
    const appliedIds: string[] = [];
    let retried = 0;
    for (const parked of rows.map(toParked)) {
      const { event } = parked;
      let failure: string | undefined = blocked.has(event.streamId)
        ? `waiting behind parked event ${blocked.get(event.streamId) ?? ''} of the same stream`
        : undefined;
      if (!failure) {
        try {
          await tx.transaction((savepoint) => projection.handle(savepoint, [event], tables));
        } catch (error) {
          if (classifyFailure(error) === 'transient') throw error;
          failure = describeFailure(error);
        }
      }
      if (failure) {
        blocked.set(event.streamId, blocked.get(event.streamId) ?? event.id);
        await tx.query(sql.type(ignoredRows)`
          update projection_parked_events set attempts = attempts + 1, last_failed_at = now(), error = ${failure}
          where projection = ${projection.name} and version = ${version} and event_id = ${event.id}
        `);
        continue;
      }
      retried++;
      appliedIds.push(event.id);
      await tx.query(sql.type(ignoredRows)`
        update projection_parked_events set status = 'retried', attempts = attempts + 1, resolved_at = now()
        where projection = ${projection.name} and version = ${version} and event_id = ${event.id}
      `);
    }
    if (retried > 0) {
      await tx.query(sql.type(ignoredRows)`
        update projection_checkpoints set events_applied = events_applied + ${retried}, updated_at = now() where name = ${projection.name}
      `);
      // Applied right after the checkpoint: a rebuild applies them at the same point (applyOrder.ts).
      await recordLateApplies(tx, projection.name, appliedIds, checkpoint.position);
    }
    return { retried, stillParked: rows.length - retried };
  });
}

const eventIdRow = z.object({ event_id: z.string() });

/**
 * Marks parked events as resolved without applying them (an operator decided to drop them).
 * Not while a rebuild builds: it would still apply them last, in its swap.
 */
export async function resolveParkedEvents(pool: DatabasePool, name: string, eventIds?: readonly string[]): Promise<number> {
  const rows = await pool.transaction(async (tx) => {
    await assertNoRebuild(tx, name);
    return tx.any(sql.type(eventIdRow)`
      update projection_parked_events set status = 'resolved', resolved_at = now()
      where projection = ${name} and status = 'parked'
        and version = (select version from projection_checkpoints where name = ${name})
        and (${eventIds ? sql.array([...eventIds], 'text') : null}::text[] is null or event_id = any(${eventIds ? sql.array([...eventIds], 'text') : null}::text[]))
      returning event_id
    `);
  });
  return rows.length;
}

const freeRow = z.object({ free: z.boolean() });

/**
 * Throws RebuildInProgressError while a rebuild of the projection holds its replay lock; else
 * holds the lock shared until the caller's transaction ends (retries and resolves run side by
 * side; a rebuild that starts meanwhile waits for them).
 */
async function assertNoRebuild(tx: DatabaseTransactionConnection, name: string): Promise<void> {
  const free = await tx.oneFirst(sql.type(freeRow)`
    select pg_try_advisory_xact_lock_shared(hashtext(${replayLockKey(name)})) as free
  `);
  if (!free) throw new RebuildInProgressError(name);
}
