import type { MigrationFolder } from '../shared/db/migrate.ts';

const folder = (path: string) => new URL(path, import.meta.url);

/**
 * Every migration folder of the service, in the order they apply; each folder's files apply in
 * file-name order. Each capability owns its migrations next to its code; this list only fixes
 * the order. Add new files (or folders at the end), never reorder, rename or edit applied ones.
 */
export const allMigrations: readonly MigrationFolder[] = [
  { prefix: 'db', folder: folder('../shared/db/migrations/') },
  { prefix: 'event-store', folder: folder('../shared/event-store/postgres/migrations/') },
  { prefix: 'projections', folder: folder('../shared/projections/migrations/') },
  { prefix: 'tenants', folder: folder('./tenants/migrations/') },
  { prefix: 'auth', folder: folder('./auth/migrations/') },
  { prefix: 'kpi', folder: folder('../projections/kpi/migrations/') },
  { prefix: 'webhooks', folder: folder('./webhooks/migrations/') },
  { prefix: 'analysts', folder: folder('./analysts/migrations/') },
  { prefix: 'personal-data', folder: folder('../shared/personal-data/migrations/') },
  { prefix: 'employees', folder: folder('./employees/migrations/') },
  { prefix: 'changes', folder: folder('../projections/changes/migrations/') },
];
