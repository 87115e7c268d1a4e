import pg from 'pg';
import { z } from 'zod';
import { connectionUrlOf, sql, type DatabasePool } from '../db/pool.ts';
import type { Migration } from '../db/migrate.ts';
import { readAllBulk } from './postgresBulkRead.ts';
import { createSharedTails } from './sharedTail.ts';
import { createWakeupSchedule } from './wakeupSchedule.ts';
import { createListenConnection } from '../db/listen.ts';
import { breaksConnection, connectionLostError, createPlainConnection } from '../db/plainConnection.ts';
import { sqlStateOf } from '../db/sqlState.ts';
import { ConflictError, WrongExpectedRevisionError } from '../errors.ts';
import {
  START,
  assertAppendEvents,
  assertAppendManyRequests,
  type AppendRequest,
  type AppendResult,
  type EventStore,
  type GlobalPosition,
  type ReadAllOptions,
  type ReadAllPage,
  type RecordedEvent,
  type SubscribeOptions,
} from './port.ts';

/**
 * The read horizon's statement (see `es_read_horizon` below), shared by its versions: the event
 * tables' writers are the backends holding a lock on one of `tables` (es_streams too, until 010
 * stopped writing it and 011 dropped it).
 */
const horizonSelect = (tables: string) => `select coalesce(
          (select min(x) from pg_snapshot_xip(snap.s) x
           where (x::text::bigint % 4294967296) in (
             select l2.transactionid::text::bigint
             from pg_locks l1
             join pg_locks l2 on l2.pid = l1.pid and l2.locktype = 'transactionid' and l2.mode = 'ExclusiveLock' and l2.granted
             where l1.locktype = 'relation'
               and l1.database = (select oid from pg_database where datname = current_database())
               and l1.relation in (${tables})
               and l1.pid <> pg_backend_pid())),
          pg_snapshot_xmax(snap.s))
        from (select pg_current_snapshot() as s) snap`;
/** The horizon as 006 and 007 wrote it, when es_streams was still an event table. */
const HORIZON_SELECT = horizonSelect("'es_events'::regclass, 'es_streams'::regclass");

/** The batch's sizes, the first of `es_append_batch`'s variables in every version. */
const APPEND_BATCH_COUNTS = `        n_parts int := coalesce(cardinality(p_stream), 0);
        n_events int := coalesce(cardinality(p_ids), 0);
`;

/**
 * PostgreSQL adapter of the event-store port.
 *
 * Global order is (transaction id, sequence). A sequence number alone is not safe: numbers are
 * drawn at insert but become visible at commit, so a reader paging by sequence skips an event
 * whose transaction commits after a later-numbered one. Readers therefore only read below a
 * horizon: the oldest transaction that is still writing to the event tables (or, when none is,
 * the next transaction id). Everything below it has committed or aborted, so nothing can later
 * appear before what has been read.
 *
 * Unlike `pg_snapshot_xmin(pg_current_snapshot())` (emmett's horizon), this only waits for
 * our own writers: that xmin is cluster-wide, so any long transaction in any database of the
 * cluster (an analyst's open psql session, a batch job) would stall every projection.
 */
