import type { FastifyInstance } from 'fastify';
import { testEmailHash } from '../../support/personalData.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant, type TestTenant } from '../../support/auth.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres/eventStore.ts';
import type { EventStore } from '../../../shared/event-store/port.ts';
import { employeesCapability } from '../../../services/employees/capability.ts';
import { employeeStreamId, type Employee } from '../../../services/employees/contract.ts';
import { expectProblem } from '../../support/harness/employees.ts';
import { testDataKeys } from '../../support/dataKeys.ts';

/**
 * Email uniqueness when two email changes of one employee interleave (real PostgreSQL). The
 * interleavings are forced, not hoped for: the app's event store holds one request's write to
 * the employee's stream (before or after it) until the test lets it go, while the other request
 * runs to completion. Afterwards the address the employee has must still be reserved for it:
 * hiring someone else with it is 409.
 */

type Gate = { readonly reached: Promise<void>; release(): void };
type Signal = { readonly promise: Promise<void>; resolve(): void };

function signal(): Signal {
  let resolve = () => {};
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** An event store whose next append touching `streamId` waits, before or after it, until released. */
function createGatedStore(store: EventStore) {
  let armed: { readonly streamId: string; readonly point: 'before' | 'after'; readonly reached: Signal; readonly released: Signal } | null =
    null;
  const pass = async <T>(streamIds: readonly string[], call: () => Promise<T>): Promise<T> => {
    const gate = armed;
    if (!gate || !streamIds.includes(gate.streamId)) return call();
    armed = null;
    if (gate.point === 'before') {
      gate.reached.resolve();
      await gate.released.promise;
      return call();
    }
    const result = await call();
    gate.reached.resolve();
    await gate.released.promise;
    return result;
  };
  const gated: EventStore = {
    append: (streamId, events, options) => pass([streamId], () => store.append(streamId, events, options)),
    appendMany: (requests) =>
      pass(
        requests.map((r) => r.streamId),
        () => store.appendMany(requests),
      ),
    readStream: (streamId, options) => store.readStream(streamId, options),
    readAll: (options) => store.readAll(options),
    subscribeToAll: (options) => store.subscribeToAll(options),
    headPosition: () => store.headPosition(),
    ping: () => store.ping(),
    close: () => store.close(),
  };
  return {
    store: gated,
    /** Holds the next append (or appendMany) that touches `streamId`, `point` it runs. */
    hold(streamId: string, point: 'before' | 'after'): Gate {
      const [reached, released] = [signal(), signal()];
      armed = { streamId, point, reached, released };
      return { reached: reached.promise, release: () => released.resolve() };
    },
  };
}

let db: TestDatabase;
let store: EventStore;
let gate: ReturnType<typeof createGatedStore>;
let app: FastifyInstance;
let auth: AuthDeps;

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  gate = createGatedStore(store);
  auth = await createTestAuth(db.pool);
  app = await createTestApp(
    auth,
    employeesCapability({
      pool: db.pool,
      eventStore: gate.store,
      log: gate.store,
      logInDatabase: true,
      emailHash: testEmailHash,
      dataKeys: testDataKeys(db.pool),
    }),
  );
});
afterAll(async () => {
  await app?.close();
  await store?.close();
  await db?.drop();
});

async function given(): Promise<{ tenant: TestTenant; headers: Record<string, string> }> {
  const tenant = await provisionTenant(db.pool);
  return { tenant, headers: await authHeaders(auth, tenant, 'hr_manager') };
}
const address = (label: string) => `${label}-${crypto.randomUUID()}@example.test`;

const hire = (headers: Record<string, string>, email: string) =>
  app.inject({ method: 'POST', url: '/v1/employees', headers, payload: { email, firstName: 'Ada', lastName: 'Lovelace' } });
/** Hires someone with `email` (201 expected) and returns the new employee's id. */
async function hired(headers: Record<string, string>, email: string): Promise<string> {
  const created = await hire(headers, email);
  expect(created.statusCode, created.body).toBe(201);
  return created.json<Employee>().id;
}
const patchEmail = (headers: Record<string, string>, id: string, email: string) =>
  app.inject({ method: 'PATCH', url: `/v1/employees/${id}`, headers, payload: { email } });

/**
 * PATCHes `payload` with `ifMatch`, held just before it writes the employee's stream while
 * `meanwhile` (another write, answered 200) runs; then lets it go and returns its answer.
 */
async function patchHeldWhile(
  tenantId: string,
  id: string,
  headers: Record<string, string>,
  ifMatch: string,
  payload: Record<string, string>,
  meanwhile: () => ReturnType<typeof patchEmail>,
) {
  const held = gate.hold(employeeStreamId(tenantId, id), 'before');
  const patched = app.inject({ method: 'PATCH', url: `/v1/employees/${id}`, headers: { ...headers, 'if-match': ifMatch }, payload });
  await held.reached;
  const other = await meanwhile();
  expect(other.statusCode, other.body).toBe(200);
  held.release();
  return patched;
}
const rename = (headers: Record<string, string>, id: string) => () =>
  app.inject({ method: 'PATCH', url: `/v1/employees/${id}`, headers, payload: { firstName: 'Augusta' } });

