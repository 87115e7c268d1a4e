import { connect, createServer, type AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGateway } from '../../../services/gateway/app.ts';
import { handleClientError } from '../../../services/gateway/problems.ts';

/**
 * Regression: requests that Node's HTTP parser refuses before Fastify sees them (headers over
 * 16 KiB → 431, a malformed request line → 400, a request not complete in time → 408) were
 * answered by Fastify's default client-error handler with `application/json` bodies of its own
 * shape, not RFC 9457 problems like every other error. Raw sockets: these requests cannot be sent by a client
 * library, nor through app.inject.
 */
let app: FastifyInstance;
let port: number;

beforeAll(async () => {
  app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry: new Registry(),
    v1: [],
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as AddressInfo).port;
});

afterAll(async () => {
  await app?.close();
});

type Raw = { status: number; headers: Record<string, string>; body: string };

/** Writes `payload` on a fresh socket and reads until the server closes it. */
function raw(payload: string | Buffer, to = port): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const socket = connect(to, '127.0.0.1');
    let received = '';
    socket.on('data', (c: Buffer) => (received += c.toString('latin1')));
    socket.once('error', (error: NodeJS.ErrnoException) => (error.code === 'ECONNRESET' && received ? undefined : reject(error)));
    socket.once('close', () => {
      const [head = '', body = ''] = received.split('\r\n\r\n');
      const [statusLine = '', ...lines] = head.split('\r\n');
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body });
    });
    socket.write(payload);
  });
}

const expectProblem = (response: Raw, status: number) => {
  expect(response.status).toBe(status);
  expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
  expect(Number(response.headers['content-length'])).toBe(Buffer.byteLength(response.body));
  expect(response.headers.connection).toBe('close');
  const problem = JSON.parse(response.body) as Record<string, unknown>;
  expect(problem).toMatchObject({
    status,
    type: expect.stringMatching(/^\/problems\//),
    title: expect.any(String),
    detail: expect.any(String),
    instance: expect.any(String),
  });
  expect(problem.requestId).toBe(response.headers['x-request-id']);
  return problem;
};

describe('when Node refuses a request before routing', () => {
  it('headers over 16 KiB: 431 problem', async () => {
    const response = await raw(`GET /v1/employees HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    const problem = expectProblem(response, 431);
    expect(problem).toMatchObject({ type: '/problems/request-header-fields-too-large', instance: '/v1/employees' });
  });

  it('a malformed request line: 400 problem', async () => {
    const response = await raw('GET /v1/employees HTTP/1.1 extra\r\nHost: x\r\n\r\n');
    expectProblem(response, 400);
  });

  it('an invalid header: 400 problem', async () => {
    const response = await raw('GET /health/live HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n');
    expectProblem(response, 400);
  });
});

describe('when a request is not complete within the request timeout', () => {
  it('408 problem (the handler Fastify calls with ERR_HTTP_REQUEST_TIMEOUT)', async () => {
    // Node's request timeout is minutes; the handler gets the same error and socket it would give.
    const server = createServer((socket) => {
      socket.once('data', () =>
        handleClientError(Object.assign(new Error('Request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }), socket),
      );
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const response = await raw(
        'POST /v1/employees HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{',
        (server.address() as AddressInfo).port,
      );
      // A timeout carries no packet to read the target from: the instance is '/'.
      expect(expectProblem(response, 408)).toMatchObject({ type: '/problems/request-timeout', instance: '/' });
    } finally {
      await new Promise((r) => server.close(r));
    }
  });
});
