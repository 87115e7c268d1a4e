import { z } from 'zod';
import { sql, type DatabasePool } from '../../shared/db/pool.ts';

/**
 * Seeds the workforce read model straight in SQL (generate_series): `employees` people of one
 * tenant hired evenly over the `years` before `now`, 20 departments; every 4th moves department a
 * year after the hire and every 5th leaves two years after it (when that is before now), so the
 * model holds about 1.5 versions per employee. The counters and their totals over every department
 * are derived from the versions, as the projection's would be. This measures the read side only: going through events and the
 * projector would take hours for a million people and measure the write path instead.
 */
export async function seedWorkforce(
  pool: DatabasePool,
  options: { tenantId: string; employees: number; years: number; now: number },
): Promise<{ versions: number }> {
  const { tenantId, employees, years, now } = options;
  const end = new Date(now).toISOString();
  const none = z.object({});
  return pool.transaction(async (tx) => {
    // A million rows take longer than the service's statement timeout.
    await tx.query(sql.type(none)`set local statement_timeout = 0`);
    await tx.query(sql.type(none)`
    insert into employee_versions
      (tenant_id, employee_id, valid_from, valid_to, department, first_name, last_name, email, status, hired_at, previous_status, revision)
    select ${tenantId}::uuid, 'E' || lpad(i::text, 25, '0'), valid_from,
           lead(valid_from) over w, department, 'First', 'Last ' || i, 'p' || i || '@example.test', status, hired_at,
           -- previous_status is kept on versions that start with a status change only (versions.ts).
           case when status <> lag(status) over w then lag(status) over w end, 1
    from (
      with e as (
        select i, ${end}::timestamptz - make_interval(secs => ${years * 365.25 * 86_400} * (1 - i::float8 / ${employees})) as hired_at
        from generate_series(1, ${employees}) i
      ), flags as (
        select i, hired_at, i % 4 = 0 and hired_at + interval '365 days' <= ${end}::timestamptz as moves,
               i % 5 = 0 and hired_at + interval '730 days' <= ${end}::timestamptz as leaves
        from e
      )
      select i, hired_at, hired_at as valid_from, 'd' || (i % 20) as department, 'active' as status from flags
      union all
      select i, hired_at, hired_at + interval '365 days', 'd' || ((i + 7) % 20), 'active' from flags where moves
      union all
      select i, hired_at, hired_at + interval '730 days', 'd' || (case when moves then (i + 7) % 20 else i % 20 end), 'inactive'
      from flags where leaves
    ) v
    window w as (partition by i order by valid_from)
  `);
    await tx.query(sql.type(none)`
    insert into workforce_day_counts (tenant_id, day, department, status, in_force, hires, exits)
    select tenant_id, day, department, status, sum(in_force), sum(hires), sum(exits)
    from (
      select tenant_id, (valid_from at time zone 'UTC')::date as day, department, status, 1 as in_force,
             (valid_from = hired_at)::int as hires,
             (status = 'inactive' and (valid_from = hired_at or previous_status in ('active', 'on_leave')))::int as exits
      from employee_versions where tenant_id = ${tenantId}::uuid
      union all
      select tenant_id, (valid_to at time zone 'UTC')::date, department, status, -1, 0, 0
      from employee_versions where tenant_id = ${tenantId}::uuid and valid_to is not null
    ) x group by 1, 2, 3, 4
  `);
    await tx.query(sql.type(none)`
    insert into workforce_month_counts (tenant_id, month, department, status, in_force, hires, exits)
    select tenant_id, date_trunc('month', day)::date, department, status, sum(in_force), sum(hires), sum(exits)
    from workforce_day_counts where tenant_id = ${tenantId}::uuid group by 1, 2, 3, 4
  `);
    // The totals over every department, as the projection keeps them beside the counters (a
    // department move within one day adds nothing to them: no row).
    for (const [totals, counts, bucket] of [
      ['workforce_day_totals', 'workforce_day_counts', 'day'],
      ['workforce_month_totals', 'workforce_month_counts', 'month'],
    ] as const) {
      const [t, c, b] = [sql.identifier([totals]), sql.identifier([counts]), sql.identifier([bucket])];
      await tx.query(sql.type(none)`
      insert into ${t} (tenant_id, ${b}, status, in_force, hires, exits)
      select tenant_id, ${b}, status, sum(in_force), sum(hires), sum(exits)
      from ${c} where tenant_id = ${tenantId}::uuid group by 1, 2, 3
      having sum(in_force) <> 0 or sum(hires) <> 0 or sum(exits) <> 0
    `);
      await tx.query(sql.type(none)`analyze ${t}`);
    }
    await tx.query(sql.type(none)`analyze employee_versions`);
    await tx.query(sql.type(none)`analyze workforce_day_counts`);
    await tx.query(sql.type(none)`analyze workforce_month_counts`);
    const versions = await tx.oneFirst(
      sql.type(z.object({ n: z.number() }))`select count(*)::int8 as n from employee_versions where tenant_id = ${tenantId}::uuid`,
    );
    return { versions };
  });
}
