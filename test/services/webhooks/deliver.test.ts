import { createServer } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { Resolver } from '../../../services/webhooks/targets.ts';
import { sendWebhook } from '../../../services/webhooks/deliver.ts';

const resolvesTo =
  (address: string): Resolver =>
  async () => [{ address, family: address.includes(':') ? 6 : 4 }];

describe('when a target name resolves to a special address', () => {
  it('checks again at delivery: a name that now resolves to the metadata address is never connected to (DNS rebinding)', async () => {
    let hits = 0;
    const server = createServer((_req, res) => {
      hits++;
      res.writeHead(200).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      const message = { id: 'msg_1', type: 'employee.hired', timestamp: new Date().toISOString(), data: {} };
      const secret = `whsec_${Buffer.alloc(24, 7).toString('base64')}`;
      const refused = await sendWebhook(`https://rebind.example:${port}/x`, secret, message, {
        policy: { allowHosts: [], resolver: resolvesTo('169.254.169.254') },
        timeoutMs: 1_000,
      });
      expect(refused).toMatchObject({ kind: 'failed', status: null });
      expect(refused.kind === 'failed' && refused.error).toMatch(/^refused/);
      // The connection goes to the address that was checked: a name pinned to 127.0.0.1 (allow-listed) reaches our server.
      const pinned = await sendWebhook(`http://receiver.test:${port}/x`, secret, message, {
        policy: { allowHosts: ['receiver.test'], resolver: resolvesTo('127.0.0.1') },
        timeoutMs: 1_000,
      });
      expect(pinned).toEqual({ kind: 'delivered', status: 200 });
      expect(hits).toBe(1);
    } finally {
      server.close();
    }
  });
});

describe('when a delivery fails, its error names the target as the tenant wrote it', () => {
  it('says where a name points neither in a refusal nor in a connection error', async () => {
    const message = { id: 'msg_2', type: 'employee.hired', timestamp: new Date().toISOString(), data: {} };
    const secret = `whsec_${Buffer.alloc(24, 7).toString('base64')}`;
    const refused = await sendWebhook('https://internal.example/x', secret, message, {
      policy: { allowHosts: [], resolver: resolvesTo('10.20.30.40') },
      timeoutMs: 1_000,
    });
    expect(refused.kind === 'failed' && refused.error).toMatch(/^refused: internal\.example/);
    expect(refused.kind === 'failed' && refused.error).not.toMatch(/10\.20\.30\.40/);
    // A closed port on an allow-listed name: the error names the host, not the address it resolved to.
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const { port } = closed.address() as AddressInfo;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const unreachable = await sendWebhook(`http://receiver.test:${port}/x`, secret, message, {
      policy: { allowHosts: ['receiver.test'], resolver: resolvesTo('127.0.0.1') },
      timeoutMs: 1_000,
    });
    expect(unreachable).toMatchObject({ kind: 'failed', status: null });
    expect(unreachable.kind === 'failed' && unreachable.error).toMatch(/ECONNREFUSED receiver\.test/);
    expect(unreachable.kind === 'failed' && unreachable.error).not.toMatch(/127\.0\.0\.1/);
  });
});

describe('when a receiver answers 101 Switching Protocols', () => {
  it('fails the attempt within its time bound instead of waiting forever', async () => {
    // A raw server: the answer a WebSocket endpoint gives to an upgrade, here to a plain POST.
    const server = createNetServer((socket) => {
      socket.on('error', () => undefined);
      socket.once('data', () => socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n'));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      const message = { id: 'msg_3', type: 'employee.hired', timestamp: new Date().toISOString(), data: {} };
      const secret = `whsec_${Buffer.alloc(24, 7).toString('base64')}`;
      const timeoutMs = 1_000;
      const started = Date.now();
      const settled = await Promise.race([
        sendWebhook(`http://receiver.test:${port}/x`, secret, message, {
          policy: { allowHosts: ['receiver.test'], resolver: resolvesTo('127.0.0.1') },
          timeoutMs,
        }),
        delay(timeoutMs + 2_000, 'still pending' as const),
      ]);
      expect(settled).toEqual({ kind: 'failed', status: 101, error: 'HTTP 101: the receiver switched protocols' });
      expect(Date.now() - started).toBeLessThan(timeoutMs + 1_000);
    } finally {
      server.close();
    }
  });
});