describe('when a stale PATCH to address X waits while another PATCH moves the employee to X (undo case)', () => {
  it('X stays reserved for the employee: the stale one is 412, hiring someone else with X is 409', async () => {
    const { tenant, headers } = await given();
    const [w, x] = [address('w'), address('x')];
    const id = await hired(headers, w);

    // A (If-Match "0", fresh when sent) is held just before it writes the employee's stream,
    // while C, without If-Match, moves the employee to X.
    expectProblem(await patchHeldWhile(tenant.tenantId, id, headers, '"0"', { email: x }, () => patchEmail(headers, id, x)), 412);

    const read = await app.inject({ method: 'GET', url: `/v1/employees/${id}`, headers });
    expect(read.json<Employee>().email).toBe(x);
    expectProblem(await hire(headers, x.toUpperCase()), 409);
    // W was given up by the move.
    expect((await hire(headers, w)).statusCode).toBe(201);
  });
});

describe('when a move X→Y is recorded but not yet finished and a second PATCH moves the employee back to X (release case)', () => {
  it('X stays reserved for the employee and Y is free again', async () => {
    const { tenant, headers } = await given();
    const [x, y] = [address('x'), address('y')];
    const id = await hired(headers, x);

    // P1 is held just after its write to the employee's stream (X→Y recorded)…
    const held = gate.hold(employeeStreamId(tenant.tenantId, id), 'after');
    const p1 = patchEmail(headers, id, y);
    await held.reached;
    // …while P2 moves the employee back to X.
    const p2 = await patchEmail(headers, id, x);
    expect(p2.statusCode, p2.body).toBe(200);
    held.release();
    expect((await p1).statusCode).toBe(200);

    const read = await app.inject({ method: 'GET', url: `/v1/employees/${id}`, headers });
    expect(read.json<Employee>().email).toBe(x);
    expectProblem(await hire(headers, x), 409);
    expect((await hire(headers, y)).statusCode).toBe(201);
  });
});

describe('when many PATCHes move one employee between three addresses at once', () => {
  it('afterwards exactly the address it has is taken, the other two are free', async () => {
    const { headers } = await given();
    const addresses = [address('a'), address('b'), address('c')];
    const id = await hired(headers, addresses[0] ?? '');

    const responses = await Promise.all(Array.from({ length: 24 }, (_, i) => patchEmail(headers, id, addresses[(i + 1) % 3] ?? '')));
    // Without If-Match every PATCH is decided again after a lost race; only endless races give up (409).
    expect(responses.some((r) => r.statusCode === 200)).toBe(true);
    for (const response of responses.filter((r) => r.statusCode !== 200)) expectProblem(response, 409);

    const has = (await app.inject({ method: 'GET', url: `/v1/employees/${id}`, headers })).json<Employee>().email;
    for (const other of addresses) {
      if (other === has) expectProblem(await hire(headers, other), 409);
      else expect((await hire(headers, other)).statusCode).toBe(201);
    }
  });
});

describe('when a PATCH with a list If-Match waits while another write moves the employee to a revision the list names', () => {
  it('the email change is planned again and succeeds (a list that names the current revision is not stale)', async () => {
    const { tenant, headers } = await given();
    const [w, x] = [address('w'), address('x')];
    const id = await hired(headers, w);

    // A (If-Match "0", "1") is held just before it writes the employee's stream, while a rename
    // moves the employee to revision 1.
    const answered = await patchHeldWhile(tenant.tenantId, id, headers, '"0", "1"', { email: x }, rename(headers, id));
    expect(answered.statusCode, answered.body).toBe(200);
    expect(answered.json<Employee>()).toMatchObject({ email: x, firstName: 'Augusta' });
    expect(answered.headers.etag).toBe('"2"');
    expectProblem(await hire(headers, x), 409);
    expect((await hire(headers, w)).statusCode).toBe(201);
  });
});

describe('when a PATCH without an email and with a list If-Match waits while another write moves the employee to a revision the list names', () => {
  it('is decided again and succeeds, as the email change is', async () => {
    const { tenant, headers } = await given();
    const id = await hired(headers, address('l'));

    const answered = await patchHeldWhile(tenant.tenantId, id, headers, '"0", "1"', { lastName: 'Byron' }, rename(headers, id));
    expect(answered.statusCode, answered.body).toBe(200);
    expect(answered.json<Employee>()).toMatchObject({ firstName: 'Augusta', lastName: 'Byron' });
    expect(answered.headers.etag).toBe('"2"');
  });
});
