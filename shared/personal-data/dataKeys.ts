import { createSecretKey, randomBytes } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { z } from 'zod';
import { ErasedError } from '../errors.ts';
import { connectionUrlOf, sql, type DatabasePool, type Queryable } from '../db/pool.ts';
import type { QuerySqlToken } from 'slonik';
import { createPlainConnection, type PlainConnection } from '../db/plainConnection.ts';
import { pgStatements, validatedRows } from '../db/pgStatements.ts';
import type { DataKey } from './fieldCipher.ts';
import type { KeyEncryptionKeys } from './keyEncryptionKeys.ts';
import { bufferedBytes } from '../random.ts';
import { cacheSize } from '../cacheSize.ts';

/** Whose personal data a value is: one data key each. For employees the subject is the employee id. */
export type DataSubject = { readonly tenantId: string; readonly subjectId: string };

/** A data key as stored: sealed under the KEK `kekId`, bound to `context` (wrapContext). */
export type SealedDataKey = { readonly keyId: string; readonly kekId: string; readonly sealed: string; readonly context: string };

/** A subject's key as stored now: usable, destroyed (erased), or never made. */
export type StoredKey = DataKey | 'destroyed';

export const subjectRef = (s: DataSubject): string => `${s.tenantId}/${s.subjectId}`;

/** Sealing for a subject whose key was destroyed: its personal data may not be written again. */
export class SubjectErasedError extends ErasedError {
  constructor(subject: DataSubject) {
    super(`The personal data of ${subject.subjectId} was erased`);
  }
}

/**
 * The data keys (`personal_data_keys`): one per subject, made on the first value sealed for it,
 * stored sealed by the key-encryption keys, destroyed on erasure.
 *
 * Caching: keys are cached in memory (bounded, least recently used first out, aged out after a
 * few minutes unused) for sealing only, and only keys this store inserted itself: `load` never
 * fills that cache, so a lookup that ran while a destruction was still uncommitted cannot put the
 * key back after it committed. A subject seen destroyed is remembered as such while cached
 * (destruction is final; aged out, the row says so again). Opening always reads the keys afresh
 * (`load`: one query per stream read or per page of the log), so a key destroyed by any process
 * is never used to open a value after its destruction committed; what `load` keeps is the
 * unwrapped form of a row it reads again, to spare the decipher, never the row itself. Sealing
 * with a cached key that another process destroyed meanwhile writes a value nobody can open any
 * more, which is harmless; and it does not happen in practice, since the decision to write it
 * would have been taken on a stream that does not end with the erasure and its append would fail
 * on the erasure's revision.
 */
export type DataKeyStore = {
  /** The key to seal the subject's values with; made on first use. `SubjectErasedError` once destroyed. */
  forSealing(subject: DataSubject): Promise<DataKey>;
  /** The stored keys of these subjects, read afresh in one query, by `subjectRef`; absent: none made. */
  load(subjects: readonly DataSubject[]): Promise<Map<string, StoredKey>>;
  /** The same, still sealed: for opening them elsewhere (a worker thread, bulkOpener.ts). */
  loadSealed?(subjects: readonly DataSubject[]): Promise<Map<string, SealedDataKey | 'destroyed'>>;
  /**
   * Destroys the subject's key in the transaction `queryable` runs in (so an erasure's event and
   * the destruction commit together). Idempotent: answers the first destruction's time. A
   * subject with no key yet gets a destroyed row, so none is ever made for it afterwards.
   */
  destroy(tenantId: string, subjectId: string, queryable: Queryable): Promise<{ readonly destroyedAt: string }>;
  isDestroyed(tenantId: string, subjectId: string, queryable?: Queryable): Promise<boolean>;
  /**
   * Drops the subjects' cached keys: after an append sealed with them failed (whatever the
   * reason: it may have committed nothing that flushed the WAL), a key committed without waiting
   * for the flush may be gone from the database after a crash, and must not seal anything more.
   */
  forget?(subjects: readonly DataSubject[]): void;
  /** Closes the store's own connection, if it opened one. */
  close?(): Promise<void>;
};

export type DataKeyStoreOptions = {
  /** Most keys kept in memory for sealing (default 10,000, a few MB). */
  readonly cacheSize?: number;
  /** How long a key unused by this process stays in its memory (default 5 minutes). */
  readonly cacheTtlMs?: number;
  /** The clock keys age by, in milliseconds (default `performance.now`); tests move their own. */
  readonly now?: () => number;
  /**
   * Commit new keys without waiting for the WAL flush. Only when the event store is this same
   * PostgreSQL database: the event sealed with the key commits later, synchronously, and a
   * synchronous commit flushes the WAL up to itself, the key's earlier commit included. With
   * another event store that durability does not follow, so the default waits.
   */
  readonly asynchronousCommit?: boolean;
};

