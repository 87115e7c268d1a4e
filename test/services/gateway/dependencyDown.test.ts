import { connect, createServer, type Server, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createGateway } from '../../../services/gateway/app.ts';
import { createDatabasePool, sql, type DatabasePool } from '../../../shared/db/pool.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

/**
 * SPEC §6: "dependency down → 503 with Retry-After". The real PostgreSQL sits behind a TCP proxy
 * this test owns; cutting the proxy takes the database away from the gateway mid-flight.
 */
describe('when PostgreSQL goes away under a running gateway', () => {
  let db: TestDatabase;
  let proxy: Server;
  let port = 0;
  let pool: DatabasePool;
  let app: FastifyInstance;
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
    app = await createGateway({
      config: { BODY_LIMIT_BYTES: 1024, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
      readiness: [],
      registry: new Registry(),
      v1: [
        async (v1) => {
          v1.get('/probe/db', async () => ({ one: await pool.oneFirst(sql.type(z.object({ one: z.number() }))`select 1 as one`) }));
        },
      ],
    });
  });
  afterAll(async () => {
    await app?.close();
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
});