export const eventStoreMigrations: readonly Migration[] = [
  {
    id: 'event-store/001-init',
    sql: `
      create table es_streams (
        stream_id text primary key,
        revision bigint not null
      );
      create table es_events (
        position bigint generated always as identity primary key,
        transaction_id xid8 not null default pg_current_xact_id(),
        stream_id text not null,
        revision bigint not null,
        event_id uuid not null unique,
        type text not null,
        data jsonb not null,
        metadata jsonb not null default '{}'::jsonb,
        recorded_at timestamptz not null default clock_timestamp(),
        unique (stream_id, revision)
      );
      create index es_events_global_order on es_events (transaction_id, position) include (type);
    `,
  },
  { id: 'event-store/002-append-function', sql: appendFunction({ replace: false, notifyInTransaction: true }) },
  // NOTIFY inside the append serialised every commit on the notification queue's lock (about
  // a quarter of append throughput here); the adapter now notifies after commit, coalesced.
  { id: 'event-store/003-append-without-notify', sql: appendFunction({ replace: true, notifyInTransaction: false }) },
  // Group commit: many append requests (single- or multi-stream) in one statement and one
  // transaction. es_append stays for rolling upgrades (an older gateway still calls it).
  { id: 'event-store/004-append-batch', sql: appendBatchFunction() },
  // PL/pgSQL caches a generic plan per statement on a connection's first calls. Planned while
  // the tables were small (a fresh deployment, a new database), the event-id and stream lookups
  // became sequential scans and stayed so for the connection's life: es_append_batch took
  // 11 ms per flush at 15k events, 4 ms of it scanning es_events for 32 ids
  // (auto_explain, issue 11). Every table access in these functions is a lookup by a unique key,
  // for which an index scan is right at any size, so the planner is told so.
  {
    id: 'event-store/005-append-index-lookups',
    sql: `
      alter function es_append_batch(int[], text[], text[], int[], uuid[], text[], jsonb[], jsonb[]) set enable_seqscan = off;
      alter function es_append(text, text, uuid[], text[], jsonb[], jsonb[]) set enable_seqscan = off;
    `,
  },
  // A page of the log in one round trip (was two statements, three when filtered): the horizon,
  // the scan window and the fetch run inside one function, each statement on its own fresh
  // snapshot (a VOLATILE function in READ COMMITTED), so the horizon is still taken strictly
  // before the rows are read.
  { id: 'event-store/006-read-page-function', sql: readFunctions() },
  // A LANGUAGE sql function that cannot be inlined (this one reads pg_locks) is parsed and
  // planned again on every call; PL/pgSQL keeps the plan for the connection's life. Measured
  // with pgbench on one connection: `select es_read_horizon()` 0.30 ms as SQL, 0.085 ms as
  // PL/pgSQL (`select 1` 0.061 ms), and every page of the log pays it (issue 11: 0.68 ms of
  // PostgreSQL time per es_read_page under the create load). Same statement, same snapshot
  // rules: a VOLATILE function's statement takes a fresh snapshot.
  { id: 'event-store/007-read-horizon-cached-plan', sql: `
      create or replace function es_read_horizon() returns xid8 language plpgsql volatile as $fn$
      begin
        return (${HORIZON_SELECT});
      end
      $fn$;
    `,
  },
  // A PL/pgSQL statement with parameters is planned afresh on each of a connection's first five
  // runs; then PostgreSQL keeps a generic plan only if it does not look dearer than the custom
  // ones. For the append's decision statement it never did: `pg_stat_statements` showed 0.19 ms
  // of planning on every flush of one request (0.67 ms in all, 0.48 ms with generic plans;
  // issue 11). Every statement in these functions is a lookup by a unique key or a scan of the
  // log's order, for which one plan is right whatever the arguments.
  {
    id: 'event-store/008-generic-plans',
    sql: `
      alter function es_append_batch(int[], text[], text[], int[], uuid[], text[], jsonb[], jsonb[]) set plan_cache_mode = force_generic_plan;
      alter function es_append(text, text, uuid[], text[], jsonb[], jsonb[]) set plan_cache_mode = force_generic_plan;
      alter function es_read_page(xid8, bigint, int, text[], int) set plan_cache_mode = force_generic_plan;
    `,
  },
  // A live reader that reached the head reads again only once something commits (issue 11: the
  // read after every page came back empty, half of all reads under load). A filtered page ends
  // at its scanned window's end, which is the head only if the window was not full: its last
  // row now says how many entries it scanned. Same signature, and every row as older readers
  // expect it. `create or replace` sets the function's settings anew: 008's generic plans are
  // restated in its SET clause.
  { id: 'event-store/009-read-page-scanned', sql: readPageFunction(2) },
  // The appends read a stream's revision from the log and no longer keep es_streams (an upsert
  // per stream on every flush), and the flush's usual batch takes four statements (see
  // appendBatchFunctionV2; issue 11). Same signatures and outcomes. The horizon watches
  // es_events alone. First, in the same snapshot, es_streams must agree with the log: from now
  // on the log alone says where each stream stands.
  {
    id: 'event-store/010-appends-revisions-from-log',
    sql: `
      do $check$
      declare v_disagree bigint; v_example text;
      begin
        select count(*), min(coalesce(s.stream_id, e.stream_id)) into v_disagree, v_example
          from es_streams s
          full join (select stream_id, max(revision) as revision from es_events group by stream_id) e using (stream_id)
          where s.revision is distinct from e.revision;
        if v_disagree > 0 then
          raise exception 'es_streams disagrees with es_events on % stream(s), e.g. %', v_disagree, v_example
            using hint = 'A stream''s revision must be the newest revision of its events; fix the rows written outside the event store, then start again.';
        end if;
      end
      $check$;
${appendBatchFunctionV2()}
${appendFunction({ replace: true, notifyInTransaction: false, revisionFromLog: true })}
      create or replace function es_read_horizon() returns xid8 language plpgsql volatile as $fn$
      begin
        return (${horizonSelect("'es_events'::regclass")});
      end
      $fn$;
    `,
  },
  // Dropped in a migration of its own, after 010 has committed: a flush that began before then
  // still runs the old functions and holds es_streams, and the drop waits for it, but the flushes
  // that begin meanwhile run the new ones, which do not touch the table, so none of them queues
  // behind the drop (in 010's own transaction they would have, and failed with 42P01 once the
  // table was gone).
  { id: 'event-store/011-drop-streams-table', sql: 'drop table es_streams;' },
  // The flush can carry the wake-up of live readers in its own transaction (p_wake: the channel,
  // or null), instead of a NOTIFY in a transaction of its own after it: that one cost about a
  // seventh of append throughput here (issue 11). An overload, so that gateways not yet upgraded
  // keep calling the 8-argument function.
  { id: 'event-store/012-append-batch-wake', sql: appendBatchFunctionV2(true) },
  // The readers' order, (transaction_id, position), becomes unique (013), and the index on
  // `position` alone goes (014). That index held the log's primary key, but no query reads by it,
  // and every event paid an entry in it: about an eighth of the WAL of a one-event append (513
  // against 446 bytes here). What readers need unique is the pair: a duplicated pair would make a
  // reader paging past it skip an event, and the pair, not `position` alone, is now what refuses
  // one (an insert or a COPY that sets positions itself). A reset of the sequence, which the old
  // key refused, repeats positions but no pair: transaction ids never repeat.
  // 013 builds the unique index without blocking appends (`concurrently`, outside a transaction;
  // a build interrupted halfway leaves an invalid index, dropped and built again on the next
  // start); 014 puts it in the old one's place in a brief exclusive lock, and makes
  // (stream_id, revision), unique and not null, the table's replica identity.
  {
    id: 'event-store/013-global-order-unique',
    concurrently: [
      'drop index concurrently if exists es_events_global_order_key',
      'create unique index concurrently es_events_global_order_key on es_events (transaction_id, position) include (type)',
    ],
  },
  {
    id: 'event-store/014-no-position-index',
    sql: `
      set local lock_timeout = '10s';
      drop index es_events_global_order;
      alter index es_events_global_order_key rename to es_events_global_order;
      alter table es_events replica identity using index es_events_stream_id_revision_key;
      alter table es_events drop constraint es_events_pkey;
    `,
  },
  // The flush with less executor work on every call (see appendBatchFunctionV3; issue 11): three
  // statements for the usual batch, and the request-by-request path set up only when it runs.
  // Same signatures and outcomes, both overloads (gateways not yet upgraded call the 8-argument one).
  { id: 'event-store/015-append-batch-leaner-flush', sql: appendBatchFunctionV3(false) + appendBatchFunctionV3(true) },
];

/**
 * `es_read_horizon()`: the smallest transaction id still in flight among the backends holding a
 * lock on the event tables, else the next id to be assigned. A writer draws its id only after
 * locking the tables, so a writer not seen here will draw an id at or above the snapshot's xmax,
 * which bounds the horizon. A writer that finishes while this runs has committed before the
 * next statement (the read) takes its snapshot.
 *
 * `es_read_page(after, max, types, window)`: the events after `after` that a reader may see
 * (below the horizon, so no gap can fill in later). Unfiltered (`types` null): at most `max`
 * events. Filtered: first the end of a window of at most `window` visible entries (index only),
 * then the matching events up to it; a last row with a null id carries the window's end, the
 * page's checkpoint when fewer than `max` events matched.
 */
function readFunctions(): string {
  return `
      create function es_read_horizon() returns xid8 language sql volatile as $fn$
        ${HORIZON_SELECT}
      $fn$;
${readPageFunction(1)}`;
}

/**
 * The `es_read_page` function; 006 created it, 009 made its window-end row carry how many log
 * entries the window scanned (in `revision`, null in the first version; readers of that row
 * only ever read its position), so that a reader knows whether it reached the horizon.
 */
function readPageFunction(version: 1 | 2): string {
  const createOrReplace = version === 1 ? 'create function' : 'create or replace function';
  const scanned = version === 1 ? 'null::bigint' : 'v_scanned';
  return `
      ${createOrReplace} es_read_page(p_after_commit xid8, p_after_prepare bigint, p_max int, p_types text[], p_window int)
      returns table (id text, stream_id text, revision bigint, type text, data jsonb, metadata jsonb, commit text, prepare bigint, recorded_at timestamptz)
      language plpgsql volatile
      -- Generic plans are cached per connection; planned on an empty table they would scan it.
      set enable_seqscan = off${version === 1 ? '' : '\n      set plan_cache_mode = force_generic_plan'}
      as $fn$
      declare
        v_horizon xid8 := es_read_horizon();
        v_end_commit xid8;
        v_end_prepare bigint;
        v_scanned bigint;
      begin
        if p_types is null then
          return query
            select e.event_id::text, e.stream_id, e.revision, e.type, e.data, e.metadata, e.transaction_id::text, e.position, e.recorded_at
            from es_events e
            where (e.transaction_id, e.position) > (p_after_commit, p_after_prepare) and e.transaction_id < v_horizon
            order by e.transaction_id, e.position limit p_max;
          return;
        end if;
        select w.transaction_id, w.position, w.n into v_end_commit, v_end_prepare, v_scanned from (
          select e.transaction_id, e.position, row_number() over (order by e.transaction_id, e.position) as n from es_events e
          where (e.transaction_id, e.position) > (p_after_commit, p_after_prepare) and e.transaction_id < v_horizon
          order by e.transaction_id, e.position limit p_window
        ) w order by w.transaction_id desc, w.position desc limit 1;
        if v_end_commit is null then return; end if;
        return query
          select e.event_id::text, e.stream_id, e.revision, e.type, e.data, e.metadata, e.transaction_id::text, e.position, e.recorded_at
          from es_events e
          where (e.transaction_id, e.position) > (p_after_commit, p_after_prepare)
            and (e.transaction_id, e.position) <= (v_end_commit, v_end_prepare)
            and e.type = any(p_types)
          order by e.transaction_id, e.position limit p_max;
        return query select null::text, null::text, ${scanned}, null::text, null::jsonb, null::jsonb, v_end_commit::text, v_end_prepare, null::timestamptz;
      end
      $fn$;
    `;
}

