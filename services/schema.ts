import { tenantRoleMigration, type Migration } from '../shared/db/migrate.ts';
import { eventStoreMigrations } from '../shared/event-store/postgres.ts';
import { projectionRunnerMigrations } from '../shared/projections/migrations.ts';
import { tenantMigrations } from './tenants/schema.ts';
import { authMigrations } from './auth/schema.ts';
import { kpiMigrations } from '../projections/kpi/schema.ts';
import { webhookMigrations } from './webhooks/schema.ts';

/**
 * Every migration of the service, in the order they apply. Each capability owns its DDL next
 * to its code; this list only fixes the order. Append new entries, never reorder or edit old ones.
 */
export const allMigrations: readonly Migration[] = [
  tenantRoleMigration,
  ...eventStoreMigrations,
  ...projectionRunnerMigrations,
  ...tenantMigrations,
  ...authMigrations,
  ...kpiMigrations,
  ...webhookMigrations,
];
