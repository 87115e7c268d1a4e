import { describe, expect, it } from 'vitest';
import { resolveTarget, TargetRefusedError, type Resolver } from '../../../services/webhooks/targets.ts';

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
    await expect(resolveTarget('https://hooks.example.com/x', { allowHosts: [], resolver: resolvesTo(address) })).rejects.toBeInstanceOf(
      TargetRefusedError,
    );
  });

  it('refuses when any of several addresses is special (no picking the public one)', async () => {
    const resolver: Resolver = async () => [
      { address: '93.184.216.34', family: 4 },
      { address: '10.0.0.1', family: 4 },
    ];
    await expect(resolveTarget('https://hooks.example.com/x', { allowHosts: [], resolver })).rejects.toThrow(/hooks\.example\.com/);
  });

  it('says the name is refused without saying which address it points at', async () => {
    const refusal = resolveTarget('https://hooks.example.com/x', { allowHosts: [], resolver: resolvesTo('172.18.0.5') });
    await expect(refusal).rejects.toThrow(/hooks\.example\.com .*private/);
    await expect(refusal).rejects.not.toThrow(/172\.18/);
  });

  it('lets a public address through, and what the allow-list names (host, address or CIDR)', async () => {
    await expect(
      resolveTarget('https://hooks.example.com/x', { allowHosts: [], resolver: resolvesTo('93.184.216.34') }),
    ).resolves.toMatchObject({
      address: { address: '93.184.216.34' },
    });
    await expect(
      resolveTarget('https://internal.corp/x', { allowHosts: ['internal.corp'], resolver: resolvesTo('10.1.1.1') }),
    ).resolves.toBeTruthy();
    await expect(
      resolveTarget('https://internal.corp/x', { allowHosts: ['10.0.0.0/8'], resolver: resolvesTo('10.1.1.1') }),
    ).resolves.toBeTruthy();
    await expect(resolveTarget('http://127.0.0.1:9/x', { allowHosts: ['127.0.0.1'] })).resolves.toBeTruthy();
    // http needs the host itself named; an allow-listed range is not enough for plain http.
    await expect(resolveTarget('http://internal.corp/x', { allowHosts: ['10.0.0.0/8'], resolver: resolvesTo('10.1.1.1') })).rejects.toThrow(
      /https/,
    );
  });
});