const keyRows = z.object({
  tenants: z.array(z.string()),
  subjects: z.array(z.string()),
  key_ids: z.array(z.string()),
  kek_ids: z.array(z.string().nullable()),
  sealed_keys: z.array(z.string().nullable()),
});

const insertedKeyRow = z.object({ ref: z.string() });
const destroyedAtRow = z.object({ destroyed_at: z.string() });
const destroyedRow = z.object({ destroyed: z.boolean() });

/** What a sealed data key is bound to: its subject and id (a row copied to another subject does not open). */
export const wrapContext = (s: DataSubject, keyId: string): string => `${s.tenantId}/${s.subjectId}/${keyId}`;

const freshBytes = bufferedBytes();
const KEY_ID_BYTES = 9;

/** Every data key's id, as a regular expression source: its random bytes in base64url. */
export const KEY_ID_FORM = `[A-Za-z0-9_-]{${Math.ceil((KEY_ID_BYTES * 4) / 3)}}`;

/** A fresh data key for `subject` and its stored (sealed) form. */
export function makeDataKey(
  keks: KeyEncryptionKeys,
  subject: DataSubject,
): { readonly key: DataKey; readonly kekId: string; readonly sealed: string } {
  const raw = freshBytes(32);
  const keyId = freshBytes(KEY_ID_BYTES).toString('base64url');
  const { kekId, sealed } = keks.wrap(raw, wrapContext(subject, keyId));
  const key = createSecretKey(raw);
  // The key object holds its own copy: the raw bytes are not left for the heap to keep.
  raw.fill(0);
  return { key: { keyId, key }, kekId, sealed };
}

/** Largest number of new keys one insert carries. */
const MAX_BATCH = 1_000;