/**
 * `es_append_batch`'s signature, the same in every version, and in the overload that 012 added
 * with `p_wake` (callers prepare it by name).
 */
function appendBatchSignature(wake = false): string {
  return `es_append_batch(
        p_req int[], p_stream text[], p_expected text[], p_count int[],
        p_ids uuid[], p_types text[], p_data jsonb[], p_metadata jsonb[]${wake ? ', p_wake text' : ''}
      ) returns table (outcomes text[], revisions bigint[], commits text[], prepares bigint[])`;
}

/**
 * `es_append_batch`'s variables, shared by its versions; `own` declares a version's own,
 * `repeats` is `v_repeats`' initializer (the version computes it in its first statement if empty),
 * and `counts` false leaves out the batch's sizes (declared by an enclosing block).
 */
function appendBatchDeclarations(own: string, repeats: string, counts = true): string {
  return `      declare
${counts ? APPEND_BATCH_COUNTS : ''}${own ? `        ${own}\n` : ''}        s_names text[]; s_revs bigint[]; s_dirty boolean[];
        x_ids uuid[]; x_streams text[]; x_revs bigint[];
        e_part int[] := array_fill(null::int, array[n_events]);
        e_stream text[] := array_fill(null::text, array[n_events]);
        e_rev bigint[] := array_fill(null::bigint, array[n_events]);
        first_event int[] := array_fill(null::int, array[n_parts]);
        o_out text[] := array_fill(null::text, array[n_parts]);
        o_rev bigint[] := array_fill(null::bigint, array[n_parts]);
        o_dup uuid[] := array_fill(null::uuid, array[n_parts]);
        o_commit text[] := array_fill(null::text, array[n_parts]);
        o_prep bigint[] := array_fill(null::bigint, array[n_parts]);
        v_ins_ids uuid[]; v_ins_pos bigint[]; v_first bigint[];
        v_offset int := 1;
        v_p int; v_q int; v_end int; v_e int; v_k int; v_s int;
        v_cur bigint; v_exp text; v_found int; v_foreign int; v_dup_rev bigint; v_dup_id uuid;
        v_ok boolean; v_any_insert boolean := false; v_any_dup boolean := false;
        v_repeats boolean${repeats};
        v_xid text; v_row record;
`;
}

/**
 * The usual batch's decision, part by part (distinct streams): each part's outcome, its stream's
 * new revision and its first event's revision, from the current revisions of `source` (see
 * `streamRevisionJoin`); every part of a request appends or none does. Version 2 also carries
 * each part's first event (`fe`), which version 1 computed in a statement of its own.
 */
function decidedParts(source: 'es_streams' | 'es_events'): string {
  const log = source === 'es_events';
  return `            from (
              select c.part,${log ? ' c.fe,' : ''}
                case when c.req_ok then 'appended' when c.ok then 'not_attempted' else 'wrong_expected_revision' end as outcome,
                case when c.req_ok then c.cur + c.cnt when c.ok then null else nullif(c.cur, -1) end as rev,
                case when c.req_ok then c.cur + 1 end as first_rev
              from (
                select k.*, bool_and(k.ok) over (partition by k.req) as req_ok from (
                  select p.n as part, p.req, p.cnt, ${log ? '(sum(p.cnt) over (order by p.n) - p.cnt + 1)::int as fe,\n                    ' : ''}coalesce(st.revision, -1) as cur,
                    ${expectedRevisionHolds(20)} as ok
                  from unnest(p_req, p_stream, p_expected, p_count) with ordinality as p(req, stream, expected, cnt, n)
                  ${streamRevisionJoin(source, 'p.stream')}
                ) k
              ) c
            ) d;`;
}

/**
 * Whether part `p`'s expected revision (`p.expected`) holds for its stream's current revision
 * (`st.revision`, null: no stream); false, never null, for an expectation it does not know. The
 * set-based checks of versions 1 to 3; `indent` is the closing line's.
 */
function expectedRevisionHolds(indent: number): string {
  const pad = ' '.repeat(indent);
  return `coalesce(case p.expected
${pad}  when 'any' then true
${pad}  when 'no_stream' then st.revision is null
${pad}  when 'stream_exists' then st.revision is not null
${pad}  else case when p.expected ~ '^[0-9]+$' then st.revision = p.expected::bigint else false end
${pad}end, false)`;
}

/**
 * The usual batch's write: every appended part's events, numbered from its first revision, as
 * the CTE `inserted` (event id and position of each row), indented by `indent` spaces.
 */
function insertedEvents(indent: number): string {
  return [
    'with inserted as (',
    '  insert into es_events (stream_id, revision, event_id, type, data, metadata)',
    "  select pp.stream, pp.first_rev + (e.n - pp.fe), e.id, e.type, e.data, coalesce(e.metadata, '{}'::jsonb)",
    '  from unnest(p_ids, p_types, p_data, p_metadata) with ordinality as e(id, type, data, metadata, n)',
    '  join (select t.stream, t.first_rev, t.fe, t.fe + t.cnt - 1 as le',
    '        from unnest(p_stream, v_first, first_event, p_count) as t(stream, first_rev, fe, cnt)',
    '        where t.first_rev is not null) pp on e.n between pp.fe and pp.le',
    '  order by e.n',
    '  returning es_events.event_id, es_events.position',
    ')',
  ]
    .map((line) => `${' '.repeat(indent)}${line}\n`)
    .join('');
}

/**
 * `st.revision`: the current revision of the stream named by `streamColumn` (null: no stream),
 * from `es_streams` (until 010) or from the log itself: the newest entry of its
 * (stream_id, revision) index, which the stream's advisory lock keeps still while it is read.
 */
function streamRevisionJoin(source: 'es_streams' | 'es_events', streamColumn: string): string {
  return source === 'es_streams'
    ? `left join es_streams st on st.stream_id = ${streamColumn}`
    : `left join lateral (select max(x.revision) as revision from es_events x where x.stream_id = ${streamColumn}) st on true`;
}

/**
 * The part of `es_append_batch` that decides request by request: a batch with repeated streams
 * or event ids, or an id already in the log (a retry). Runs after the locks, with `v_repeats`
 * set; shared by every version of the function (from version 3 on, also any batch that fails a
 * check). With `nullExpectedRefused` (version 3) a part without an expected revision (null) is
 * refused, as version 3's batch check refuses it; in versions 1 and 2 this path let it append
 * (the adapter always sends one).
 */
