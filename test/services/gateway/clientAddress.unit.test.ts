import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../shared/config.ts';
import { createGateway, type V1Capability } from '../../../services/gateway/app.ts';

// Per-client bounds (login, refresh) key on request.ip: behind a load balancer it must be the
// address the balancer saw, whatever a client writes into X-Forwarded-For itself.
const echo: V1Capability = async (v1) => {
  v1.get('/probe/ip', async (request) => ({ ip: request.ip }));
};

const clientAddressSeenWith = async (trustProxy: string, forwardedFor: string, socket: string) => {
  const app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1024, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry: new Registry(),
    v1: [echo],
    trustProxy: loadConfig({ TRUST_PROXY: trustProxy }).TRUST_PROXY,
  });
  try {
    const response = await app.inject({
      method: 'GET',
      url: '/v1/probe/ip',
      remoteAddress: socket,
      headers: { 'x-forwarded-for': forwardedFor },
    });
    return response.json<{ ip: string }>().ip;
  } finally {
    await app.close();
  }
};

describe('the client address behind a load balancer', () => {
  // The balancer appends the address it saw; the client wrote the entries before it.
  const forwarded = '198.51.100.66, 203.0.113.7';

  it('is the entry the one trusted hop added, not one the client chose, with a hop count', async () => {
    expect(await clientAddressSeenWith('1', forwarded, '10.0.0.2')).toBe('203.0.113.7');
  });

  it('is the entry the trusted balancer added, not one the client chose, with its address', async () => {
    expect(await clientAddressSeenWith('10.0.0.0/8', forwarded, '10.0.0.2')).toBe('203.0.113.7');
  });

  it('is the socket address when the request does not come from a trusted balancer', async () => {
    expect(await clientAddressSeenWith('10.0.0.0/8', forwarded, '192.0.2.9')).toBe('192.0.2.9');
  });
});