export function createDataKeyStore(pool: DatabasePool, keks: KeyEncryptionKeys, options: DataKeyStoreOptions = {}): DataKeyStore {
  // A store always keeps at least its last key.
  const size = cacheSize(options.cacheSize, 10_000);
  // A key destroyed by another process is never used here again (commands on an erased person are
  // refused before sealing, lookups read the row afresh), but it would stay in this process's
  // memory, where a heap dump would still find it, for as long as the cache kept it. Keys not used
  // for a while age out, and a sweep drops the aged ones even when nothing asks for them.
  const ttl = options.cacheTtlMs !== undefined && options.cacheTtlMs > 0 ? options.cacheTtlMs : 5 * 60_000;
  // A clock of its own is read on every look (lru-cache otherwise reuses a reading for a millisecond).
  const aging = { ttl, updateAgeOnGet: true, ...(options.now && { perf: { now: options.now }, ttlResolution: 0 }) };
  const cache = new LRUCache<string, DataKey | 'destroyed'>({ max: size, ...aging });
  // New keys go in on a plain connection of the store's own, the statement prepared once:
  // through slonik's pool each insert cost a checkout, interceptors and a parse on both ends,
  // several times the insert itself, once per handful of hires (inserts are one at a time, see
  // `drain`, so one connection is all they use). A pool without a known URL (a wrapped one) keeps
  // the pool. Lookups stay on the pool, whose connections serve them side by side.
  const url = connectionUrlOf(pool);
  const connection: PlainConnection | undefined =
    url === undefined ? undefined : createPlainConnection(url, { applicationName: 'personal-data-keys' });
  const statementOf = pgStatements('personal_data_keys');
  const commitMode = options.asynchronousCommit ? sql.fragment`'off'` : sql.fragment`current_setting('synchronous_commit')`;

  async function rowsOf<S extends z.ZodType>(query: QuerySqlToken<S>): Promise<readonly z.infer<S>[]> {
    if (!connection) return (await pool.any(query)) as readonly z.infer<S>[];
    const { text, name } = statementOf(query);
    const result = await connection.run({ text, values: [...query.values], ...(name !== undefined && { name }) }, 'data keys');
    return validatedRows(query, result.rows, 'data keys') as z.infer<S>[];
  }

  // Unwrapped keys, per subject with the stored form they came from. Every lookup still reads
  // the row afresh; only the decipher is spared when the row is as it was (every projection of a
  // process, every command on the same employee), and the same key object is handed out again.
  // A row seen destroyed, or destroyed here, drops the subject's entry.
  const unwrappedKeys = new LRUCache<string, { readonly from: string; readonly key: DataKey }>({ max: size, ...aging });
  // A fifth of the age: an unused key is gone within 1.2 times it.
  const sweep = setInterval(
    () => {
      cache.purgeStale();
      unwrappedKeys.purgeStale();
    },
    Math.max(1_000, ttl / 5),
  );
  sweep.unref();
  function unwrapped(ref: string, stored: SealedDataKey): DataKey {
    const from = `${stored.kekId}\n${stored.keyId}\n${stored.sealed}`;
    const hit = unwrappedKeys.get(ref);
    const key =
      hit?.from === from
        ? hit.key
        : { keyId: stored.keyId, key: createSecretKey(keks.unwrap(stored.kekId, stored.sealed, stored.context)) };
    unwrappedKeys.set(ref, { from, key });
    return key;
  }

  async function load(subjects: readonly DataSubject[]): Promise<Map<string, StoredKey>> {
    const found = new Map<string, StoredKey>();
    for (const [ref, stored] of await loadSealed(subjects)) found.set(ref, stored === 'destroyed' ? stored : unwrapped(ref, stored));
    return found;
  }

  // Lookups asked for in the same turn of the event loop share one query: the projections of a
  // process ask for the same page's keys together. The query starts after every request it
  // answers, so each is as fresh as its own query would be. (Coalescing only: a per-key cache,
  // which a batching library such as dataloader keeps by default, is what must not happen here.)
  type Batch = {
    readonly subjects: Map<string, DataSubject>;
    readonly found: Promise<Map<string, SealedDataKey | 'destroyed'>>;
    askers: number;
  };
  let gathering: Batch | undefined;
  function loadSealed(subjects: readonly DataSubject[]): Promise<Map<string, SealedDataKey | 'destroyed'>> {
    if (subjects.length === 0) return Promise.resolve(new Map());
    let batch = gathering;
    if (!batch) {
      const gathered = new Map<string, DataSubject>();
      const found = new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
        gathering = undefined;
        return querySealed([...gathered.values()]);
      });
      batch = gathering = { subjects: gathered, found, askers: 0 };
    }
    const asked = batch;
    asked.askers++;
    for (const subject of subjects) asked.subjects.set(subjectRef(subject), subject);
    return asked.found.then((found) => {
      // Alone in its query (a rebuild's pages), the answer is already this caller's own.
      if (asked.askers === 1) return found;
      const mine = new Map<string, SealedDataKey | 'destroyed'>();
      for (const subject of subjects) {
        const stored = found.get(subjectRef(subject));
        if (stored !== undefined) mine.set(subjectRef(subject), stored);
      }
      return mine;
    });
  }

  async function querySealed(subjects: readonly DataSubject[]): Promise<Map<string, SealedDataKey | 'destroyed'>> {
    const found = new Map<string, SealedDataKey | 'destroyed'>();
    if (subjects.length === 0) return found;
    // One row of arrays: validated once, not once per key (a replay page asks for thousands).
    // The lateral lookup keeps it on the primary key whatever the planner thinks of the list.
    const rows = await pool.one(sql.type(keyRows)`
      select coalesce(array_agg(k.tenant_id::text), '{}') as tenants, coalesce(array_agg(k.subject_id), '{}') as subjects,
             coalesce(array_agg(k.key_id), '{}') as key_ids, coalesce(array_agg(k.kek_id), '{}') as kek_ids,
             coalesce(array_agg(k.sealed_key), '{}') as sealed_keys
      from unnest(${sql.array(
        subjects.map((s) => s.tenantId),
        'uuid',
      )}, ${sql.array(
        subjects.map((s) => s.subjectId),
        'text',
      )}) as w(tenant_id, subject_id)
      cross join lateral (
        select * from personal_data_keys k where k.tenant_id = w.tenant_id and k.subject_id = w.subject_id
      ) k
    `);
    rows.tenants.forEach((tenantId, i) => {
      const subject = { tenantId, subjectId: rows.subjects[i] ?? '' };
      const keyId = rows.key_ids[i] ?? '';
      const kekId = rows.kek_ids[i];
      const sealed = rows.sealed_keys[i];
      const ref = subjectRef(subject);
      if (kekId == null || sealed == null) {
        cache.set(ref, 'destroyed');
        unwrappedKeys.delete(ref);
        found.set(ref, 'destroyed');
        return;
      }
      found.set(ref, { keyId, kekId, sealed, context: wrapContext(subject, keyId) });
    });
    return found;
  }

  type Waiting = { readonly subject: DataSubject; resolve(key: DataKey): void; reject(error: unknown): void };
  let queued: Waiting[] = [];
  let flushing = false;

  /** Makes keys for subjects that have none; a subject that has one (or a destroyed one) keeps it. */
  async function create(batch: readonly Waiting[]): Promise<void> {
    const made = new Map<string, { subject: DataSubject; key: DataKey; kekId: string; sealed: string }>();
    for (const { subject } of batch) {
      const ref = subjectRef(subject);
      if (made.has(ref)) continue;
      made.set(ref, { subject, ...makeDataKey(keks, subject) });
    }
    const rows = [...made.values()];
    const inserted = (
      await rowsOf(sql.type(insertedKeyRow)`
        insert into personal_data_keys (tenant_id, subject_id, key_id, kek_id, sealed_key)
        select w.tenant_id, w.subject_id, w.key_id, w.kek_id, w.sealed_key
        from unnest(
          ${sql.array(
            rows.map((r) => r.subject.tenantId),
            'uuid',
          )}, ${sql.array(
            rows.map((r) => r.subject.subjectId),
            'text',
          )}, ${sql.array(
            rows.map((r) => r.key.keyId),
            'text',
          )},
          ${sql.array(
            rows.map((r) => r.kekId),
            'text',
          )}, ${sql.array(
            rows.map((r) => r.sealed),
            'text',
          )}
        ) as w(tenant_id, subject_id, key_id, kek_id, sealed_key),
        (select set_config('synchronous_commit', ${commitMode}, true)) as commit_mode
        on conflict (tenant_id, subject_id) do nothing
        returning tenant_id::text || '/' || subject_id as ref
      `)
    ).map((r) => r.ref);
    const fresh = new Set(inserted);
    for (const [ref, row] of made) if (fresh.has(ref)) cache.set(ref, row.key);
    // Those that had a key already (made by another process, or destroyed) get what is stored.
    const existing = await load(rows.filter((r) => !fresh.has(subjectRef(r.subject))).map((r) => r.subject));
    for (const waiting of batch) {
      const ref = subjectRef(waiting.subject);
      const key = fresh.has(ref) ? made.get(ref)?.key : existing.get(ref);
      if (key === undefined) waiting.reject(new Error(`no data key could be made for ${ref}`));
      else if (key === 'destroyed') waiting.reject(new SubjectErasedError(waiting.subject));
      else waiting.resolve(key);
    }
  }

  // Concurrent first seals (hires) share one insert: while one is in flight the next ones queue,
  // and the next insert carries all of them.
  async function drain(): Promise<void> {
    flushing = true;
    try {
      while (queued.length > 0) {
        const batch = queued.slice(0, MAX_BATCH);
        queued = queued.slice(batch.length);
        await create(batch).catch((error: unknown) => {
          for (const waiting of batch) waiting.reject(error);
        });
      }
    } finally {
      flushing = false;
    }
  }

  return {
    forSealing(subject) {
      const cached = cache.get(subjectRef(subject));
      if (cached === 'destroyed') return Promise.reject(new SubjectErasedError(subject));
      if (cached) return Promise.resolve(cached);
      return new Promise<DataKey>((resolve, reject) => {
        queued.push({ subject, resolve, reject });
        if (!flushing) void drain();
      });
    },

    load,
    loadSealed,

    async destroy(tenantId, subjectId, queryable) {
      cache.delete(subjectRef({ tenantId, subjectId }));
      unwrappedKeys.delete(subjectRef({ tenantId, subjectId }));
      const destroyedAt = await queryable.oneFirst(sql.type(destroyedAtRow)`
        insert into personal_data_keys as k (tenant_id, subject_id, key_id, destroyed_at)
        values (${tenantId}, ${subjectId}, ${randomBytes(9).toString('base64url')}, now())
        on conflict (tenant_id, subject_id) do update
          set kek_id = null, sealed_key = null, destroyed_at = coalesce(k.destroyed_at, excluded.destroyed_at)
        returning k.destroyed_at
      `);
      return { destroyedAt };
    },

    close: async () => {
      clearInterval(sweep);
      cache.clear();
      unwrappedKeys.clear();
      await connection?.end();
    },

    forget(subjects) {
      for (const subject of subjects) if (cache.peek(subjectRef(subject)) !== 'destroyed') cache.delete(subjectRef(subject));
    },

    async isDestroyed(tenantId, subjectId, queryable = pool) {
      const destroyed = await queryable.maybeOneFirst(sql.type(destroyedRow)`
        select destroyed_at is not null as destroyed from personal_data_keys
        where tenant_id = ${tenantId} and subject_id = ${subjectId}
      `);
      return destroyed === true;
    },
  };
}
