import { applyMigrations, loadMigrations } from '../../shared/db/migrate.ts';
import { allMigrations } from '../../services/migrations.ts';
import { createEmptyTestDatabase, sqlAt, type BareTestDatabase } from './database.ts';

/** The event store's migrations alone, and flushes as gateways of each version send them. */
export const eventStoreMigrations = loadMigrations(allMigrations.filter((f) => f.prefix === 'event-store'));

/** Where the event-store migration whose id starts with `prefix` stands in their list. */
export function indexOfMigration(prefix: string): number {
  const at = eventStoreMigrations.findIndex((m) => m.id.startsWith(prefix));
  if (at < 0) throw new Error(`no ${prefix} migration`);
  return at;
}
export const before010 = eventStoreMigrations.slice(0, indexOfMigration('event-store/010'));

/** A new database migrated up to 009. */
export async function databaseBefore010(): Promise<BareTestDatabase> {
  const database = await createEmptyTestDatabase();
  await applyMigrations(database.url, before010);
  return database;
}

/** One part of a flush as these tests send it: a stream's events (one type), their expectation. */
export type FlushPart = {
  readonly req?: number;
  readonly stream: string;
  readonly expected: string | null;
  readonly ids: readonly string[];
  readonly type: string;
  readonly metadata?: readonly (string | null)[];
};

/** `es_append_batch`'s first eight arguments for `parts` (request = the part's place unless given). */
export const flushArguments = (parts: readonly FlushPart[]): unknown[] => [
  parts.map((p, i) => p.req ?? i),
  parts.map((p) => p.stream),
  parts.map((p) => p.expected),
  parts.map((p) => p.ids.length),
  parts.flatMap((p) => p.ids),
  parts.flatMap((p) => p.ids.map(() => p.type)),
  parts.flatMap((p) => p.ids.map((_, k) => JSON.stringify({ k }))),
  parts.flatMap((p) => p.metadata ?? p.ids.map(() => '{}')),
];

/**
 * A flush as a gateway from before 012 sends it (the 8-argument `es_append_batch`), for writes
 * made before the upgrade or by gateways not yet upgraded. Returns each part's outcome.
 */
export async function oldFlush(databaseUrl: string, parts: readonly FlushPart[]): Promise<string[]> {
  const rows = await sqlAt<{ outcomes: string[] }>(
    databaseUrl,
    'select outcomes from es_append_batch($1::int4[], $2::text[], $3::text[], $4::int4[], $5::uuid[], $6::text[], $7::jsonb[], $8::jsonb[])',
    flushArguments(parts),
  );
  return rows[0]?.outcomes ?? [];
}
