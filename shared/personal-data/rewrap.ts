import { z } from 'zod';
import { sql, type DatabasePool } from '../db/pool.ts';
import { wrapContext } from './dataKeys.ts';
import type { KeyEncryptionKeys } from './keyEncryptionKeys.ts';

/**
 * The second step of a key-encryption-key rotation: every data key still sealed under an older
 * KEK is opened with it and sealed again under the current one, a batch per transaction. After
 * it the older KEK opens nothing and can be dropped from the configuration. Run again after an
 * interruption: rows already under the current KEK are not picked.
 */
const keyRow = z.object({ tenant_id: z.string(), subject_id: z.string(), key_id: z.string(), kek_id: z.string(), sealed_key: z.string() });

export async function countKeysUnderOlderKeks(pool: DatabasePool, keks: KeyEncryptionKeys): Promise<number> {
  return pool.oneFirst(sql.type(z.object({ n: z.number() }))`
    select count(*)::int8 as n from personal_data_keys where kek_id <> ${keks.currentId}
  `);
}

export async function rewrapDataKeys(
  pool: DatabasePool,
  keks: KeyEncryptionKeys,
  options: { readonly batchSize?: number; readonly onProgress?: (rewrapped: number) => void } = {},
): Promise<number> {
  let rewrapped = 0;
  for (;;) {
    const done = await pool.transaction(async (tx) => {
      const rows = await tx.any(sql.type(keyRow)`
        select tenant_id::text, subject_id, key_id, kek_id, sealed_key from personal_data_keys
        where kek_id <> ${keks.currentId}
        order by tenant_id, subject_id limit ${options.batchSize ?? 1_000}
        for update skip locked
      `);
      for (const r of rows) {
        const context = wrapContext({ tenantId: r.tenant_id, subjectId: r.subject_id }, r.key_id);
        const { kekId, sealed } = keks.wrap(keks.unwrap(r.kek_id, r.sealed_key, context), context);
        await tx.query(sql.type(z.object({}))`
          update personal_data_keys set kek_id = ${kekId}, sealed_key = ${sealed}
          where tenant_id = ${r.tenant_id} and subject_id = ${r.subject_id} and sealed_key is not null
        `);
      }
      return rows.length;
    });
    if (done === 0) return rewrapped;
    rewrapped += done;
    options.onProgress?.(rewrapped);
  }
}
