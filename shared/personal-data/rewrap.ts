import { z } from 'zod';
import { ignoredRows, sql, type DatabasePool } from '../db/pool.ts';
import { wrapContext } from './dataKeys.ts';
import type { KeyEncryptionKeys } from './keyEncryptionKeys.ts';

/**
 * The second step of a key-encryption-key rotation: every data key still sealed under an older
 * KEK is opened with it and sealed again under the current one, a batch per transaction. After
 * it the older KEK opens nothing and can be dropped from the configuration (`keysUnderOlderKeks`
 * says so). Run again after an interruption: rows already under the current KEK are passed over.
 */
const keyRow = z.object({ tenant_id: z.string(), subject_id: z.string(), key_id: z.string(), kek_id: z.string(), sealed_key: z.string() });

const kekCountRow = z.object({ kek_id: z.string(), n: z.number() });

/** How many data keys each older KEK still seals (what a rotation has left to do). */
export async function keysUnderOlderKeks(pool: DatabasePool, keks: KeyEncryptionKeys): Promise<ReadonlyMap<string, number>> {
  const rows = await pool.any(sql.type(kekCountRow)`
    select kek_id, count(*)::int8 as n from personal_data_keys where kek_id <> ${keks.currentId} group by kek_id order by kek_id
  `);
  return new Map(rows.map((r) => [r.kek_id, r.n]));
}

const windowEnd = z.object({ tenant_id: z.string(), subject_id: z.string() });

export async function rewrapDataKeys(
  pool: DatabasePool,
  keks: KeyEncryptionKeys,
  options: { readonly batchSize?: number; readonly onProgress?: (rewrapped: number) => void } = {},
): Promise<number> {
  const batchSize = options.batchSize ?? 1_000;
  let rewrapped = 0;
  // Paged on the primary key, each window after the last: one pass over the table, not a scan
  // from the start per batch. Rows locked by an erasure in flight are skipped (the count after says so).
  let after = { tenantId: '00000000-0000-0000-0000-000000000000', subjectId: '' };
  for (;;) {
    const end = await pool.transaction(async (tx) => {
      const window = sql.fragment`
        select tenant_id, subject_id from personal_data_keys
        where (tenant_id, subject_id) > (${after.tenantId}::uuid, ${after.subjectId})
        order by tenant_id, subject_id limit ${batchSize}
      `;
      const rows = await tx.any(sql.type(keyRow)`
        select k.tenant_id::text, k.subject_id, k.key_id, k.kek_id, k.sealed_key
        from personal_data_keys k join (${window}) w using (tenant_id, subject_id)
        where k.kek_id <> ${keks.currentId}
        for update of k skip locked
      `);
      for (const r of rows) {
        const context = wrapContext({ tenantId: r.tenant_id, subjectId: r.subject_id }, r.key_id);
        const { kekId, sealed } = keks.wrap(keks.unwrap(r.kek_id, r.sealed_key, context), context);
        await tx.query(sql.type(ignoredRows)`
          update personal_data_keys set kek_id = ${kekId}, sealed_key = ${sealed}
          where tenant_id = ${r.tenant_id} and subject_id = ${r.subject_id} and sealed_key is not null
        `);
      }
      rewrapped += rows.length;
      return tx.maybeOne(sql.type(windowEnd)`
        select w.tenant_id::text, w.subject_id from (${window}) w order by w.tenant_id desc, w.subject_id desc limit 1
      `);
    });
    if (!end) return rewrapped;
    after = { tenantId: end.tenant_id, subjectId: end.subject_id };
    options.onProgress?.(rewrapped);
  }
}
