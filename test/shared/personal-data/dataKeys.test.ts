import { randomUUID } from 'node:crypto';
import { ulid } from 'ulid';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../../shared/db/pool.ts';
import { createDataKeyStore, SubjectErasedError, subjectRef, type DataKeyStore } from '../../../shared/personal-data/dataKeys.ts';
import { openValue, sealValue } from '../../../shared/personal-data/fieldCipher.ts';
import { createKeyEncryptionKeys, generateKekEntry, parseKeyEncryptionKeys } from '../../../shared/personal-data/keyEncryptionKeys.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

const kekText = generateKekEntry();
const keks = () => createKeyEncryptionKeys(parseKeyEncryptionKeys(kekText));

let db: TestDatabase;
let keys: DataKeyStore;
/** Another process's store: its own cache. */
let other: DataKeyStore;

beforeAll(async () => {
  db = await createTestDatabase();
  keys = createDataKeyStore(db.pool, keks());
  other = createDataKeyStore(db.pool, keks(), { asynchronousCommit: true });
});
afterAll(async () => {
  await keys?.close?.();
  await other?.close?.();
  await db?.drop();
});

const subject = () => ({ tenantId: randomUUID(), subjectId: ulid() });

describe('a data key', () => {
  it('is made once per subject and stored only sealed', async () => {
    const s = subject();
    const [a, b] = await Promise.all([keys.forSealing(s), other.forSealing(s)]);
    // Two processes asking at once end up with the one stored key.
    expect(a?.keyId).toBe(b?.keyId);
    const sealed = sealValue(a, 'Ada');
    expect(openValue(b, sealed)).toBe('Ada');
    const row = await db.pool.one(sql.type(z.object({ key_id: z.string(), kek_id: z.string(), sealed_key: z.string() }))`
      select key_id, kek_id, sealed_key from personal_data_keys where tenant_id = ${s.tenantId} and subject_id = ${s.subjectId}
    `);
    expect(row.key_id).toBe(a.keyId);
    expect(row.sealed_key).toMatch(/^enc:A256GCM:/);
    expect(row.kek_id).toBe(keks().currentId);
  });

  it('of many subjects loads in one call, and unknown subjects are absent', async () => {
    const subjects = Array.from({ length: 50 }, subject);
    const made = await Promise.all(subjects.map((s) => keys.forSealing(s)));
    const unknown = subject();
    const loaded = await other.load([...subjects, unknown]);
    expect(loaded.size).toBe(50);
    subjects.forEach((s, i) => expect(loaded.get(subjectRef(s))).toMatchObject({ keyId: made[i]?.keyId }));
    expect(loaded.has(subjectRef(unknown))).toBe(false);
  });
});

describe('new keys', () => {
  it("go in on the store's own connection, and on a fresh one after that connection was ended under it", async () => {
    const stored = async (s: { tenantId: string; subjectId: string }) =>
      db.pool.maybeOneFirst(sql.type(z.object({ key_id: z.string() }))`
        select key_id from personal_data_keys where tenant_id = ${s.tenantId} and subject_id = ${s.subjectId}
      `);
    const first = subject();
    const firstKey = await keys.forSealing(first);
    expect(await stored(first)).toBe(firstKey.keyId);
    const terminated = await db.pool.anyFirst(sql.type(z.object({ ok: z.boolean() }))`
      select pg_terminate_backend(pid) as ok from pg_stat_activity
      where datname = current_database() and application_name = 'personal-data-keys'
    `);
    // Both stores of this file have inserted by now: each has its own connection.
    expect(terminated.length).toBeGreaterThanOrEqual(1);
    // The end of the session may reach pg before or after the next insert is sent: that insert
    // goes in on a fresh connection, or fails with PostgreSQL's answer (57P01) or as a lost
    // connection (08006), and the next one goes in on a fresh connection.
    const second = subject();
    const made = await keys.forSealing(second).catch((error: unknown) => {
      expect(['57P01', '08006']).toContain((error as { code?: string }).code);
      return keys.forSealing(second);
    });
    expect(await stored(second)).toBe(made.keyId);
  });
});

