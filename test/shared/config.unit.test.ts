import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../shared/config.ts';

describe('configuration', () => {
  describe('when nothing is set', () => {
    it('runs on the embedded default', () => {
      const config = loadConfig({});
      expect(config).toMatchObject({ PORT: 3000, HOST: '127.0.0.1', DATA_DIR: './.data', LOG_LEVEL: 'info' });
      expect(config.DATABASE_URL).toBeUndefined();
      expect(config.KAFKA_BROKERS).toBeUndefined();
      expect(config.REDIS_URL).toBeUndefined();
      expect(config.EVENTSTORE_URL).toBeUndefined();
      expect(config.WEBHOOK_DELIVERY_RETENTION_DAYS).toBe(30);
    });

    it('treats empty strings as unset', () => {
      expect(loadConfig({ DATABASE_URL: '', REDIS_URL: '  ' }).DATABASE_URL).toBeUndefined();
    });
  });

  describe('when a value is bad', () => {
    it.each([
      ['PORT', 'eighty'],
      ['PORT', '70000'],
      ['DATABASE_URL', 'mysql://localhost/db'],
      ['REDIS_URL', 'not a url'],
      ['KAFKA_BROKERS', 'localhost'],
      ['LOG_LEVEL', 'loud'],
      ['EVENTSTORE_URL', 'http://localhost:2113'],
      ['WEBHOOK_DELIVERY_RETENTION_DAYS', '0'],
      ['WEBHOOK_DELIVERY_RETENTION_DAYS', '7.5'],
    ])('stops start-up with a message naming %s', (name, value) => {
      const attempt = () => loadConfig({ [name]: value });
      expect(attempt).toThrow(ConfigError);
      expect(attempt).toThrow(new RegExp(`\\b${name}\\b`));
    });

    it('refuses a partial BOOTSTRAP_* set', () => {
      expect(() => loadConfig({ BOOTSTRAP_TENANT: 'acme' })).toThrow(/BOOTSTRAP_ADMIN_EMAIL/);
    });
  });

  it('parses broker lists and accepts any valid port', () => {
    expect(loadConfig({ KAFKA_BROKERS: 'a:9092, b:9093' }).KAFKA_BROKERS).toEqual(['a:9092', 'b:9093']);
    fc.assert(fc.property(fc.integer({ min: 0, max: 65535 }), (port) => loadConfig({ PORT: String(port) }).PORT === port));
  });

  describe('TRUST_PROXY', () => {
    it('refuses true, which would let any client pick its own address', () => {
      expect(() => loadConfig({ TRUST_PROXY: 'true' })).toThrow(/TRUST_PROXY: .*hop count/);
    });

    it("takes a hop count or the proxies' addresses", () => {
      expect(loadConfig({ TRUST_PROXY: '2' }).TRUST_PROXY).toBe(2);
      expect(loadConfig({ TRUST_PROXY: ' 10.0.0.0/8, 192.0.2.1 ,::1 ' }).TRUST_PROXY).toBe('10.0.0.0/8,192.0.2.1,::1');
      expect(loadConfig({ TRUST_PROXY: 'loopback' }).TRUST_PROXY).toBe('loopback');
      expect(loadConfig({}).TRUST_PROXY).toBeUndefined();
    });

    it.each(['0', '1.5', 'lb.internal', '10.0.0.0/33', 'yes'])('refuses %s with a message naming TRUST_PROXY', (value) => {
      expect(() => loadConfig({ TRUST_PROXY: value })).toThrow(/TRUST_PROXY/);
    });
  });
});