function appendBatchPerRequest(revisions: 'es_streams' | 'es_events', { nullExpectedRefused = false } = {}): string {
  const expectationHolds = `v_exp = 'any'
                    or (v_exp = 'no_stream' and v_cur < 0)
                    or (v_exp = 'stream_exists' and v_cur >= 0)
                    or (v_exp ~ '^[0-9]+$' and v_cur = v_exp::bigint)`;
  return `        select coalesce(array_agg(u.s), '{}'), coalesce(array_agg(coalesce(st.revision, -1)), '{}'), coalesce(array_agg(false), '{}')
          into s_names, s_revs, s_dirty
          from (select distinct s from unnest(p_stream) s) u ${streamRevisionJoin(revisions, 'u.s')};
        select coalesce(array_agg(e.event_id), '{}'), coalesce(array_agg(e.stream_id), '{}'), coalesce(array_agg(e.revision), '{}')
          into x_ids, x_streams, x_revs
          from es_events e where e.event_id = any(p_ids);
        for v_p in 1..n_parts loop
          first_event[v_p] := v_offset;
          for v_e in v_offset .. v_offset + p_count[v_p] - 1 loop e_part[v_e] := v_p; e_stream[v_e] := p_stream[v_p]; end loop;
          v_offset := v_offset + p_count[v_p];
        end loop;

        v_p := 1;
        while v_p <= n_parts loop
          v_end := v_p;
          while v_end < n_parts and p_req[v_end + 1] = p_req[v_p] loop v_end := v_end + 1; end loop;
          v_ok := true;
          for v_q in v_p .. v_end loop
            v_s := array_position(s_names, p_stream[v_q]);
            v_found := 0; v_foreign := 0; v_dup_rev := null; v_dup_id := null;
            for v_e in first_event[v_q] .. first_event[v_q] + p_count[v_q] - 1 loop
              v_k := array_position(x_ids, p_ids[v_e]);
              if v_k is not null then
                v_found := v_found + 1;
                if x_streams[v_k] <> p_stream[v_q] then v_foreign := v_foreign + 1;
                elsif v_dup_rev is null or x_revs[v_k] > v_dup_rev then v_dup_rev := x_revs[v_k]; v_dup_id := p_ids[v_e];
                end if;
              elsif v_repeats then
                -- Appended earlier in this batch (only looked for when the batch repeats an id)?
                select k into v_k from unnest(array_positions(p_ids, p_ids[v_e])) k
                  where k < first_event[v_q] and e_rev[k] is not null limit 1;
                if v_k is not null then
                  v_found := v_found + 1;
                  if p_stream[e_part[v_k]] <> p_stream[v_q] then v_foreign := v_foreign + 1;
                  elsif v_dup_rev is null or e_rev[v_k] > v_dup_rev then v_dup_rev := e_rev[v_k]; v_dup_id := p_ids[v_e];
                  end if;
                end if;
              end if;
            end loop;
            if v_found > 0 then
              if v_found = p_count[v_q] and v_foreign = 0 then
                o_out[v_q] := 'duplicate'; o_rev[v_q] := v_dup_rev; o_dup[v_q] := v_dup_id;
              else
                o_out[v_q] := 'event_id_conflict'; v_ok := false;
              end if;
              continue;
            end if;
            v_cur := s_revs[v_s];
            v_exp := p_expected[v_q];
            if not ${nullExpectedRefused ? `coalesce(${expectationHolds}, false)` : `(${expectationHolds})`} then
              o_out[v_q] := 'wrong_expected_revision';
              o_rev[v_q] := case when v_cur < 0 then null else v_cur end;
              v_ok := false;
              continue;
            end if;
            o_out[v_q] := 'appended';
            o_rev[v_q] := v_cur + p_count[v_q];
          end loop;

          for v_q in v_p .. v_end loop
            if not v_ok then
              if o_out[v_q] in ('appended', 'duplicate') then o_out[v_q] := 'not_attempted'; o_rev[v_q] := null; o_dup[v_q] := null; end if;
            elsif o_out[v_q] = 'appended' then
              v_s := array_position(s_names, p_stream[v_q]);
              for v_e in first_event[v_q] .. first_event[v_q] + p_count[v_q] - 1 loop
                s_revs[v_s] := s_revs[v_s] + 1;
                e_rev[v_e] := s_revs[v_s];
              end loop;
              s_dirty[v_s] := true;
              v_any_insert := true;
            elsif o_out[v_q] = 'duplicate' then
              v_any_dup := true;
            end if;
          end loop;
          v_p := v_end + 1;
        end loop;

        if v_any_insert then${revisions === 'es_events' ? '' : `
          insert into es_streams as s (stream_id, revision)
            select s_names[i], s_revs[i] from generate_subscripts(s_names, 1) i where s_dirty[i]
            on conflict (stream_id) do update set revision = excluded.revision;`}
          with inserted as (
            insert into es_events (stream_id, revision, event_id, type, data, metadata)
            -- unnest, not subscripts: a subscript into a flat array of variable-length values
            -- walks it from the start, which made large batches quadratic.
            select t.stream, t.rev, t.id, t.type, t.data, coalesce(t.metadata, '{}'::jsonb)
            from unnest(e_stream, e_rev, p_ids, p_types, p_data, p_metadata) with ordinality as t(stream, rev, id, type, data, metadata, n)
            where t.rev is not null order by t.n
            returning es_events.event_id, es_events.position
          )
          select array_agg(i.event_id), array_agg(i.position) into v_ins_ids, v_ins_pos from inserted i;
          v_xid := pg_current_xact_id()::text;
          for v_q in 1 .. n_parts loop
            if o_out[v_q] = 'appended' then
              o_commit[v_q] := v_xid;
              o_prep[v_q] := v_ins_pos[array_position(v_ins_ids, p_ids[first_event[v_q] + p_count[v_q] - 1])];
            end if;
          end loop;
        end if;
        if v_any_dup then
          for v_row in select e.event_id, e.transaction_id::text as commit, e.position from es_events e where e.event_id = any(o_dup) loop
            for v_q in 1 .. n_parts loop
              if o_dup[v_q] = v_row.event_id then o_commit[v_q] := v_row.commit; o_prep[v_q] := v_row.position; end if;
            end loop;
          end loop;
        end if;
        return query select o_out, o_rev, o_commit, o_prep;
`;
}

/**
 * `es_append_batch`: the flush of the adapter's group commit. Takes parts (one stream's events
 * with its expected revision, `p_req` grouping the parts of one atomic request, in request
 * order) and returns one outcome per part. Each request is decided on the state that the
 * requests before it in the batch left (same-stream requests see each other in order); a
 * request whose idempotency or revision check fails appends nothing and the others go on, so
 * no subtransaction is needed. Reads are set-based (two queries for the whole batch) and the
 * writes are one INSERT per table, whatever the batch size. (As 004 created it; see
 * `appendBatchFunctionV2` for the version 010 put in its place.)
 *
 * Outcomes: appended | duplicate (a retry: its ids are already in that stream) |
 * wrong_expected_revision | event_id_conflict | not_attempted (another part of the same
 * atomic request failed).
 */
