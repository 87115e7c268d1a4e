import { z } from 'zod';
import { sql, type DatabasePool } from '../../shared/db/pool.ts';

/**
 * md5 over every row of each employees read-model table, in key order: two builds of the model
 * (live, bulk replay, page-by-page replay) are equal exactly when their checksums are. Reads
 * every row: for benches and tests, not for a request path.
 */
const KEYS = {
  employees: ['tenant_id', 'id'],
  employee_counts: ['tenant_id', 'status', 'department'],
  employee_month_counts: ['tenant_id', 'month', 'status', 'department'],
  employee_day_counts: ['tenant_id', 'day', 'status', 'department'],
} as const;

export async function employeesModelChecksums(pool: Pick<DatabasePool, 'one'>): Promise<Record<keyof typeof KEYS, string>> {
  const row = z.object({ checksum: z.string().nullable() });
  const result = {} as Record<keyof typeof KEYS, string>;
  for (const [table, key] of Object.entries(KEYS) as [keyof typeof KEYS, readonly string[]][]) {
    // Zero counters are equivalent to missing ones (the live path can leave them behind).
    const keep = table === 'employees' ? sql.fragment`true` : sql.fragment`t.count <> 0`;
    const order = sql.join(
      key.map((c) => sql.identifier(['t', c])),
      sql.fragment`, `,
    );
    const { checksum } = await pool.one(sql.type(row)`
      select md5(string_agg(t::text, E'\n' order by ${order})) as checksum from ${sql.identifier([table])} t where ${keep}
    `);
    result[table] = checksum ?? 'empty';
  }
  return result;
}
