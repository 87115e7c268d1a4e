import { connect, type AddressInfo, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { DRAIN_LIMIT } from '../../../services/gateway/drainRefusedBody.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { createTestApp, createTestAuth } from '../../support/auth.ts';

/**
 * Regression: only a 413 drained its unread body within a bound, and each drain left a listener
 * on the socket. Any other answer sent before the body was read (401, 404…) left the body to
 * Node, which reads all of it, however long it goes on; and on a keep-alive connection every
 * refused request added a `close` listener. A real listening gateway and raw sockets.
 */
const MB = 1_048_576;
let db: TestDatabase;
let auth: AuthDeps;
let app: FastifyInstance;
let port: number;
const serverSockets: Socket[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  auth = await createTestAuth(db.pool);
  app = await createTestApp(auth);
  app.server.on('connection', (socket: Socket) => serverSockets.push(socket));
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as AddressInfo).port;
});
afterAll(async () => {
  await app?.close();
  await auth?.close();
  await db?.drop();
});

/** Reads from `socket` until `until` holds for what has arrived (latin1), or the socket ends. */
function readUntil(socket: Socket, until: (received: string) => boolean): Promise<{ received: string; closed: boolean }> {
  return new Promise((resolve) => {
    let received = '';
    const onData = (chunk: Buffer) => {
      received += chunk.toString('latin1');
      if (until(received)) finish(false);
    };
    const onClose = () => finish(true);
    const finish = (closed: boolean) => {
      socket.off('data', onData).off('close', onClose);
      resolve({ received, closed });
    };
    socket.on('data', onData);
    socket.once('close', onClose);
  });
}

const oneResponse = (received: string) => {
  const end = received.indexOf('\r\n\r\n');
  const length = /\r\ncontent-length: (\d+)/i.exec(received)?.[1];
  return end >= 0 && length !== undefined && received.length >= end + 4 + Number(length);
};

const sleep = (ms: number) => new Promise<false>((resolve) => setTimeout(() => resolve(false), ms));

describe('when the gateway answers before it has read a chunked body that never ends', () => {
  it.each([
    // Without a content type the body parser leaves the body alone: only the drain may bound it.
    ['404 (no such route)', '/v1/nowhere', '', 404],
    ['401 (no access token)', '/v1/auth/logout', 'Content-Type: application/json\r\n', 401],
  ])(
    'a %s closes the connection within the drain bound',
    async (_name, url, contentType, status) => {
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => undefined);
      let written = 0;
      try {
        const answer = readUntil(socket, () => false);
        socket.write(`POST ${url} HTTP/1.1\r\nHost: x\r\n${contentType}Transfer-Encoding: chunked\r\n\r\n`);
        const piece = Buffer.concat([Buffer.from(`${MB.toString(16)}\r\n`), Buffer.alloc(MB, 0x20), Buffer.from('\r\n')]);
        // As fast as the server reads, until it closes, or far past the bound plus any buffers.
        const started = performance.now();
        while (!socket.destroyed && written < 200 * MB && performance.now() - started < 30_000) {
          written += MB;
          if (!socket.write(piece)) await new Promise((resolve) => socket.once('drain', resolve).once('close', resolve));
        }
        const outcome = await Promise.race([answer, sleep(2 * DRAIN_LIMIT.ms)]);
        expect(outcome && outcome.closed).toBe(true);
        expect(outcome && outcome.received).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
        // The bound, plus what the two sockets' buffers hold.
        expect(written).toBeLessThan(DRAIN_LIMIT.bytes + 64 * MB);
      } finally {
        socket.destroy();
      }
    },
    60_000,
  );
});

describe('when one keep-alive connection sends many requests refused before their bodies', () => {
  it('each drain takes its listeners away with it: their number stays bounded, with no warning', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    const socket = connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    try {
      await new Promise((resolve) => socket.once('connect', resolve));
      const exchange = async (request: string, body?: Buffer) => {
        const answer = readUntil(socket, oneResponse);
        socket.write(request);
        const { received, closed } = await answer;
        expect(closed).toBe(false);
        // The body only after the answer: it is then certainly unread when the answer is sent.
        if (body) socket.write(body);
        return received;
      };
      expect(await exchange('GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n')).toMatch(/^HTTP\/1\.1 200 /);
      const server = serverSockets.at(-1);
      if (!server) throw new Error('no server-side socket');
      const baseline = { close: server.listenerCount('close'), end: server.listenerCount('end') };
      for (let i = 0; i < 20; i++) {
        const refused = await exchange(
          `POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${2 * MB}\r\n\r\n`,
          Buffer.alloc(2 * MB, 0x20),
        );
        expect(refused).toMatch(/^HTTP\/1\.1 413 /);
      }
      // Answered only once the last body has been read away: every drain has ended by then.
      expect(await exchange('GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n')).toMatch(/^HTTP\/1\.1 200 /);
      expect({ close: server.listenerCount('close'), end: server.listenerCount('end') }).toEqual(baseline);
      expect(warnings.filter((name) => name === 'MaxListenersExceededWarning')).toEqual([]);
    } finally {
      process.off('warning', onWarning);
      socket.destroy();
    }
  }, 60_000);
});