function appendBatchFunction(): string {
  return `
      create function ${appendBatchSignature()}
      language plpgsql as $fn$
${appendBatchDeclarations('v_hash bigint;', ' := (select count(distinct x) from unnest(p_ids) x) < n_events')}      begin
        -- Every stream of the batch locked in one order shared by all writers (no deadlock
        -- between gateways flushing at once), before the transaction draws its id: global
        -- order follows the per-stream lock order (see the adapter's header).
        for v_hash in select distinct hashtextextended(s, 0) from unnest(p_stream) s order by 1 loop
          perform pg_advisory_xact_lock(v_hash);
        end loop;
        -- Fast path, the usual batch: distinct streams, no event id seen before. Decided and
        -- written set-based, a fixed number of statements whatever the batch size.
        if not v_repeats
           and (select count(distinct s) from unnest(p_stream) s) = n_parts
           and not exists (select 1 from es_events e where e.event_id = any(p_ids)) then
          select coalesce(array_agg(x.fe order by x.n), '{}') into first_event
            from (select u.n, sum(u.cnt) over (order by u.n) - u.cnt + 1 as fe from unnest(p_count) with ordinality as u(cnt, n)) x;
          select coalesce(array_agg(d.outcome order by d.part), '{}'), coalesce(array_agg(d.rev order by d.part), '{}'),
                 coalesce(array_agg(d.first_rev order by d.part), '{}')
            into o_out, o_rev, v_first
${decidedParts('es_streams')}
          if 'appended' = any(o_out) then
            insert into es_streams as s (stream_id, revision)
              select t.stream, t.rev from unnest(p_stream, o_out, o_rev) as t(stream, outcome, rev) where t.outcome = 'appended'
              on conflict (stream_id) do update set revision = excluded.revision;
${insertedEvents(12)}            select coalesce(array_agg(li.position order by t.n), '{}') into o_prep
              from unnest(o_out, first_event, p_count) with ordinality as t(outcome, fe, cnt, n)
              left join inserted li on t.outcome = 'appended' and li.event_id = p_ids[t.fe + t.cnt - 1];
            v_xid := pg_current_xact_id()::text;
            select coalesce(array_agg(case when u.x = 'appended' then v_xid end order by u.n), '{}') into o_commit
              from unnest(o_out) with ordinality as u(x, n);
          end if;
          return query select o_out, o_rev, o_commit, o_prep;
          return;
        end if;

${appendBatchPerRequest('es_streams')}      end
      $fn$;
    `;
}

/**
 * `es_append_batch` as 010 replaced it: the same outcomes, in fewer statements and without
 * `es_streams` (issue 11).
 * - A stream's revision is read from the log's (stream_id, revision) index. The `es_streams`
 *   row repeated it and cost an upsert per stream on every flush: a lookup, an update and its
 *   WAL (about a fifth of the WAL per one-event append).
 * - The usual batch (distinct streams, fresh event ids) takes four statements instead of about a
 *   dozen. PL/pgSQL runs each statement through the executor (set-up, snapshot, tear-down), a
 *   cost that every flush paid whatever its size. One statement computes the lock keys in the
 *   shared order and the batch's shape; one takes the locks, before any read of the tables
 *   takes its snapshot; one checks that no event id is in the log yet and decides every part;
 *   one writes the events and gathers their positions. The transaction draws its id inside the
 *   last, which has locked `es_events` by then (see the horizon).
 * - The result goes back through the output columns, without a query.
 */
function appendBatchFunctionV2(wake = false): string {
  return `
      ${wake ? 'create function' : 'create or replace function'} ${appendBatchSignature(wake)}
      language plpgsql
      set enable_seqscan = off
      set plan_cache_mode = force_generic_plan
      as $fn$
${appendBatchDeclarations('v_locks bigint[]; v_distinct boolean; v_fresh boolean;', '')}      begin
        select (select coalesce(array_agg(k.h order by k.h), '{}') from (select distinct hashtextextended(s, 0) as h from unnest(p_stream) s) k),
               (select count(distinct x) from unnest(p_ids) x) < n_events,
               (select count(distinct s) from unnest(p_stream) s) = n_parts
          into v_locks, v_repeats, v_distinct;
        -- Every stream of the batch locked in one order shared by all writers (no deadlock
        -- between gateways flushing at once), before the transaction draws its id: global
        -- order follows the per-stream lock order (see the adapter's header). unnest keeps the
        -- array's order, and the statements below take their snapshots after this one.
        perform pg_advisory_xact_lock(l.h) from unnest(v_locks) as l(h);${wake ? `
        -- The wake-up of live readers, sent by this transaction's commit (dropped if it aborts).
        if p_wake is not null then perform pg_notify(p_wake, ''); end if;` : ''}
        if not v_repeats and v_distinct then
          select not exists (select 1 from es_events e where e.event_id = any(p_ids)),
                 coalesce(array_agg(d.outcome order by d.part), '{}'), coalesce(array_agg(d.rev order by d.part), '{}'),
                 coalesce(array_agg(d.first_rev order by d.part), '{}'), coalesce(array_agg(d.fe order by d.part), '{}')
            into v_fresh, o_out, o_rev, v_first, first_event
${decidedParts('es_events')}
          if v_fresh then
            if 'appended' = any(o_out) then
${insertedEvents(14)}              select coalesce(array_agg(li.position order by t.n), '{}'),
                     coalesce(array_agg(case when t.outcome = 'appended' then pg_current_xact_id()::text end order by t.n), '{}')
                into o_prep, o_commit
                from unnest(o_out, first_event, p_count) with ordinality as t(outcome, fe, cnt, n)
                left join inserted li on t.outcome = 'appended' and li.event_id = p_ids[t.fe + t.cnt - 1];
            end if;
            outcomes := o_out; revisions := o_rev; commits := o_commit; prepares := o_prep;
            return next;
            return;
          end if;
          -- An id is in the log already (a retry): decided again below, request by request.
          o_out := array_fill(null::text, array[n_parts]);
          o_rev := array_fill(null::bigint, array[n_parts]);
        end if;

${appendBatchPerRequest('es_events')}      end
      $fn$;
    `;
}

/**
 * `es_append_batch` as 015 replaced it (both overloads): the same outcomes for every batch the
 * adapter sends (distinct-in-order requests, a count and an expected revision per part), with
 * less executor work on every flush (issue 11). Measured on the bench's flush (16 one-event appends with exact
 * expected revisions, one connection, ten rounds alternating with version 2): the backend's CPU
 * per flush 591 against 704 µs, its round trip (commit and fsync included) 0.88 of version 2's;
 * with 64 appends per flush, 1,517 against 2,199 µs. Version 2's statements built and tore down
 * on every call a sort per ordered aggregate, two window functions and a range join.
 * - One statement takes the locks, in the shared order, and counts the distinct lock keys: as
 *   many as parts means distinct streams (two streams whose keys collide only send the batch
 *   down the request-by-request path, which is always right).
 * - One statement reads every stream's revision and checks the batch as a whole: every part's
 *   expected revision holds, no event id is in the log or repeated, and the counts add up. Then
 *   every request appends, and nothing is decided part by part.
 * - One statement writes the events, joined to their parts by an equality (a hash join, linear
 *   in the batch) and gathers each part's last position: the newest of its stream, since the
 *   streams are distinct and the events are written in order. When some part carries several
 *   events, one more statement first numbers each event within its part.
 * - Any other batch (a stream or an id repeated, a retry, a failed check) is decided request by
 *   request, as before, in a block whose variables are set up only when it runs.
 */
