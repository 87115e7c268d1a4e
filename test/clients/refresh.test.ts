import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createEasClient, type Session } from '../../clients/typescript/index.ts';

/**
 * The typed client's refresh against a local HTTP server that plays the gateway: what a refresh
 * meets during a deploy (a draining gateway's 503, a 429, a dropped connection) is retried; only
 * a 401 ends the session.
 */
type Step = { status: number; retryAfter?: string } | 'drop';

const servers: Array<{ close(): void }> = [];
afterEach(() => {
  for (const server of servers.splice(0)) server.close();
});

/** Answers POST /v1/auth/refresh by `steps` in turn (then 200 with new tokens); GET /v1/roles is 401 unless the bearer is the new token. */
async function gateway(steps: Step[]) {
  const refreshes: number[] = [];
  let issued = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/auth/refresh') {
        refreshes.push(Date.now());
        const step = steps.shift();
        if (step === 'drop') return void req.socket.destroy();
        if (step) {
          res.writeHead(step.status, {
            'content-type': 'application/problem+json',
            ...(step.retryAfter ? { 'retry-after': step.retryAfter } : {}),
          });
          return void res.end(JSON.stringify({ status: step.status, detail: `refused with ${step.status}` }));
        }
        issued++;
        res.writeHead(200, { 'content-type': 'application/json' });
        return void res.end(JSON.stringify({ accessToken: `new-${issued}`, refreshToken: `refresh-${issued}`, expiresIn: 900 }));
      }
      const ok = req.headers.authorization === `Bearer new-${issued}` && issued > 0;
      res.writeHead(ok ? 200 : 401, { 'content-type': 'application/json' });
      res.end(JSON.stringify(ok ? { data: [] } : { status: 401, detail: 'expired' }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const sessions: Array<Session | null> = [];
  const eas = createEasClient({ baseUrl, tenant: 'acme', onSession: (s) => sessions.push(s) });
  eas.useSession({ accessToken: 'old', refreshToken: 'refresh-0', expiresAt: Date.now() });
  return { eas, refreshes, sessions };
}

describe('when the access token has expired and the refresh meets a transient failure', () => {
  it('waits out a dropped connection, a 503 with Retry-After and a 429, then carries on signed in', async () => {
    const { eas, refreshes, sessions } = await gateway(['drop', { status: 503, retryAfter: '1' }, { status: 429, retryAfter: '1' }]);
    const roles = await eas.api.GET('/v1/roles');
    expect(roles.response.status).toBe(200);
    expect(eas.session()?.refreshToken).toBe('refresh-1');
    expect(sessions.filter((s) => s === null)).toEqual([]);
    expect(refreshes).toHaveLength(4);
    expect((refreshes[2] ?? 0) - (refreshes[1] ?? 0)).toBeGreaterThanOrEqual(900); // Retry-After: 1
  });

  it('keeps the session when the refresh still fails after its retries, and a later refresh succeeds', async () => {
    const { eas } = await gateway([{ status: 503, retryAfter: '120' }]);
    await expect(eas.refresh()).rejects.toMatchObject({ status: 503 });
    expect(eas.session()?.refreshToken).toBe('refresh-0');
    await eas.refresh();
    expect(eas.session()?.refreshToken).toBe('refresh-1');
  });
});

describe('when the refresh answers 401', () => {
  it('ends the session', async () => {
    const { eas, sessions } = await gateway([{ status: 401 }]);
    await expect(eas.refresh()).rejects.toMatchObject({ status: 401 });
    expect(eas.session()).toBeNull();
    expect(sessions.at(-1)).toBeNull();
  });
});
