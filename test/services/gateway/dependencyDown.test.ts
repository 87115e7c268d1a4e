import { connect, createServer, type Server, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createGateway } from '../../../services/gateway/app.ts';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { createDatabasePool, sql, type DatabasePool } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { waitFor } from '../../support/waitFor.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

/**
 * A dependency that is down answers 503 with Retry-After. The real PostgreSQL sits behind a TCP proxy
 * this test owns; cutting the proxy takes the database away from the gateway mid-flight.
 */
describe('when PostgreSQL goes away under a running gateway', () => {
  let db: TestDatabase;
  let proxy: Server;
  let port = 0;
  let pool: DatabasePool;
  let app: FastifyInstance;
  let store: EventStore;
  const sockets = new Set<Socket>();
  let startProxy: () => Promise<void>;

  beforeAll(async () => {
    db = await createTestDatabase();
    const target = new URL(db.url);
    const forward = (client: Socket) => {
      const upstream = connect(Number(target.port || 5432), target.hostname);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on('close', () => sockets.delete(s));
        s.on('error', () => s.destroy());
      }
      client.pipe(upstream).pipe(client);
    };
    startProxy = async () => {
      proxy = createServer(forward);
      await new Promise<void>((r) => proxy.listen(port, '127.0.0.1', () => r()));
      const address = proxy.address();
      if (!address || typeof address === 'string') throw new Error('no proxy address');
      port = address.port;
    };
    await startProxy();
    const viaProxy = new URL(db.url);
    viaProxy.host = `127.0.0.1:${port}`;
    pool = await createDatabasePool(viaProxy.toString(), { maximumPoolSize: 2 });
    store = createPostgresEventStore(pool);
    app = await createGateway({
      config: { BODY_LIMIT_BYTES: 1024, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
      readiness: [],
      registry: new Registry(),
      v1: [
        async (v1) => {
          v1.get('/probe/db', async () => ({ one: await pool.oneFirst(sql.type(z.object({ one: z.number() }))`select 1 as one`) }));
          v1.post('/probe/append/:stream', async (request) => {
            const { stream } = z.object({ stream: z.string() }).parse(request.params);
            return store.append(stream, [{ id: randomUUID(), type: 'Probe', data: {} }]).then((r) => ({ nextRevision: r.nextRevision }));
          });
        },
      ],
    });
  });
  afterAll(async () => {
    await app?.close();
    await store?.close();
    await pool?.end().catch(() => undefined);
    proxy?.close();
    await db?.drop();
  });

  it('answers 503 problem with Retry-After while it is down, and 200 again when it is back', async () => {
    expect((await app.inject({ url: '/v1/probe/db' })).json()).toEqual({ one: 1 });

    proxy.close(); // no new connections
    for (const s of sockets) s.destroy(); // and the open ones are cut
    const down = await app.inject({ url: '/v1/probe/db' });
    expect(down.statusCode).toBe(503);
    expect(down.headers['retry-after']).toBe('5');
    expect(down.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(down.body).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|stack/);

    await startProxy(); // back on the same port: the pool reconnects by itself
    await expect.poll(async () => (await app.inject({ url: '/v1/probe/db' })).statusCode, { timeout: 10_000 }).toBe(200);
  });
  it('answers 503 with Retry-After when the append connection is cut mid-flush, and appends again once it is back', async () => {
    await expect.poll(async () => (await app.inject({ url: '/v1/probe/db' })).statusCode, { timeout: 10_000 }).toBe(200);
    const stream = `cut-${randomUUID()}`;
    // A first append opens the store's append connection (through the proxy).
    expect((await app.inject({ method: 'POST', url: `/v1/probe/append/${stream}` })).json()).toEqual({ nextRevision: 0 });
    // The flush locks its stream first: holding that lock directly (not through the proxy) keeps
    // the flush in flight while the proxy cuts its connection.
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query('select pg_advisory_xact_lock(hashtextextended($1, 0))', [stream]);
      // inject sends when awaited: Promise.resolve starts it now.
      const cut = Promise.resolve(app.inject({ method: 'POST', url: `/v1/probe/append/${stream}` }));
      await waitFor(async () => {
        const { rows } = await holder.query(
          `select 1 from pg_stat_activity where datname = current_database() and application_name = 'event-store-append' and wait_event = 'advisory'`,
        );
        return rows.length > 0;
      });
      proxy.close();
      for (const s of sockets) s.destroy();
      const answer = await cut;
      expect(answer.statusCode).toBe(503);
      expect(answer.headers['retry-after']).toBe('5');
      await holder.query('rollback');
    } finally {
      await holder.end();
    }
    await startProxy();
    await expect
      .poll(async () => (await app.inject({ method: 'POST', url: `/v1/probe/append/${stream}` })).statusCode, { timeout: 10_000 })
      .toBe(200);
    // The cut flush committed anyway: its backend was waiting for the lock and, with no
    // client_connection_check_interval, noticed the lost client only when it answered. That is
    // why the store does not retry a flush whose connection is lost, and the client hears 503.
    expect((await store.readStream(stream)).map((e) => e.revision)).toEqual([0, 1, 2]);
  });
});