function appendBatchFunctionV3(wake: boolean): string {
  return `
      create or replace function ${appendBatchSignature(wake)}
      language plpgsql
      set enable_seqscan = off
      set plan_cache_mode = force_generic_plan
      as $fn$
      declare
${APPEND_BATCH_COUNTS}        v_locked bigint; v_batch_ok boolean; v_single boolean; v_revs bigint[]; v_event_part int[]; v_event_nth int[];
      begin
        -- Every stream of the batch locked in one order shared by all writers (no deadlock
        -- between gateways flushing at once), before the transaction draws its id: global
        -- order follows the per-stream lock order (see the adapter's header). The statements
        -- below take their snapshots after this one.
        perform pg_advisory_xact_lock(k.h) from (select distinct hashtextextended(s, 0) as h from unnest(p_stream) s order by 1) k;
        get diagnostics v_locked = row_count;${wake ? `
        -- The wake-up of live readers, sent by this transaction's commit (dropped if it aborts).
        if p_wake is not null then perform pg_notify(p_wake, ''); end if;` : ''}
        if v_locked = n_parts then
          select coalesce(array_agg(coalesce(st.revision, -1) + p.cnt order by p.n), '{}'),
                 coalesce(bool_and(coalesce(p.cnt >= 1, false) and ${expectedRevisionHolds(17)}), true)
                   and coalesce(sum(p.cnt), 0) = n_events
                   and not exists (select 1 from es_events e where e.event_id = any(p_ids))
                   and (select count(distinct x) from unnest(p_ids) x) = n_events,
                 coalesce(bool_and(p.cnt = 1), true)
            into v_revs, v_batch_ok, v_single
            from unnest(p_stream, p_expected, p_count) with ordinality as p(stream, expected, cnt, n)
            ${streamRevisionJoin('es_events', 'p.stream')};
          if v_batch_ok then
            -- Each event's part and its place in it (when some part has several; else the
            -- event's own place in the batch is its part's).
            if not v_single then
              select array_agg(p.n order by p.n, g.k), array_agg(g.k order by p.n, g.k) into v_event_part, v_event_nth
                from unnest(p_count) with ordinality as p(cnt, n), generate_series(1, p.cnt) as g(k);
            end if;
            with inserted as (
              insert into es_events (stream_id, revision, event_id, type, data, metadata)
              select p.stream, p.rev - p.cnt + coalesce(e.k, 1), e.id, e.type, e.data, coalesce(e.metadata, '{}'::jsonb)
              from unnest(v_event_part, v_event_nth, p_ids, p_types, p_data, p_metadata) with ordinality as e(part, k, id, type, data, metadata, n)
              join unnest(p_stream, v_revs, p_count) with ordinality as p(stream, rev, cnt, pn) on p.pn = coalesce(e.part, e.n)
              order by e.n
              returning es_events.stream_id, es_events.position
            )
            select coalesce(array_agg(l.position order by l.position), '{}') into prepares
              from (select max(i.position) as position from inserted i group by i.stream_id) l;
            outcomes := array_fill('appended'::text, array[n_parts]);
            revisions := v_revs;
            commits := array_fill(case when n_parts > 0 then pg_current_xact_id()::text end, array[n_parts]);
            return next;
            return;
          end if;
        end if;

        -- Decided request by request.
${appendBatchDeclarations('', ' := (select count(distinct x) from unnest(p_ids) x) < n_events', false)}        begin
${appendBatchPerRequest('es_events', { nullExpectedRefused: true })}        end;
      end
      $fn$;
    `;
}

/**
 * The `es_append` function; 002 created it with an in-transaction NOTIFY, 003 replaced it, and
 * 010 made it read the stream's revision from the log, as `es_append_batch` does (es_streams
 * is gone), restating 005's and 008's settings.
 */
function appendFunction(options: { replace: boolean; notifyInTransaction: boolean; revisionFromLog?: boolean }): string {
  const createOrReplace = options.replace ? 'create or replace function' : 'create function';
  const notify = options.notifyInTransaction ? "        perform pg_notify('es_events', '');\n" : '';
  const fromLog = options.revisionFromLog === true;
  return `
      -- One round trip per append: lock the stream, check idempotency and the expected
      -- revision, insert, notify. The advisory lock is taken before the transaction draws an
      -- id, so ids (and thus global order) follow the per-stream lock order.
      ${createOrReplace} es_append(
        p_stream text, p_expected text, p_ids uuid[], p_types text[], p_data jsonb[], p_metadata jsonb[]
      ) returns table (outcome text, next_revision bigint, commit_position text, prepare_position bigint)
      language plpgsql${fromLog ? '\n      set enable_seqscan = off\n      set plan_cache_mode = force_generic_plan\n     ' : ''} as $fn$
      declare
        v_current bigint;
        v_first bigint;
        v_existing int;
        v_foreign int;
      begin
        perform pg_advisory_xact_lock(hashtextextended(p_stream, 0));
        select count(*), count(*) filter (where e.stream_id <> p_stream)
          into v_existing, v_foreign from es_events e where e.event_id = any(p_ids);
        if v_existing > 0 then
          if v_existing = cardinality(p_ids) and v_foreign = 0 then
            return query select 'duplicate', e.revision, e.transaction_id::text, e.position
              from es_events e where e.event_id = any(p_ids) order by e.revision desc limit 1;
          else
            return query select 'event_id_conflict', null::bigint, null::text, null::bigint;
          end if;
          return;
        end if;
        ${fromLog ? 'select max(e.revision) into v_current from es_events e where e.stream_id = p_stream;' : 'select s.revision into v_current from es_streams s where s.stream_id = p_stream;'}
        if not (p_expected = 'any'
                or (p_expected = 'no_stream' and v_current is null)
                or (p_expected = 'stream_exists' and v_current is not null)
                or (p_expected ~ '^[0-9]+$' and v_current is not null and v_current = p_expected::bigint)) then
          return query select 'wrong_expected_revision', v_current, null::text, null::bigint;
          return;
        end if;
        v_first := coalesce(v_current + 1, 0);
${fromLog ? '' : `        insert into es_streams as s (stream_id, revision) values (p_stream, v_first + cardinality(p_ids) - 1)
          on conflict (stream_id) do update set revision = excluded.revision;
`}        return query
          with inserted as (
            insert into es_events (stream_id, revision, event_id, type, data, metadata)
            select p_stream, v_first + t.n - 1, t.id, t.type, t.data, coalesce(t.metadata, '{}'::jsonb)
            from unnest(p_ids, p_types, p_data, p_metadata) with ordinality as t(id, type, data, metadata, n)
            returning es_events.revision, es_events.transaction_id, es_events.position
          )
          select 'appended', i.revision, i.transaction_id::text, i.position from inserted i order by i.position desc limit 1;
${notify}      end
      $fn$;
    `;
}

const NOTIFY_CHANNEL = 'es_events';
const NOTIFY_STATEMENT = `select pg_notify('${NOTIFY_CHANNEL}', '')`;

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

const positionRow = z.object({ commit: z.string(), prepare: z.number() });
const eventRow = z.object({
  id: z.string(),
  stream_id: z.string(),
  revision: z.number(),
  type: z.string(),
  data: z.unknown(),
  metadata: z.record(z.string(), z.unknown()),
  commit: z.string(),
  prepare: z.number(),
  recorded_at: z.string(),
});

