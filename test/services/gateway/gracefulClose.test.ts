import { EventEmitter, once } from 'node:events';
import { Agent, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createGateway, type V1Capability } from '../../../services/gateway/app.ts';

/** Emits a route's name when a request reaches it: the test closes the gateway only then. */
const entered = new EventEmitter();

/**
 * Closing the gateway (SIGTERM) drains what is in flight, bounded: a long-poll hears
 * `app.shutdownSignal` and answers at once (regression: a `?wait=30` feed request kept
 * server.close waiting past SHUTDOWN_TIMEOUT_MS), and a response sent while closing ends its
 * keep-alive connection (regression: the client's idle keep-alive socket held server.close open
 * until the 72 s keep-alive timeout, so the process exited 1 from the shutdown timer).
 */
const slow: V1Capability = async (v1) => {
  v1.get('/long-poll', async (req) => {
    entered.emit('long-poll');
    const signal = req.server.shutdownSignal;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 30_000);
      signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
    });
    return { data: [], aborted: signal.aborted };
  });
  v1.get('/busy', async () => {
    entered.emit('busy');
    // A request that takes a while: the close must wait for it, which is what is tested.
    await new Promise((r) => setTimeout(r, 400));
    return { ok: true };
  });
};

type Answer = { status: number; connection: string | undefined; body: string; at: number };

function get(agent: Agent, url: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.once('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body, at: Date.now() }));
    });
    req.once('error', reject);
    req.end();
  });
}

async function listening() {
  const app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry: new Registry(),
    v1: [slow],
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, base: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

describe('when the gateway closes with requests in flight', () => {
  it('a long-poll listening to app.shutdownSignal answers at once and the close completes', async () => {
    const { app, base } = await listening();
    const agent = new Agent({ keepAlive: true });
    try {
      const started = once(entered, 'long-poll');
      const answer = get(agent, `${base}/v1/long-poll`);
      await started;
      const closing = Date.now();
      await app.close();
      const closedAfter = Date.now() - closing;
      const { status, body, connection, at } = await answer;
      expect(status).toBe(200);
      expect(JSON.parse(body)).toEqual({ data: [], aborted: true });
      expect(connection).toBe('close');
      expect(at - closing).toBeLessThan(2_000);
      expect(closedAfter).toBeLessThan(2_000);
    } finally {
      agent.destroy();
    }
  });

  it('a keep-alive connection whose request was in flight is closed with its answer, so the close completes', async () => {
    const { app, base } = await listening();
    const agent = new Agent({ keepAlive: true, keepAliveMsecs: 60_000 });
    try {
      // A warm keep-alive connection, then a slow request on it.
      expect((await get(agent, `${base}/health/live`)).status).toBe(200);
      const started = once(entered, 'busy');
      const answer = get(agent, `${base}/v1/busy`);
      await started;
      const closing = Date.now();
      const closed = app.close().then(() => Date.now() - closing);
      const { status, connection } = await answer;
      expect(status).toBe(200);
      expect(connection).toBe('close');
      const closedAfter = await Promise.race([closed, new Promise<number>((r) => setTimeout(() => r(Infinity), 5_000))]);
      expect(closedAfter).toBeLessThan(2_000);
    } finally {
      agent.destroy();
      await app.close();
    }
  });
});
