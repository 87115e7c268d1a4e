import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createEasClient, type EasClientOptions } from '../../clients/typescript/index.ts';

/**
 * The typed client against a local HTTP server that plays a gateway whose tenant bucket is dry:
 * the first `refusals` calls get 429 with `retryAfter`, the next 201 echoing the body it got.
 */
const servers: Array<{ close(): void }> = [];
afterEach(() => {
  for (const server of servers.splice(0)) server.close();
});

async function gateway(refusals: number, retryAfter: string, options: Partial<EasClientOptions> = {}) {
  const received: Array<{ at: number; body: string }> = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      received.push({ at: Date.now(), body });
      if (received.length <= refusals) {
        res.writeHead(429, { 'content-type': 'application/problem+json', 'retry-after': retryAfter });
        return void res.end(JSON.stringify({ status: 429, detail: 'slow down' }));
      }
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  const eas = createEasClient({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, tenant: 'acme', ...options });
  eas.useSession({ accessToken: 'token', refreshToken: 'refresh', expiresAt: Date.now() + 900_000 });
  return { eas, received };
}

const hire = { email: 'ada@example.test', firstName: 'Ada', lastName: 'Lovelace' };

describe('when a call is refused with 429', () => {
  it('sends it again, body and all, after Retry-After', async () => {
    const { eas, received } = await gateway(1, '1');
    const created = await eas.api.POST('/v1/employees', { body: hire });
    expect(created.response.status).toBe(201);
    expect(received.map((r) => JSON.parse(r.body) as unknown)).toEqual([hire, hire]);
    expect((received[1]?.at ?? 0) - (received[0]?.at ?? 0)).toBeGreaterThanOrEqual(900);
  });

  it('gives the 429 back after rateLimitRetries attempts, or at once when told not to retry', async () => {
    const twice = await gateway(5, '0');
    expect((await twice.eas.api.POST('/v1/employees', { body: hire })).response.status).toBe(429);
    expect(twice.received).toHaveLength(3); // the call and its 2 retries

    const never = await gateway(5, '0', { rateLimitRetries: 0 });
    expect((await never.eas.api.POST('/v1/employees', { body: hire })).response.status).toBe(429);
    expect(never.received).toHaveLength(1);
  });

  it('stops waiting for the retry when the caller aborts, and never sends it', async () => {
    const { eas, received } = await gateway(1, '20');
    const controller = new AbortController();
    const started = Date.now();
    const call = eas.api.POST('/v1/employees', { body: hire, signal: controller.signal });
    setTimeout(() => controller.abort(), 300);
    await expect(call).rejects.toMatchObject({ name: 'AbortError' });
    const waited = Date.now() - started;
    expect(waited).toBeGreaterThanOrEqual(250);
    expect(waited).toBeLessThan(10_000); // well before the 20 s Retry-After
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(received).toHaveLength(1);
  });

  it('does not wait for a Retry-After longer than 30 s: the caller decides', async () => {
    const { eas, received } = await gateway(1, '120');
    const started = Date.now();
    const refused = await eas.api.POST('/v1/employees', { body: hire });
    expect(refused.response.status).toBe(429);
    expect(refused.error).toMatchObject({ status: 429 });
    expect(received).toHaveLength(1);
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});
