import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { resolveTarget, TargetRefusedError, type Resolver } from '../../../services/webhooks/targets.ts';
import { sendWebhook } from '../../../services/webhooks/deliver.ts';
import { nextRetryDelay, parseRetryAfter, DEFAULT_RETRY_POLICY } from '../../../services/webhooks/schedule.ts';

const resolvesTo =
  (address: string): Resolver =>
  async () => [{ address, family: address.includes(':') ? 6 : 4 }];

describe('when a target name resolves to a special address', () => {
  it.each([
    ['127.0.0.1'],
    ['10.20.30.40'],
    ['169.254.169.254'],
    ['::1'],
    ['172.16.5.4'],
    ['192.168.1.1'],
    ['fd00:ec2::254'],
    ['fe80::1'],
    ['::ffff:127.0.0.1'],
    ['64:ff9b::a00:1'],
    ['64:ff9b:1::a00:1'],
    ['::ffff:0:a00:1'],
    ['fec0::1'],
    ['2002:a00:1::1'],
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2'],
    ['0.0.0.0'],
  ])('refuses %s without the allow-list', async (address) => {
    await expect(resolveTarget('https://hooks.example.com/x', { allowHosts: [], resolver: resolvesTo(address) })).rejects.toBeInstanceOf(TargetRefusedError);
  });

  it('refuses when any of several addresses is special (no picking the public one)', async () => {
    const resolver: Resolver = async () => [
      { address: '93.184.216.34', family: 4 },
      { address: '10.0.0.1', family: 4 },
    ];
    await expect(resolveTarget('https://hooks.example.com/x', { allowHosts: [], resolver })).rejects.toThrow(/10\.0\.0\.1/);
  });

  it('lets a public address through, and what the allow-list names (host, address or CIDR)', async () => {
    await expect(resolveTarget('https://hooks.example.com/x', { allowHosts: [], resolver: resolvesTo('93.184.216.34') })).resolves.toMatchObject({
      address: { address: '93.184.216.34' },
    });
    await expect(resolveTarget('https://internal.corp/x', { allowHosts: ['internal.corp'], resolver: resolvesTo('10.1.1.1') })).resolves.toBeTruthy();
    await expect(resolveTarget('https://internal.corp/x', { allowHosts: ['10.0.0.0/8'], resolver: resolvesTo('10.1.1.1') })).resolves.toBeTruthy();
    await expect(resolveTarget('http://127.0.0.1:9/x', { allowHosts: ['127.0.0.1'] })).resolves.toBeTruthy();
    // http needs the host itself named; an allow-listed range is not enough for plain http.
    await expect(resolveTarget('http://internal.corp/x', { allowHosts: ['10.0.0.0/8'], resolver: resolvesTo('10.1.1.1') })).rejects.toThrow(/https/);
  });

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

describe('the retry schedule', () => {
  it('is ≈ 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, then daily, and ends within 3 days', () => {
    const delays = Array.from({ length: 10 }, (_, i) => nextRetryDelay({ ...DEFAULT_RETRY_POLICY, jitter: 0 }, i + 1, 0.5));
    expect(delays).toEqual([5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 86_400_000, 86_400_000, null, null]);
    const total = delays.reduce<number>((sum, d) => sum + (d ?? 0), 0);
    expect(total).toBeLessThanOrEqual(3 * 86_400_000);
  });

  it('jitters within ±20 % and never shortens a Retry-After', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 8 }), fc.double({ min: 0, max: 1, noNaN: true }), fc.option(fc.integer({ min: 0, max: 10 * 86_400_000 })), (n, r, retryAfter) => {
        const base = DEFAULT_RETRY_POLICY.scheduleMs[n - 1] ?? 0;
        const delay = nextRetryDelay(DEFAULT_RETRY_POLICY, n, r, retryAfter ?? undefined) ?? -1;
        expect(delay).toBeGreaterThanOrEqual(Math.floor(base * 0.8));
        if (retryAfter === null) expect(delay).toBeLessThanOrEqual(Math.ceil(base * 1.2));
        else expect(delay).toBeGreaterThanOrEqual(Math.min(retryAfter, DEFAULT_RETRY_POLICY.maxRetryAfterMs));
      }),
    );
  });

  it('never schedules a retry past 3 days after the first failure, whatever jitter or Retry-After ask', () => {
    const window = DEFAULT_RETRY_POLICY.windowMs ?? 0;
    expect(window).toBe(3 * 86_400_000);
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.double({ min: 0, max: 1, noNaN: true }), fc.option(fc.integer({ min: 0, max: 2 * 86_400_000 }))), { minLength: 8, maxLength: 8 }),
        (draws) => {
          let elapsed = 0;
          for (const [n, [r, retryAfter]] of draws.entries()) {
            const delay = nextRetryDelay(DEFAULT_RETRY_POLICY, n + 1, r, retryAfter ?? undefined, elapsed);
            if (delay === null) return;
            elapsed += delay;
            expect(elapsed).toBeLessThanOrEqual(window);
            // Never sooner than the receiver asked.
            if (retryAfter !== null) expect(delay).toBeGreaterThanOrEqual(Math.min(retryAfter, DEFAULT_RETRY_POLICY.maxRetryAfterMs));
          }
        },
      ),
    );
    // The last scheduled retry is moved to the window's end; a Retry-After beyond it ends the retries.
    expect(nextRetryDelay(DEFAULT_RETRY_POLICY, 8, 1, undefined, window - 3_600_000)).toBe(3_600_000);
    expect(nextRetryDelay(DEFAULT_RETRY_POLICY, 8, 0.5, 7_200_000, window - 3_600_000)).toBeNull();
    expect(nextRetryDelay(DEFAULT_RETRY_POLICY, 3, 0.5, undefined, window)).toBeNull();
  });

  it('reads Retry-After as seconds or an HTTP date', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(parseRetryAfter('120', now)).toBe(120_000);
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:01:00 GMT', now)).toBe(60_000);
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter(undefined, now)).toBeUndefined();
  });
});
