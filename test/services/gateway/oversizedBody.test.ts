import { execFile } from 'node:child_process';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { createGateway } from '../../../services/gateway/app.ts';
import { DRAIN_LIMIT } from '../../../services/gateway/drainRefusedBody.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestApp, createTestAuth, provisionTenant, type TestTenant } from '../../support/auth.ts';

/**
 * Regression: a client sending a body over the limit (1 MiB) often got a reset (EPIPE) instead
 * of the 413: the body parser refused it after authentication, with `Connection: close`, and the
 * socket was closed with the client's body still unread. A real listening gateway; Node's fetch
 * in a process of its own, and raw sockets.
 */
const MB = 1_048_576;
let db: TestDatabase;
let auth: AuthDeps;
let app: FastifyInstance;
let port: number;
let tenant: TestTenant;

beforeAll(async () => {
  db = await createTestDatabase();
  auth = await createTestAuth(db.pool);
  app = await createTestApp(auth);
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as AddressInfo).port;
  tenant = await provisionTenant(db.pool);
});
afterAll(async () => {
  await app?.close();
  await auth?.close();
  await db?.drop();
});

const PROBLEM_413 = '413 application/problem+json /problems/content-too-large';

/** `tries` POSTs of `bytes` to an authenticated route by Node's fetch, from another process. */
async function upload(bytes: number, tries: number, headers: Record<string, string>, chunked = false): Promise<string[]> {
  const { stdout } = await promisify(execFile)(process.execPath, [`${import.meta.dirname}/../../support/gateway/uploadClient.ts`], {
    env: {
      ...process.env,
      URL: `http://127.0.0.1:${port}/v1/auth/logout`,
      BYTES: String(bytes),
      TRIES: String(tries),
      HEADERS: JSON.stringify(headers),
      ...(chunked && { CHUNKED: '1' }),
    },
  });
  return JSON.parse(stdout) as string[];
}

/** Reads from `socket` until `until` holds for what has arrived (latin1), or the socket ends. */
function readUntil(socket: Socket, until: (received: string) => boolean): Promise<{ received: string; closed: boolean }> {
  return new Promise((resolve) => {
    let received = '';
    const onData = (chunk: Buffer) => {
      received += chunk.toString('latin1');
      if (until(received)) finish(false);
    };
    const finish = (closed: boolean) => {
      socket.off('data', onData);
      resolve({ received, closed });
    };
    socket.on('data', onData);
    socket.once('close', () => finish(true));
  });
}

const oneResponse = (received: string) => {
  const end = received.indexOf('\r\n\r\n');
  const length = /\r\ncontent-length: (\d+)/i.exec(received)?.[1];
  return end >= 0 && length !== undefined && received.length >= end + 4 + Number(length);
};

describe('when a client sends a body over the limit', () => {
  it('Node fetch reads the 413 problem every time (3 MB, 20 tries, with a bearer token)', async () => {
    const headers = await authHeaders(auth, tenant, 'employee');
    expect(await upload(3 * MB, 20, headers)).toEqual(Array<string>(20).fill(PROBLEM_413));
  }, 120_000);

  it('Node fetch reads it too when the body is larger than the sockets can buffer (12 MB, 20 tries)', async () => {
    const headers = await authHeaders(auth, tenant, 'employee');
    expect(await upload(12 * MB, 20, headers)).toEqual(Array<string>(20).fill(PROBLEM_413));
  }, 120_000);

  it('and for a body sent without a length (chunked), refused by the body parser (12 MB, 10 tries)', async () => {
    const headers = await authHeaders(auth, tenant, 'employee');
    expect(await upload(12 * MB, 10, headers, true)).toEqual(Array<string>(10).fill(PROBLEM_413));
  }, 120_000);

  it('refuses on Content-Length before authentication: a bad token gets the 413, not a 401', async () => {
    const outcomes = await upload(2 * MB, 1, { authorization: 'Bearer not-a-token', 'x-tenant': tenant.slug });
    expect(outcomes).toEqual([PROBLEM_413]);
  });

  it('reads the refused body away and then serves the next request on the same connection', async () => {
    const socket = connect(port, '127.0.0.1');
    try {
      const refused = readUntil(socket, oneResponse);
      socket.write(`POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${3 * MB}\r\n\r\n`);
      socket.write(Buffer.alloc(3 * MB, 0x20));
      const first = await refused;
      expect(first.received).toMatch(/^HTTP\/1\.1 413 /);
      expect(first.received).not.toMatch(/\r\nconnection: close\r\n/i);
      const next = readUntil(socket, oneResponse);
      socket.write('GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n');
      const second = await next;
      expect(second.closed).toBe(false);
      expect(second.received).toMatch(/^HTTP\/1\.1 200 /);
    } finally {
      socket.destroy();
    }
  });

  it('closes the connection of a body that goes on past the drain bound', async () => {
    const socket = connect(port, '127.0.0.1');
    let written = 0;
    try {
      const answer = readUntil(socket, () => false);
      socket.write(`POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${1024 * MB}\r\n\r\n`);
      const piece = Buffer.alloc(MB, 0x20);
      // Write as fast as the server reads, until it closes (or far past the bound plus any buffers).
      socket.on('error', () => undefined);
      while (!socket.destroyed && written < 200 * MB) {
        written += piece.length;
        if (!socket.write(piece)) await new Promise((resolve) => socket.once('drain', resolve).once('close', resolve));
      }
      const { received, closed } = await answer;
      expect(closed).toBe(true);
      expect(received).toMatch(/^HTTP\/1\.1 413 /);
      // The bound, plus what the two sockets' buffers hold.
      expect(written).toBeLessThan(DRAIN_LIMIT.bytes + 64 * MB);
    } finally {
      socket.destroy();
    }
  }, 60_000);

  it('a gateway that starts closing ends a connection it is draining at once, not after the bound', async () => {
    const gateway = await createGateway({
      config: { BODY_LIMIT_BYTES: MB, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
      readiness: [],
      registry: new Registry(),
      v1: [],
    });
    await gateway.listen({ host: '127.0.0.1', port: 0 });
    const socket = connect((gateway.server.address() as AddressInfo).port, '127.0.0.1');
    socket.on('error', () => undefined);
    try {
      const refused = readUntil(socket, oneResponse);
      socket.write(`POST /v1/anything HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${100 * MB}\r\n\r\n`);
      socket.write(Buffer.alloc(MB, 0x20));
      expect((await refused).received).toMatch(/^HTTP\/1\.1 413 /);
      const ended = readUntil(socket, () => false);
      const started = performance.now();
      await gateway.close();
      expect(performance.now() - started).toBeLessThan(DRAIN_LIMIT.ms / 2);
      expect((await ended).closed).toBe(true);
    } finally {
      socket.destroy();
      await gateway.close();
    }
  });
});