/** A row of `es_read_page`: an event, or (null id) the end of a filtered read's scanned window. */
const pageRow = eventRow.extend({
  id: z.string().nullable(),
  stream_id: z.string().nullable(),
  revision: z.number().nullable(),
  type: z.string().nullable(),
  metadata: z.record(z.string(), z.unknown()).nullable(),
  recorded_at: z.string().nullable(),
});

/** An event row of `es_read_page` (every column set), or null for its window-end row. */
function pageEvent(row: z.infer<typeof pageRow>): RecordedEvent | null {
  const { id, stream_id, revision, type, metadata, recorded_at } = row;
  if (id === null) return null;
  if (stream_id === null || revision === null || type === null || metadata === null || recorded_at === null) {
    throw new Error(`es_read_page returned an incomplete event row (${id})`);
  }
  return toRecorded({ ...row, id, stream_id, revision, type, metadata, recorded_at });
}

const toPosition = (row: z.infer<typeof positionRow>): GlobalPosition => ({
  commit: BigInt(row.commit),
  prepare: BigInt(row.prepare),
});

const toRecorded = (row: z.infer<typeof eventRow>): RecordedEvent => ({
  id: row.id,
  streamId: row.stream_id,
  revision: row.revision,
  type: row.type,
  data: row.data,
  metadata: row.metadata,
  position: toPosition(row),
  recordedAt: row.recorded_at,
});

const eventColumns = sql.fragment`
  event_id::text as id, stream_id, revision, type, data, metadata,
  transaction_id::text as commit, position as prepare, recorded_at
`;

/** The read horizon (`es_read_horizon`, see its migration), for the bulk read's one fixed horizon. */
const horizonQuery = sql.type(z.object({ horizon: z.string() }))`select es_read_horizon()::text as horizon`;


export type PostgresEventStoreOptions = {
  /** Connection string for the LISTEN connection that wakes live subscriptions. */
  readonly listenUrl?: string;
  /** How many log entries a filtered read scans at most before it returns a checkpoint. */
  readonly scanWindow?: number;
  /** Group commit: most events one flush carries (a larger single request goes alone). */
  readonly maxBatchEvents?: number;
  /** Group commit: flushes in flight at once from this store (each holds one connection). */
  readonly maxConcurrentFlushes?: number;
  /**
   * Live readers are woken by a NOTIFY in a flush's own transaction when the last wake-up is at
   * least this old, else by one sent on its own at most this long after the last (5 ms).
   */
  readonly wakeIntervalMs?: number;
};

export function createPostgresEventStore(pool: DatabasePool, options: PostgresEventStoreOptions = {}): EventStore {
  const scanWindow = options.scanWindow ?? 10_000;
  const url = connectionUrlOf(pool);
  if (url === undefined) throw new Error('createPostgresEventStore: the pool must come from createDatabasePool (its URL opens the append connections)');
  const wakeups = createWakeups(options.listenUrl);
  const maxConcurrentFlushes = options.maxConcurrentFlushes ?? 1;

  // The group commit's flushes run on plain pg connections of their own, one per flush in
  // flight, with `es_append_batch` prepared: through slonik's pool each flush cost a connection
  // checkout, interceptors and statement parsing on both ends, work that a lone flush in flight
  // does serially with PostgreSQL's (issue 11).
  const flushConnections = Array.from({ length: maxConcurrentFlushes }, () => createPlainConnection(url, { applicationName: 'event-store-append' }));
  // Wake-ups need no durability: their own connection commits without waiting for the WAL
  // flush (pg_notify draws a transaction id, so its commit would otherwise wait for an fsync).
  const notifyConnection = createPlainConnection(url, { applicationName: 'event-store-notify', settings: { synchronous_commit: 'off' } });

  const groupCommit = createGroupCommit((requests, lane) => flush(requests, lane), {
    maxBatchEvents: options.maxBatchEvents ?? 2_000,
    maxConcurrentFlushes,
  });

  // Wakes live subscribers (this process's and others'). Only latency depends on it; they also poll.
  const wakeSchedule = createWakeupSchedule(
    () =>
      notifyConnection
        .get()
        .then((client) => client.query({ name: 'es_notify', text: NOTIFY_STATEMENT }))
        .then(() => undefined),
    options.wakeIntervalMs ?? 5,
  );

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
      const results: AppendResult[] = [];
      let failure: Error | undefined;
      for (const { streamId, expectedRevision } of request.parts) {
        const i = part++;
        const outcome = row.outcomes[i];
        const revision = row.revisions[i] ?? null;
        const commit = row.commits[i] ?? null;
        const prepare = row.prepares[i] ?? null;
        if (outcome === 'appended' || outcome === 'duplicate') {
          if (revision === null || commit === null || prepare === null) throw new Error('es_append_batch returned no position');
          results.push({ nextRevision: Number(revision), position: { commit: BigInt(commit), prepare: BigInt(prepare) } });
        } else if (outcome === 'wrong_expected_revision') {
          failure ??= new WrongExpectedRevisionError(streamId, String(expectedRevision ?? 'any'), revision === null ? 'no_stream' : Number(revision));
        } else if (outcome === 'event_id_conflict') {
          failure ??= new ConflictError('Some of these event ids were already used by other events');
        } else if (outcome !== 'not_attempted') {
          throw new Error(`unexpected append outcome ${String(outcome)}`);
        }
      }
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
    const client = await connection.get().catch((error: unknown) => {
      throw connectionLostError('event store: could not open the append connection', error);
    });
    let result: pg.QueryResult;
    try {
      result = await client.query({ name: 'es_append_batch', text: APPEND_BATCH_STATEMENT, values });
    } catch (error) {
      if (breaksConnection(error)) connection.drop(client);
      // PostgreSQL's own answer (57P01 for a terminated backend included) is passed on as it is.
      if (error instanceof pg.DatabaseError) throw error;
      throw connectionLostError('event store: the append connection was lost during a flush', error);
    }
    const parsed = batchRow.safeParse(result.rows[0]);
    if (!parsed.success) throw new Error(`es_append_batch returned an unexpected row: ${parsed.error.message}`);
    return parsed.data;
  }

  /** One page of the log in one round trip (`es_read_page`, see its migration). */
  async function readAll(opts: ReadAllOptions = {}): Promise<ReadAllPage> {
    const after = opts.after ?? START;
    const maxCount = opts.maxCount ?? 1_000;
    const types = opts.eventTypes ? sql.array([...opts.eventTypes], 'text') : null;
    const rows = await pool.any(sql.type(pageRow)`
      select * from es_read_page(${after.commit.toString()}::xid8, ${after.prepare.toString()}::int8, ${maxCount}, ${types}, ${scanWindow})
    `);
    const events: RecordedEvent[] = [];
    let windowEnd: GlobalPosition | undefined;
    let scanned: number | null = null;
    for (const row of rows) {
      const event = pageEvent(row);
      if (event) events.push(event);
      else {
        windowEnd = toPosition(row);
        scanned = row.revision;
      }
    }
    const last = events.at(-1)?.position;
    // Unfiltered: the page ends at its last event. Filtered: at the scanned window's end, unless
    // the page is full (then at its last event: more may match inside the window).
    const full = events.length === maxCount;
    const checkpoint = !windowEnd || (full && last) ? (last ?? after) : windowEnd;
    // At the horizon: a page that is not full, and, filtered, whose window was not full either
    // (a window-end row without its count comes from an older es_read_page: unknown). A filtered
    // read that scanned nothing returns no window row and is at the horizon too.
    const atHead = !full && (types === null || rows.length === 0 || (windowEnd !== undefined && scanned !== null && scanned < scanWindow));
    return { events, checkpoint, atHead };
  }

  // Live subscriptions of this process share their reads at the head (sharedTail.ts); `readAll`
  // itself always reads afresh.
  const tails = createSharedTails(readAll, wakeups);

  return {
    async append(streamId, events, { expectedRevision = 'any' } = {}) {
      assertAppendEvents(events);
      const [result] = await groupCommit.submit([{ streamId, events, expectedRevision }]);
      if (!result) throw new Error('append returned no result');
      return result;
    },

    async appendMany(requests) {
      assertAppendManyRequests(requests);
      return groupCommit.submit(requests);
    },

    async readStream(streamId, { fromRevision = 0, maxCount = 1_000_000 } = {}) {
      const rows = await pool.any(sql.type(eventRow)`
        select ${eventColumns} from es_events
        where stream_id = ${streamId} and revision >= ${fromRevision}
        order by revision limit ${maxCount}
      `);
      return rows.map(toRecorded);
    },

    readAll,

    // On a plain pg connection of its own (see postgresBulkRead.ts).
    readAllBulk: (opts = {}) => readAllBulk(pool, url, horizonQuery, opts),

    async *subscribeToAll(opts: SubscribeOptions = {}) {
      const unsubscribe = await wakeups.subscribe();
      try {
        yield* tails.subscribe(opts);
      } finally {
        unsubscribe();
      }
    },

    async headPosition() {
      const row = await pool.maybeOne(sql.type(positionRow)`
        select transaction_id::text as commit, position as prepare from es_events
        order by transaction_id desc, position desc limit 1
      `);
      return row ? toPosition(row) : START;
    },

    async ping() {
      await pool.oneFirst(sql.type(z.object({ ok: z.number() }))`select 1 as ok`);
    },

    async close() {
      await groupCommit.drained();
      await wakeSchedule.close();
      await Promise.all([...flushConnections, notifyConnection].map((c) => c.end()));
      await wakeups.close();
    },
  };
}

