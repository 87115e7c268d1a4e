import { Registry } from 'prom-client';
import { describe, expect, it, vi } from 'vitest';
import { createGateway } from '../../../services/gateway/app.ts';
import { lazyChild, wantsPrettyLogs } from '../../../shared/logger.ts';
import { createMemoryLogger } from '../../support/logs.ts';

/** A gateway whose logger writes JSON lines into `lines`, with one route behind a hook that binds tenant and user as auth does. */
async function gatewayLogging(level: 'info' | 'warn') {
  const { logger, lines } = createMemoryLogger(level);
  const app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_024, LOG_LEVEL: level, NODE_ENV: 'test' },
    logger,
    readiness: [],
    registry: new Registry(),
    v1: [
      async (v1) => {
        v1.addHook('onRequest', async (request, reply) => {
          // what services/auth/plugin.ts does once it knows the caller
          request.log = request.log.child({ tenant: 'acme', userId: 'user-1' });
          reply.log = request.log;
        });
        v1.get('/probe', async (request) => {
          request.log.warn({ step: 'handler' }, 'probe warned');
          return { ok: true };
        });
        v1.get('/quiet', async () => ({ ok: true }));
      },
    ],
  });
  return { app, lines, logger };
}

describe('request logs', () => {
  it('carry the request id, and the tenant and user once auth knows them, on every line of the request', async () => {
    const { app, lines } = await gatewayLogging('info');
    try {
      const response = await app.inject({ url: '/v1/probe', headers: { 'x-request-id': 'req-1' } });
      expect(response.statusCode).toBe(200);
      const byMessage = (msg: string) => lines.find((line) => line.msg === msg);
      expect(byMessage('incoming request')).toMatchObject({ reqId: 'req-1' });
      expect(byMessage('probe warned')).toMatchObject({ reqId: 'req-1', tenant: 'acme', userId: 'user-1', step: 'handler' });
      expect(byMessage('request completed')).toMatchObject({ reqId: 'req-1', tenant: 'acme', userId: 'user-1' });
    } finally {
      await app.close();
    }
  });

  it('name the method, path and route of a request, never its query string', async () => {
    const { app, lines } = await gatewayLogging('info');
    try {
      const response = await app.inject({ url: '/v1/probe?email=ada@example.test&firstName=Ada', headers: { 'x-request-id': 'req-q' } });
      expect(response.statusCode).toBe(200);
      const incoming = lines.find((line) => line.msg === 'incoming request');
      expect(incoming).toMatchObject({ reqId: 'req-q', req: { method: 'GET', url: '/v1/probe', route: '/v1/probe' } });
      const written = JSON.stringify(lines);
      expect(written).not.toContain('ada@example.test');
      expect(written).not.toContain('firstName=Ada');
    } finally {
      await app.close();
    }
  });

  it('cost no pino child logger for a request that writes no line', async () => {
    const { app, logger } = await gatewayLogging('warn');
    try {
      const child = vi.spyOn(logger, 'child');
      expect((await app.inject({ url: '/v1/quiet' })).statusCode).toBe(200);
      expect(child).not.toHaveBeenCalled();
      await app.inject({ url: '/v1/probe' });
      expect(child).toHaveBeenCalledTimes(1); // the one line written, with all its bindings
    } finally {
      await app.close();
    }
  });

  it('at warn, write only the warning, still with all its bindings', async () => {
    const { app, lines } = await gatewayLogging('warn');
    try {
      await app.inject({ url: '/v1/probe', headers: { 'x-request-id': 'req-2' } });
      expect(lines.map((line) => line.msg)).toEqual(['probe warned']);
      expect(lines[0]).toMatchObject({ reqId: 'req-2', tenant: 'acme', userId: 'user-1' });
    } finally {
      await app.close();
    }
  });
});

describe('a lazy child logger', () => {
  it('makes no pino child until it writes a line, then writes with its merged bindings', () => {
    const { logger: parent, lines } = createMemoryLogger('warn');
    const child = vi.spyOn(parent, 'child');
    const logger = lazyChild(parent, { reqId: 'r' }).child({ tenant: 't' });
    logger.info('not written');
    logger.debug('not written');
    expect(child).not.toHaveBeenCalled();
    expect(logger.level).toBe('warn');
    logger.error({ code: 7 }, 'written');
    expect(child).toHaveBeenCalledTimes(1);
    expect(lines).toEqual([expect.objectContaining({ reqId: 'r', tenant: 't', code: 7, msg: 'written' })]);
  });
});

describe('log format', () => {
  it('is pretty on a terminal (auto) or when asked, JSON otherwise', () => {
    expect(wantsPrettyLogs('auto', true)).toBe(true);
    expect(wantsPrettyLogs('auto', false)).toBe(false);
    expect(wantsPrettyLogs('pretty', false)).toBe(true);
    expect(wantsPrettyLogs('json', true)).toBe(false);
  });
});
