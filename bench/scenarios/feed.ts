/**
 * Change feed and webhook deliveries. `npm run bench -- feed`.
 *
 * Setup: a fresh database, two tenants with BENCH_FEED_EMPLOYEES employees × 10 changes each
 * (hire + 9 renames; the second tenant is noise the feed must skip), the changes projection
 * built by a replay, and the gateway (auth + feed) listening on loopback in this process.
 *
 * 1. Feed read: one client follows `next` with limit=1000 over HTTP to the end of its tenant's
 *    feed (changes/s). Baseline, same run: reading the raw log with the event store's
 *    `readAll` (pages of 1000, in process, no HTTP, no tenant filter), the ceiling of any log
 *    reader. Alternating rounds, medians.
 * 2. Deliveries: one endpoint to a local receiver, the live projector and the BullMQ
 *    dispatcher (Redis from REDIS_URL, default 127.0.0.1:6379). (a) Burst: N changes appended
 *    at once, deliveries/s until the last arrives. Baseline: a sequential, in-order sender
 *    signing and POSTing the same number of messages straight to the receiver (no queue, no
 *    database). (b) Lag: changes written at a steady pace; lag = arrival at the receiver minus
 *    the change's occurredAt (set just before its append); p50/p95.
 * Client, server and receiver share this process's event loop; the machine is shared: compare
 * ratios, not absolute numbers.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes, randomUUID } from 'node:crypto';
import { Registry } from 'prom-client';
import { monotonicFactory } from 'ulid';
import { createDatabasePool } from '../../shared/db/pool.ts';
import { createPostgresEventStore } from '../../shared/event-store/postgres/eventStore.ts';
import { START, comparePositions, type EventStore } from '../../shared/event-store/port.ts';
import { createGateway } from '../../services/gateway/app.ts';
import { authenticated, createAuthDeps } from '../../services/auth/plugin.ts';
import { createKeyRing, generatePrivateJwk } from '../../services/auth/keys.ts';
import { provisionTenant } from '../../services/tenants/provision.ts';
import { employeeStreamId } from '../../services/employees/contract.ts';
import { changesCapability } from '../../services/changes/capability.ts';
import { webhooksCapability } from '../../services/webhooks/capability.ts';
import { startWebhookDispatcher } from '../../services/webhooks/dispatcher.ts';
import { createSecretBox } from '../../services/webhooks/secrets.ts';
import { sendWebhook } from '../../services/webhooks/deliver.ts';
import { changesProjection } from '../../projections/changes/changesProjection.ts';
import { replayProjection } from '../../shared/projections/replay.ts';
import { runProjection } from '../../shared/projections/follow.ts';
import { createBenchDatabase } from '../support/database.ts';
import { median, percentile } from '../support/measure.ts';

const say = (message: string) => process.stderr.write(`[bench feed] ${message}\n`);
const nextId = monotonicFactory();

/** `employees` employees × `changesEach` events (hire + renames), `concurrency` appends at a time. */
async function writeChanges(store: EventStore, tenantId: string, employees: number, changesEach: number, concurrency = 16): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < employees) {
      next++;
      const id = nextId();
      const now = new Date().toISOString();
      const events = [
        {
          id: randomUUID(),
          type: 'EmployeeHired',
          data: {
            employeeId: id,
            email: `${id.toLowerCase()}@bench.test`,
            firstName: 'B',
            lastName: 'Ench',
            department: null,
            status: 'active',
            hiredAt: now,
          },
          metadata: { tenantId, occurredAt: now },
        },
        ...Array.from({ length: changesEach - 1 }, (_, i) => ({
          id: randomUUID(),
          type: 'EmployeeDetailsChanged',
          data: { employeeId: id, firstName: `B${i}` },
          metadata: { tenantId, occurredAt: now },
        })),
      ];
      await store.append(employeeStreamId(tenantId, id), events, { expectedRevision: 'no_stream' });
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

export async function runFeedBench() {
  const employees = Number(process.env.BENCH_FEED_EMPLOYEES ?? 2_000);
  const deliveries = Number(process.env.BENCH_FEED_DELIVERIES ?? 1_000);
  const rounds = 3;
  const db = await createBenchDatabase('bench_feed');
  const pool = await createDatabasePool(db.url, { maximumPoolSize: 20 });
  const store = createPostgresEventStore(pool, { listenUrl: db.url });
  const closers: Array<() => Promise<void>> = [];
  try {
    const { tenant: a } = await provisionTenant(pool, {
      slug: `feed-a-${randomBytes(3).toString('hex')}`,
      plan: 'enterprise',
      rateLimitOverride: null,
    });
    const { tenant: b } = await provisionTenant(pool, {
      slug: `feed-b-${randomBytes(3).toString('hex')}`,
      plan: 'enterprise',
      rateLimitOverride: null,
    });
    let t = Date.now();
    await Promise.all([writeChanges(store, a.id, employees, 10), writeChanges(store, b.id, employees, 10)]);
    const written = employees * 10 * 2;
    say(`wrote ${written} changes in ${Date.now() - t} ms`);
    t = Date.now();
    const built = await replayProjection(pool, store, changesProjection);
    const projectionMs = Date.now() - t;
    say(`changes projection built: ${built.processed} events in ${projectionMs} ms`);

    const auth = await createAuthDeps({
      pool,
      config: { JWT_ISSUER: 'bench', JWT_AUDIENCE: 'bench', JWT_PRIVATE_JWKS: undefined, DATA_DIR: '.tmp/bench-feed' },
      keys: await createKeyRing([await generatePrivateJwk()]),
    });
    closers.push(() => auth.close());
    const secrets = createSecretBox(randomBytes(32));
    const targets = { allowHosts: ['127.0.0.1'] };
    const app = await createGateway({
      config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'production' },
      readiness: [],
      registry: new Registry(),
      v1: [authenticated(auth, changesCapability({ pool, databaseUrl: db.url }), webhooksCapability({ pool, secrets, targets }))],
    });
    closers.push(() => app.close());
    const base = await app.listen({ host: '127.0.0.1', port: 0 });
    const token = (await auth.tokens.issue({ userId: randomUUID(), tenant: a.slug, roles: ['admin'] })).accessToken;
    const headers = { authorization: `Bearer ${token}`, 'x-tenant': a.slug, 'content-type': 'application/json' };

    // ---- 1. feed read ----
    const followFeed = async () => {
      const started = performance.now();
      let after: string | undefined;
      let count = 0;
      for (;;) {
        const response = await fetch(`${base}/v1/employees/changes?limit=1000${after ? `&after=${after}` : ''}`, { headers });
        const page = (await response.json()) as { data: unknown[]; next: string; hasMore: boolean };
        count += page.data.length;
        after = page.next;
        if (!page.hasMore) break;
      }
      return { count, perSecond: count / ((performance.now() - started) / 1000) };
    };
    const readLog = async () => {
      const started = performance.now();
      let after = START;
      let count = 0;
      for (;;) {
        const page = await store.readAll({ after, maxCount: 1000 });
        count += page.events.length;
        if (comparePositions(page.checkpoint, after) === 0) break;
        after = page.checkpoint;
      }
      return { count, perSecond: count / ((performance.now() - started) / 1000) };
    };
    await followFeed(); // warm-up
    const ours: number[] = [];
    const baseline: number[] = [];
    let feedCount = 0;
    for (let r = 0; r < rounds; r++) {
      const l = await readLog();
      baseline.push(l.perSecond);
      const f = await followFeed();
      ours.push(f.perSecond);
      feedCount = f.count;
    }
    const feed = {
      changesReadPerRound: feedCount,
      oursChangesPerSecond: Math.round(median(ours)),
      baselineRawLogEventsPerSecond: Math.round(median(baseline)),
      ratio: Number((median(ours) / median(baseline)).toFixed(2)),
      rounds: { ours: ours.map(Math.round), baseline: baseline.map(Math.round) },
    };
    say(`feed: ${JSON.stringify(feed)}`);

    // ---- 2. deliveries ----
    const arrivals: Array<{ id: string; at: number; occurredAt: number }> = [];
    const receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { timestamp: string };
        arrivals.push({ id: String(req.headers['webhook-id']), at: Date.now(), occurredAt: Date.parse(body.timestamp) });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    closers.push(() => new Promise<void>((resolve) => receiver.close(() => resolve())));
    const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;

    // Baseline: a sequential in-order sender straight to the receiver.
    const secret = `whsec_${randomBytes(24).toString('base64')}`;
    arrivals.length = 0;
    t = performance.now();
    for (let i = 0; i < deliveries; i++) {
      await sendWebhook(
        receiverUrl,
        secret,
        { id: `msg_${i}`, type: 'employee.details_changed', timestamp: new Date().toISOString(), data: { i } },
        { policy: targets, timeoutMs: 15_000 },
      );
    }
    const baselinePerSecond = deliveries / ((performance.now() - t) / 1000);
    say(`direct sequential sender: ${Math.round(baselinePerSecond)}/s`);

    const projector = runProjection(pool, store, changesProjection, { pollIntervalMs: 100 });
    closers.push(() => projector.stop());
    const dispatcher = await startWebhookDispatcher({
      pool,
      databaseUrl: db.url,
      redisUrl: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
      prefix: `bench-feed-${randomBytes(3).toString('hex')}`,
      secrets,
      targets,
      sweepEveryMs: 1_000,
    });
    closers.push(() => dispatcher.close());
    const created = await fetch(`${base}/v1/webhooks`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ url: receiverUrl, events: ['employee.hired', 'employee.details_changed'] }),
    });
    if (created.status !== 201) throw new Error(`webhook registration failed: ${created.status} ${await created.text()}`);

    const waitArrivals = async (n: number, timeoutMs: number) => {
      const deadline = Date.now() + timeoutMs;
      while (new Set(arrivals.map((x) => x.id)).size < n) {
        if (Date.now() > deadline) throw new Error(`only ${arrivals.length} of ${n} deliveries arrived`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };

    // (a) burst
    arrivals.length = 0;
    t = performance.now();
    await writeChanges(store, a.id, deliveries / 10, 10);
    await waitArrivals(deliveries, 180_000);
    const burstPerSecond = deliveries / ((performance.now() - t) / 1000);
    say(`burst: ${deliveries} delivered at ${Math.round(burstPerSecond)}/s`);

    // (b) steady pace: 50 changes/s for 10 s
    arrivals.length = 0;
    const paced = 500;
    const pace = 50;
    const started = Date.now();
    for (let i = 0; i < paced / 10; i++) {
      const due = started + (i * 10 * 1000) / pace;
      if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
      await writeChanges(store, a.id, 1, 10, 1);
    }
    await waitArrivals(paced, 120_000);
    const first = new Map<string, number>();
    for (const x of arrivals) if (!first.has(x.id)) first.set(x.id, x.at - x.occurredAt);
    const lags = [...first.values()];
    const delivery = {
      burst: {
        changes: deliveries,
        oursPerSecond: Math.round(burstPerSecond),
        baselineDirectSequentialPerSecond: Math.round(baselinePerSecond),
        ratio: Number((burstPerSecond / baselinePerSecond).toFixed(2)),
      },
      lag: { changes: paced, ratePerSecond: pace, p50Ms: percentile(lags, 50), p95Ms: percentile(lags, 95), maxMs: Math.max(...lags) },
    };
    say(`delivery: ${JSON.stringify(delivery)}`);
    return {
      employeesPerTenant: employees,
      changesWritten: written,
      projectionBuild: { events: built.processed, ms: projectionMs },
      feed,
      delivery,
    };
  } finally {
    for (const close of closers.reverse()) await close().catch(() => undefined);
    await store.close();
    await pool.end();
    await db.drop();
  }
}