describe('lookups asked for together', () => {
  it('share one query, and each gets its own subjects as stored when it was asked', async () => {
    let queries = 0;
    const counted = new Proxy(db.pool, {
      get(target, property, receiver) {
        if (property === 'one') return (...args: Parameters<typeof target.one>) => (queries++, target.one(...args));
        const value: unknown = Reflect.get(target, property, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const store = createDataKeyStore(counted, keks());
    const [a, b, c] = [subject(), subject(), subject()];
    const made = await Promise.all([a, b].map((s) => keys.forSealing(s)));
    await db.pool.transaction((tx) => keys.destroy(c.tenantId, c.subjectId, tx));
    // The projections of one process, asking for the keys of the same page in one turn.
    const [first, second, third] = await Promise.all([store.load([a, b]), store.load([b, c]), store.loadSealed?.([a])]);
    expect(queries).toBe(1);
    expect([...first.keys()].sort()).toEqual([subjectRef(a), subjectRef(b)].sort());
    expect(first.get(subjectRef(a))).toMatchObject({ keyId: made[0]?.keyId });
    expect([...second.entries()]).toEqual([
      [subjectRef(b), first.get(subjectRef(b))],
      [subjectRef(c), 'destroyed'],
    ]);
    expect([...(third?.keys() ?? [])]).toEqual([subjectRef(a)]);
    // Asked for later, a lookup makes its own query and sees what committed meanwhile.
    await db.pool.transaction((tx) => keys.destroy(a.tenantId, a.subjectId, tx));
    expect((await store.load([a])).get(subjectRef(a))).toBe('destroyed');
    expect(queries).toBe(2);
  });
});

describe('a cached key', () => {
  it('is dropped when forgotten, so a key lost with a crash is made anew instead of sealing more', async () => {
    const s = subject();
    const first = await other.forSealing(s);
    // What a crash loses: the key's commit did not wait for the flush.
    await db.pool.query(sql.type(z.object({}))`delete from personal_data_keys where subject_id = ${s.subjectId}`);
    other.forget?.([s]);
    const second = await other.forSealing(s);
    expect(second.keyId).not.toBe(first.keyId);
    expect((await keys.load([s])).get(subjectRef(s))).toMatchObject({ keyId: second.keyId });
  });

  it('past the cache size, is read back as stored rather than made anew (a size below one keeps one)', async () => {
    const small = createDataKeyStore(db.pool, keks(), { cacheSize: 0 });
    try {
      const [a, b] = [subject(), subject()];
      const keyOfA = await small.forSealing(a);
      await small.forSealing(b);
      // `a` left the cache when `b` came in: its key is the stored one, not a new one.
      const again = await small.forSealing(a);
      expect(again.keyId).toBe(keyOfA.keyId);
      expect(openValue(again, sealValue(keyOfA, 'Ada'))).toBe('Ada');
    } finally {
      await small.close?.();
    }
  });
});

describe('a key destroyed by another process', () => {
  it('ages out of the memory of a process that held it for sealing, once it is not used', async () => {
    // Not 0: lru-cache takes an entry stored at time 0 for one that never ages.
    let clock = 1_000_000;
    const aging = createDataKeyStore(db.pool, keks(), { cacheTtlMs: 60_000, now: () => clock });
    try {
      const s = subject();
      const key = await aging.forSealing(s);
      await keys.destroy(s.tenantId, s.subjectId, db.pool);
      // Within its age the key is still here (nothing would seal with it: commands on an erased
      // person are refused before sealing), and then it is gone: the row is read again.
      clock += 59_000;
      expect((await aging.forSealing(s)).keyId).toBe(key.keyId);
      clock += 60_001;
      await expect(aging.forSealing(s)).rejects.toBeInstanceOf(SubjectErasedError);
    } finally {
      await aging.close?.();
    }
  });
});

describe('destroying a key', () => {
  it('takes effect with the transaction it runs in, and is idempotent', async () => {
    const s = subject();
    await keys.forSealing(s);
    await expect(
      db.pool.transaction(async (tx) => {
        await keys.destroy(s.tenantId, s.subjectId, tx);
        expect(await keys.isDestroyed(s.tenantId, s.subjectId, tx)).toBe(true);
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    expect(await keys.isDestroyed(s.tenantId, s.subjectId)).toBe(false);

    const first = await db.pool.transaction((tx) => keys.destroy(s.tenantId, s.subjectId, tx));
    const again = await db.pool.transaction((tx) => other.destroy(s.tenantId, s.subjectId, tx));
    expect(again.destroyedAt).toBe(first.destroyedAt);
    expect(await keys.isDestroyed(s.tenantId, s.subjectId)).toBe(true);
    const row = await db.pool.one(sql.type(z.object({ sealed_key: z.string().nullable(), kek_id: z.string().nullable() }))`
      select sealed_key, kek_id from personal_data_keys where tenant_id = ${s.tenantId} and subject_id = ${s.subjectId}
    `);
    expect(row).toEqual({ sealed_key: null, kek_id: null });
  });

  it('is seen at once by a store that unwrapped the key before, and opens nothing more', async () => {
    let unwraps = 0;
    const counting = keks();
    const unwrap = counting.unwrap.bind(counting);
    const store = createDataKeyStore(db.pool, { ...counting, unwrap: (...args) => (unwraps++, unwrap(...args)) });
    const s = subject();
    const made = await keys.forSealing(s);
    expect((await store.load([s])).get(subjectRef(s))).toMatchObject({ keyId: made.keyId });
    expect((await store.load([s])).get(subjectRef(s))).toMatchObject({ keyId: made.keyId });
    // The second lookup read the row again but did not decipher it again.
    expect(unwraps).toBe(1);
    await db.pool.transaction((tx) => keys.destroy(s.tenantId, s.subjectId, tx));
    expect((await store.load([s])).get(subjectRef(s))).toBe('destroyed');
    expect(unwraps).toBe(1);
  });

  it('is seen at once by every process that opens, even one that has the key cached', async () => {
    const s = subject();
    await other.forSealing(s); // cached in `other`
    await db.pool.transaction((tx) => keys.destroy(s.tenantId, s.subjectId, tx));
    expect((await other.load([s])).get(subjectRef(s))).toBe('destroyed');
  });

  it('is not put back in the sealing cache by a lookup made before the destruction committed', async () => {
    const s = subject();
    await keys.forSealing(s);
    let destroyed = () => {};
    let commit = () => {};
    const uncommitted = new Promise<void>((resolve) => (destroyed = resolve));
    const committing = new Promise<void>((resolve) => (commit = resolve));
    const erasure = db.pool.transaction(async (tx) => {
      await keys.destroy(s.tenantId, s.subjectId, tx);
      destroyed();
      await committing;
    });
    await uncommitted;
    // Another connection, meanwhile: the destruction is not committed yet, so the key is still there.
    expect((await keys.load([s])).get(subjectRef(s))).not.toBe('destroyed');
    commit();
    await erasure;
    await expect(keys.forSealing(s)).rejects.toBeInstanceOf(SubjectErasedError);
  });

  it('means no key is ever made for the subject again', async () => {
    const erasedBeforeAnyKey = subject();
    await db.pool.transaction((tx) => keys.destroy(erasedBeforeAnyKey.tenantId, erasedBeforeAnyKey.subjectId, tx));
    await expect(other.forSealing(erasedBeforeAnyKey)).rejects.toBeInstanceOf(SubjectErasedError);
    const s = subject();
    await keys.forSealing(s);
    await db.pool.transaction((tx) => other.destroy(s.tenantId, s.subjectId, tx));
    // This process's cache knew the key: the next seal after a load finds it destroyed.
    await keys.load([s]);
    await expect(keys.forSealing(s)).rejects.toBeInstanceOf(SubjectErasedError);
  });
});
