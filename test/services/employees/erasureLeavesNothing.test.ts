import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql, withTenant } from '../../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { parsePosition } from '../../../shared/event-store/port.ts';
import { readCheckpoint } from '../../../shared/projections/checkpoints.ts';
import { runProjection, type ProjectorHandle } from '../../../shared/projections/follow.ts';
import { waitForCheckpoint } from '../../../shared/projections/readYourWrites.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { allProjections } from '../../../services/projectors.ts';
import { listRoles } from '../../../services/auth/roles.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { changesCapability } from '../../../services/changes/capability.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { startWebhookDispatcher, type WebhookDispatcher } from '../../../services/webhooks/dispatcher.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { authCapabilities, authHeaders, createTestAuth, provisionTenant } from '../../support/auth.ts';
import { createMemoryLogger } from '../../support/logs.ts';
import { createGateway } from '../../../services/gateway/app.ts';
import { Registry } from 'prom-client';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { sealedEventStore, testEmailHash } from '../../support/personalData.ts';
import { startReceiver } from '../../support/webhooks/receiver.ts';
import { waitFor } from '../../support/waitFor.ts';

/**
 * The whole service's database after an erasure, as `pg_dump` writes it: the person's e-mail and
 * names, and the reason given for a change of their status, appear nowhere in a readable form
 * (the same dump finds them before the erasure), and a
 * replay of every projection brings none of them back. The person went through every place
 * personal data reaches: hired with a login (roleId), renamed, status changed, in the change
 * feed and delivered to a real webhook receiver.
 */
let db: TestDatabase;
let store: EventStore;
let inner: EventStore;
let auth: AuthDeps;
let app: FastifyInstance;
let dispatcher: WebhookDispatcher;
let projectors: ProjectorHandle[] = [];
const logs = createMemoryLogger('trace');

beforeAll(async () => {
  db = await createTestDatabase();
  inner = createPostgresEventStore(db.pool, { listenUrl: db.url });
  const sealed = sealedEventStore(inner, db.pool);
  store = sealed.store;
  projectors = allProjections.map((p) => runProjection(db.pool, store, p, { pollIntervalMs: 100 }));
  for (const p of allProjections) await waitFor(() => readCheckpoint(db.pool, p.name));
  auth = await createTestAuth(db.pool);
  const secrets = createSecretBox(randomBytes(32));
  const targets = { allowHosts: ['127.0.0.1'] };
  // Every line the gateway writes, at its most talkative level: none may name the person.
  app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'trace', NODE_ENV: 'test' },
    logger: logs.logger,
    readiness: [],
    registry: new Registry(),
    v1: authCapabilities(
      auth,
      changesCapability({ pool: db.pool, databaseUrl: db.url }),
      webhooksCapability({ pool: db.pool, secrets, targets }),
      employeesCapability({
        pool: db.pool,
        eventStore: store,
        log: inner,
        logInDatabase: true,
        emailHash: testEmailHash,
        dataKeys: sealed.keys,
      }),
    ),
    publicRoutes: [],
  });
  // Without Redis: the dispatcher's drains are timers in this process.
  dispatcher = await startWebhookDispatcher({
    pool: db.pool,
    databaseUrl: db.url,
    prefix: 'unused',
    secrets,
    targets,
    timeoutMs: 2_000,
    sweepEveryMs: 200,
  });
});
afterAll(async () => {
  await app?.close();
  await dispatcher?.close();
  for (const p of projectors) await p.stop();
  await auth?.close();
  await store?.close();
  await db?.drop();
});

const dump = async (): Promise<string> =>
  (await promisify(execFile)('pg_dump', ['--dbname', db.url, '--no-owner'], { maxBuffer: 512 * 1024 * 1024 })).stdout;

/** Which of `values` the dump holds, compared without case (addresses are stored normalised too). */
const foundIn = (text: string, values: readonly string[]) => values.filter((v) => text.toLowerCase().includes(v.toLowerCase()));

const caughtUp = async (position: string) => {
  const at = parsePosition(position);
  if (!at) throw new Error(`no position: ${position}`);
  for (const p of allProjections) expect(await waitForCheckpoint(db.pool, p.name, at, 10_000)).toBe(true);
};

/** An employee's versions in the workforce model: one name field and whether they are erased. */
const versionsOf = (id: string) =>
  db.pool.any(
    sql.type(z.object({ first_name: z.string().nullable(), erased: z.boolean() }))`
      select first_name, erased from employee_versions where employee_id = ${id} order by valid_from`,
  );

