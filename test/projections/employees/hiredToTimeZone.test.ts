import type { FastifyInstance } from 'fastify';
import { testEmailHash } from '../../support/personalData.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createTestDatabase, sqlAt, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { waitFor } from '../../support/waitFor.ts';
import { createDatabasePool, sql, type DatabasePool } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { employeesProjection } from '../../../projections/employees/employeesProjection.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import { testDataKeys } from '../../support/dataKeys.ts';

/**
 * A date-only `hiredTo` is a UTC day (docs/api.md), whatever the database session's time zone:
 * the page's rows and `meta.total` use the same bound. It was `hired_at < date + interval '1 day'`,
 * a day of the session's zone (23 h or 25 h across a DST change), while the total counted the
 * exact UTC day, so the two disagreed on a server whose database is not in UTC.
 */
let db: TestDatabase;
let pool: DatabasePool;
let store: EventStore;
let projector: ProjectorHandle;
let app: FastifyInstance;
let headers: Record<string, string>;

beforeAll(async () => {
  db = await createTestDatabase();
  // Sessions opened from now on run in Berlin time (this test's own database only).
  await sqlAt(db.url, `alter database "${db.name}" set timezone to 'Europe/Berlin'`);
  pool = await createDatabasePool(db.url, { maximumPoolSize: 5 });
  store = createPostgresEventStore(pool, { listenUrl: db.url });
  projector = runProjection(pool, store, employeesProjection, { pollIntervalMs: 50 });
  await waitFor(() => readCheckpoint(pool, employeesProjection.name));
  const auth = await createTestAuth(pool);
  app = await createTestApp(
    auth,
    employeesCapability({
      pool,
      eventStore: store,
      log: store,
      logInDatabase: true,
      emailHash: testEmailHash,
      dataKeys: testDataKeys(pool),
    }),
  );
  headers = await authHeaders(auth, await provisionTenant(pool), 'hr_manager');
});
afterAll(async () => {
  await app?.close();
  await projector?.stop();
  await store?.close();
  await pool?.end();
  await db?.drop();
});

type Page = { data: { hiredAt: string }[]; meta: { total: number } };

describe('when the database session is in Europe/Berlin and a hiredTo date spans a DST change', () => {
  it('rows and total agree on the UTC day, for the 23-hour and the 25-hour day', async () => {
    expect(await pool.oneFirst(sql.type(z.object({ tz: z.string() }))`select current_setting('TimeZone') as tz`)).toBe('Europe/Berlin');
    let position = '';
    for (const hiredAt of [
      '2024-03-31T23:30:00.000Z',
      '2024-04-01T00:00:00.000Z',
      '2024-10-27T23:30:00.000Z',
      '2024-10-28T00:30:00.000Z',
    ]) {
      const created = await app.inject({
        method: 'POST',
        url: '/v1/employees',
        headers,
        payload: { email: `${hiredAt.slice(0, 13)}@example.test`, firstName: 'A', lastName: 'B', hiredAt },
      });
      expect(created.statusCode, created.body).toBe(201);
      position = String(created.headers['x-log-position']);
    }
    const list = async (query: string) => {
      const response = await app.inject({
        method: 'GET',
        url: `/v1/employees?${query}`,
        headers: { ...headers, 'x-min-position': position },
      });
      expect(response.headers['x-consistency']).toBe('consistent');
      const page = response.json<Page>();
      return { hiredAt: page.data.map((e) => e.hiredAt), total: page.meta.total };
    };

    // 2024-03-31 has 23 hours in Berlin: the hire at 23:30Z is still on the UTC day.
    expect(await list('hiredTo=2024-03-31')).toEqual({ hiredAt: ['2024-03-31T23:30:00.000Z'], total: 1 });
    // 2024-10-27 has 25 hours in Berlin: the hire at 00:30Z on the 28th is not on the UTC day.
    expect(await list('hiredFrom=2024-10-27&hiredTo=2024-10-27')).toEqual({ hiredAt: ['2024-10-27T23:30:00.000Z'], total: 1 });
    expect(await list('hiredFrom=2024-04-01&hiredTo=2024-10-27')).toEqual({
      hiredAt: ['2024-10-27T23:30:00.000Z', '2024-04-01T00:00:00.000Z'],
      total: 2,
    });
  });
});
