import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../shared/config.ts';
import { createRuntime } from '../../services/runtime.ts';
import { createTestDatabase, sqlAt, type TestDatabase } from '../support/database.ts';

/**
 * Start-up against a database that applied a migration from a file that has changed since (here:
 * the recorded hash differs from the file's, which is what an edited file looks like to it).
 */
const logger = pino({ level: 'silent' });

describe("when an applied migration's file changed", () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db.drop();
  });

  it('the service refuses to start, naming the file and both hashes', async () => {
    const [row] = await sqlAt<{ sha256: string }>(db.url, `select sha256 from schema_migrations where id = 'event-store/004-append-batch'`);
    expect(row?.sha256).toMatch(/^[0-9a-f]{64}$/);
    const recorded = 'f'.repeat(64);
    await sqlAt(db.url, `update schema_migrations set sha256 = $1 where id = 'event-store/004-append-batch'`, [recorded]);
    const starting = createRuntime(loadConfig({ DATABASE_URL: db.url, LOG_LEVEL: 'silent' }), logger);
    await expect(starting).rejects.toThrow(
      `Migration event-store/004-append-batch was applied from a file that has changed since: ` +
        `${new URL('../../shared/event-store/postgres/migrations/004-append-batch.sql', import.meta.url).pathname} ` +
        `hashes to ${row?.sha256}, the database recorded ${recorded}.`,
    );
  });
});