describe('when a person who reached every part of the service is erased', () => {
  it('leaves their e-mail and names in no readable form in a dump of the database, also after replaying every projection', async () => {
    const tenant = await provisionTenant(db.pool);
    const headers = await authHeaders(auth, tenant, 'admin');
    const tag = randomBytes(6).toString('hex');
    const person = {
      email: `Zq${tag}@Erasure-${tag}.example`,
      firstName: `Firstq${tag}`,
      renamed: `Renamedq${tag}`,
      lastName: `Lastq${tag}`,
      leaveReason: `Reasonq${tag}`,
    };
    // The read models hold the names and the address in the clear until the erasure; the status
    // reason is in none of them, and the log holds it sealed, so no dump ever shows it.
    const inReadModels = [person.email, person.firstName, person.renamed, person.lastName];
    const secrets = [...inReadModels, person.leaveReason];
    const receiver = await startReceiver();
    try {
      const endpoint = await app.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers,
        payload: {
          url: receiver.url,
          // Not subscribed to employee.erased: every endpoint gets it, since every change it got named the person.
          events: ['employee.hired', 'employee.details_changed', 'employee.status_changed'],
        },
      });
      expect(endpoint.statusCode, endpoint.body).toBe(201);

      const roles = await withTenant(db.pool, tenant.tenantId, (tx) => listRoles(tx, tenant.tenantId));
      const hired = await app.inject({
        method: 'POST',
        url: '/v1/employees',
        headers,
        payload: {
          email: person.email,
          firstName: person.firstName,
          lastName: person.lastName,
          department: 'erasure',
          roleId: roles.find((r) => r.name === 'employee')?.id,
        },
      });
      expect(hired.statusCode, hired.body).toBe(201);
      const id = hired.json<{ id: string }>().id;
      const renamed = await app.inject({ method: 'PATCH', url: `/v1/employees/${id}`, headers, payload: { firstName: person.renamed } });
      expect(renamed.statusCode).toBe(200);
      const onLeave = await app.inject({
        method: 'POST',
        url: `/v1/employees/${id}/status`,
        headers,
        payload: { status: 'on_leave', reason: person.leaveReason },
      });
      expect(onLeave.statusCode).toBe(200);
      await caughtUp(String(onLeave.headers['x-log-position']));
      await waitFor(() => receiver.acknowledged().length >= 3);
      expect(receiver.requests.map((r) => r.body).join('\n')).toContain(person.renamed);

      // Before: every value is there to be found (the read models, the feed, the login), so the search means something.
      expect(foundIn(await dump(), secrets)).toEqual(inReadModels);
      const history = await app.inject({ method: 'GET', url: `/v1/employees/${id}/history`, headers });
      expect(history.body).toContain(person.leaveReason);
      // The directory in effective time (the workforce model) holds them too, so its share of the dump is searched.
      expect(await versionsOf(id)).toEqual(expect.arrayContaining([{ first_name: person.renamed, erased: false }]));

      const erased = await app.inject({ method: 'POST', url: `/v1/employees/${id}/erasure`, headers });
      expect(erased.statusCode, erased.body).toBe(200);
      const { erasedAt } = erased.json<{ erasedAt: string }>();
      await caughtUp(String(erased.headers['x-log-position']));
      const delivered = await waitFor(() => receiver.requests.find((r) => r.body.includes('"employee.erased"')));
      expect(JSON.parse(delivered.body)).toMatchObject({ type: 'employee.erased', data: { employeeId: id, erasedAt } });
      expect(foundIn(delivered.body, secrets)).toEqual([]);
      // The delivery is recorded (the delivery log holds no bodies, only what happened).
      await waitFor(async () => {
        const log = await app.inject({ method: 'GET', url: `/v1/webhooks/${endpoint.json<{ id: string }>().id}/deliveries`, headers });
        return log.json<{ data: Array<{ type: string }> }>().data.some((d) => d.type === 'employee.erased');
      });

      expect(foundIn(await dump(), secrets)).toEqual([]);
      expect(await versionsOf(id)).toEqual(expect.arrayContaining([{ first_name: null, erased: true }]));
      const feed = await app.inject({ method: 'GET', url: '/v1/employees/changes', headers });
      const changes = feed.json<{ data: Array<{ type: string; employee: Record<string, unknown> }> }>().data;
      expect(changes.map((c) => c.type)).toEqual([
        'employee.hired',
        'employee.role_assigned',
        'employee.details_changed',
        'employee.status_changed',
        'employee.erased',
      ]);
      for (const change of changes) {
        expect(change.employee).toMatchObject({ id, email: null, firstName: null, lastName: null, department: 'erasure' });
      }

      // A rebuild of every read model from the log (the ops replay path) keeps the person erased. One
      // event per page: the changes before the erasure meet fields that no longer open on their own.
      for (const projection of allProjections) {
        const replayed = await replayProjection(db.pool, store, projection, { batchSize: 1 });
        expect(replayed.parked, projection.name).toBe(0);
      }
      expect(foundIn(await dump(), secrets)).toEqual([]);
      const versions = await versionsOf(id);
      expect(versions.length).toBeGreaterThan(1); // the leave split them: the person keeps counting
      expect(versions.every((v) => v.first_name === null && v.erased)).toBe(true);
      expect(logs.lines.length).toBeGreaterThan(10);
      expect(foundIn(JSON.stringify(logs.lines), secrets)).toEqual([]);
      const rebuilt = await app.inject({ method: 'GET', url: '/v1/employees/changes', headers });
      expect(rebuilt.json<{ data: unknown[] }>().data).toEqual(changes);
      const list = await app.inject({ method: 'GET', url: '/v1/employees', headers });
      expect(list.json<{ meta: { total: number } }>().meta.total).toBe(0);
    } finally {
      await receiver.close();
    }
  });
});