type QueuedAppend = {
  readonly parts: readonly AppendRequest[];
  readonly events: number;
  resolve(results: AppendResult[]): void;
  reject(error: unknown): void;
};

/**
 * Group commit (what KurrentDB's single writer does with its flush): append requests queue
 * while a flush is in flight; the next flush takes everything queued (up to `maxBatchEvents`)
 * in one round trip and one transaction, so one fsync carries many commands. A lone request
 * flushes at once: there is no timer, batching comes only from concurrency.
 *
 * Outcomes stay per request (the database function decides each one separately). If the whole
 * statement fails with an SQL error (e.g. two requests racing another process with the same
 * new event id), the batch is retried one request per transaction so that only the guilty
 * request fails. A lost connection is not retried: whether that transaction committed is
 * unknown, and each caller's own retry with the same event ids is idempotent.
 */
function createGroupCommit(
  flush: (requests: readonly QueuedAppend[], lane: number) => Promise<void>,
  options: { readonly maxBatchEvents: number; readonly maxConcurrentFlushes: number },
) {
  const queue: QueuedAppend[] = [];
  /** Flush lanes not in use (each flush in flight has its own connection). */
  const freeLanes = Array.from({ length: options.maxConcurrentFlushes }, (_, i) => i);
  const idleNow = () => freeLanes.length === options.maxConcurrentFlushes && queue.length === 0;
  let idle: Promise<void> | undefined;
  let settleIdle: (() => void) | undefined;

  const take = (): QueuedAppend[] => {
    const batch: QueuedAppend[] = [];
    let events = 0;
    while (queue.length > 0) {
      const next = queue[0];
      if (!next || (batch.length > 0 && events + next.events > options.maxBatchEvents)) break;
      batch.push(next);
      events += next.events;
      queue.shift();
    }
    return batch;
  };

  const run = async (batch: readonly QueuedAppend[], lane: number): Promise<void> => {
    try {
      await flush(batch, lane);
    } catch (error) {
      const state = sqlStateOf(error);
      const isolatable = batch.length > 1 && state !== undefined && !state.startsWith('08') && !state.startsWith('57');
      if (!isolatable) {
        for (const request of batch) request.reject(error);
        return;
      }
      for (const request of batch) await run([request], lane);
    }
  };

  const loop = async () => {
    const lane = freeLanes.pop();
    if (lane === undefined) return;
    try {
      for (let batch = take(); batch.length > 0; batch = take()) {
        await run(batch, lane);
        // One turn of the event loop (not a timer): the callers just answered usually append
        // again at once; let their next requests join the next flush instead of trailing it.
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    } finally {
      freeLanes.push(lane);
      if (idleNow()) {
        settleIdle?.();
        idle = undefined;
        settleIdle = undefined;
      }
    }
  };

  return {
    submit(parts: readonly AppendRequest[]): Promise<AppendResult[]> {
      return new Promise<AppendResult[]>((resolve, reject) => {
        queue.push({ parts, events: parts.reduce((n, p) => n + p.events.length, 0), resolve, reject });
        if (freeLanes.length > 0) void loop();
      });
    },
    /** Resolves once nothing is queued or in flight. */
    drained(): Promise<void> {
      if (idleNow()) return Promise.resolve();
      idle ??= new Promise<void>((resolve) => (settleIdle = resolve));
      return idle;
    },
  };
}

/**
 * One LISTEN connection per store, shared by all live subscriptions. Notifications only cut a
 * wait short; every wait is bounded, so a lost connection costs latency, never events.
 */
function createWakeups(listenUrl: string | undefined) {
  let users = 0;
  let closed = false;
  const waiters = new Set<() => void>();
  let notifications = 0;

  const wakeAll = () => {
    notifications++;
    for (const wake of waiters) wake();
    waiters.clear();
  };
  // A lost connection wakes every waiter too: what was notified meanwhile is unknown, so re-read.
  const listen = listenUrl ? createListenConnection({ url: listenUrl, channel: NOTIFY_CHANNEL, onNotification: wakeAll, onLost: wakeAll }) : undefined;
  const connect = () => (listen && !closed ? listen.open() : Promise.resolve(false));

  return {
    async subscribe() {
      users++;
      await connect();
      return () => {
        users--;
        if (users === 0) void listen?.release();
      };
    },
    /** Counts notifications: read it before a read, hand it to `next` after an empty one. */
    generation: () => notifications,
    listening: () => listen?.listening === true,
    /**
     * Resolves at once if a notification came since `seen`, else on the next one, after
     * `timeoutMs`, or on abort, whichever is first.
     */
    next(seen: number, timeoutMs: number, signal?: AbortSignal): Promise<void> {
      if (notifications !== seen || signal?.aborted) return Promise.resolve();
      if (users > 0 && !listen?.listening) void connect();
      return new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', done);
          waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, timeoutMs);
        signal?.addEventListener('abort', done, { once: true });
        waiters.add(done);
      });
    },
    async close() {
      closed = true;
      wakeAll();
      await listen?.release();
    },
  };
}
