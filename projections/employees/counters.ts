/**
 * The employees read model's counters (employeesProjection.ts): the keys a row counts under and
 * the deltas of a set of row changes, per counter table (whole tenant, hire month, hire day).
 */

/** What a row is counted by. */
type CountedRow = { tenant_id: string; status: string; department: string | null; hired_at: string };

/**
 * The UTC calendar day of an instant as `YYYY-MM-DD`. Instants from the write side and from
 * PostgreSQL are already `toISOString()` text, so slicing is enough; anything else is parsed.
 */
export function utcDay(instant: string): string {
  return instant.length === 24 && instant.endsWith('Z') && instant[10] === 'T'
    ? instant.slice(0, 10)
    : new Date(instant).toISOString().slice(0, 10);
}

/** The counters a row adds to: whole tenant, its hire month and its hire day (missing department = ''). */
type CounterKeys = {
  all: string;
  month: string;
  day: string;
  tenant_id: string;
  status: string;
  department: string;
  monthStart: string;
  dayStart: string;
};
export function counterKeys(row: Pick<CountedRow, 'tenant_id' | 'status' | 'department' | 'hired_at'>): CounterKeys {
  const department = row.department ?? '';
  const day = utcDay(row.hired_at);
  const month = `${day.slice(0, 7)}-01`;
  const all = `${row.tenant_id}\u0000${row.status}\u0000${department}`;
  return {
    all,
    month: `${all}\u0000${month}`,
    day: `${all}\u0000${day}`,
    tenant_id: row.tenant_id,
    status: row.status,
    department,
    monthStart: month,
    dayStart: day,
  };
}

/** Counter deltas of a set of row changes, per counter table. */
export function createCounterDeltas() {
  type Delta = { tenant_id: string; status: string; department: string; bucket: string | null; delta: number };
  const all = new Map<string, Delta>();
  const month = new Map<string, Delta>();
  const day = new Map<string, Delta>();
  const add = (map: Map<string, Delta>, key: string, k: CounterKeys, bucket: string | null, delta: number) => {
    const entry = map.get(key);
    if (entry) entry.delta += delta;
    else map.set(key, { tenant_id: k.tenant_id, status: k.status, department: k.department, bucket, delta });
  };
  return {
    bump(row: Pick<CountedRow, 'tenant_id' | 'status' | 'department' | 'hired_at'>, delta: number) {
      const k = counterKeys(row);
      add(all, k.all, k, null, delta);
      add(month, k.month, k, k.monthStart, delta);
      add(day, k.day, k, k.dayStart, delta);
    },
    nonZero() {
      const keep = (m: Map<string, Delta>) => [...m.values()].filter((d) => d.delta !== 0);
      return { all: keep(all), month: keep(month), day: keep(day) };
    },
  };
}
