import type { Migration } from '../db/migrate.ts';
import { lateAppliesMigration } from './applyOrder.ts';
import { checkpointNotifyMigration } from './checkpointNotifications.ts';
import { parkedEventsMigration } from './parking.ts';

/** The runner's own tables: checkpoints, parked events, the checkpoint NOTIFY and late applies. */
export const projectionRunnerMigrations: readonly Migration[] = [
  {
    id: 'projections/001-checkpoints',
    sql: `
      create table projection_checkpoints (
        name text primary key,
        version integer not null,
        commit_position numeric(20, 0) not null,
        prepare_position numeric(20, 0) not null,
        events_applied bigint not null default 0,
        updated_at timestamptz not null default now()
      );
      grant select on projection_checkpoints to eas_tenant;
    `,
  },
  parkedEventsMigration,
  checkpointNotifyMigration,
  lateAppliesMigration,
];
