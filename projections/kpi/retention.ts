import { ignoredRows, sql, type DatabasePool } from '../../shared/db/pool.ts';

export type KpiRetention = {
  /** Per-minute rows older than this are deleted: the hourly rows hold the same sketches. */
  readonly minuteRetentionHours?: number;
  /** Per-day distinct-user rows older than this are deleted. */
  readonly dailyUserRetentionDays?: number;
};

/**
 * The scheduled KPI rollup job (BullMQ, services/worker): compacts the fine-grained usage
 * rollups. Per-minute rows are only read for the ≤ 2 partial hours of the 24 h window, and
 * every minute is already merged into its hour at ingest, so old minutes are dropped rather
 * than re-aggregated. Idempotent; safe to run from several workers.
 */
export function createKpiRollupJob(pool: DatabasePool, retention: KpiRetention = {}) {
  const minuteHours = retention.minuteRetentionHours ?? 72;
  const dailyDays = retention.dailyUserRetentionDays ?? 400;
  return async (now: Date): Promise<Record<string, unknown>> => {
    const minutesBefore = new Date(now.getTime() - minuteHours * 3_600_000).toISOString();
    const daysBefore = new Date(now.getTime() - dailyDays * 86_400_000).toISOString().slice(0, 10);
    const minutes = await pool.query(sql.type(ignoredRows)`delete from kpi_usage_minutes where minute < ${minutesBefore}`);
    const days = await pool.query(sql.type(ignoredRows)`delete from kpi_daily_users where day < ${daysBefore}::date`);
    return { minuteRowsDeleted: minutes.rowCount, dailyUserRowsDeleted: days.rowCount, minutesBefore, daysBefore };
  };
}
