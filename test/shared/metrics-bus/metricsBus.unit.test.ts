import fc from 'fast-check';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { BoundedBuffer } from '../../../shared/metrics-bus/boundedBuffer.ts';
import { decodeSamples, MAX_CLOCK_AHEAD_MS, MAX_SAMPLES_PER_MESSAGE, packSamples } from '../../../shared/metrics-bus/codec.ts';
import { createInProcessBus } from '../../../shared/metrics-bus/inProcess.ts';
import type { SampleBatch, UsageSample } from '../../../shared/metrics-bus/port.ts';
import { waitFor } from '../../support/waitFor.ts';

const TENANT_A = '00000000-0000-4000-8000-00000000000a';
const TENANT_B = '00000000-0000-4000-8000-00000000000b';

const sample = (i: number, tenantId = TENANT_A): UsageSample => ({
  tenantId,
  userId: `u${i % 7}`,
  route: '/v1/employees/:id',
  method: 'GET',
  status: 200,
  durationMs: i / 10,
  timestamp: 1_700_000_000_000 + i,
});

describe('BoundedBuffer', () => {
  describe('when more is pushed than it holds', () => {
    it('drops the oldest entries and says how many', () => {
      const buffer = new BoundedBuffer<number>(3);
      const dropped = [1, 2, 3, 4, 5].map((n) => buffer.push(n));
      expect(dropped).toEqual([0, 0, 0, 1, 1]);
      expect(buffer.take(10)).toEqual([3, 4, 5]);
    });
  });

  describe('when a failed batch is requeued', () => {
    it('goes back in front, and the oldest of the union is dropped beyond capacity', () => {
      const buffer = new BoundedBuffer<number>(4);
      for (const n of [1, 2, 3, 4]) buffer.push(n);
      const batch = buffer.take(2); // [1, 2] out for sending
      buffer.push(5);
      buffer.push(6);
      expect(buffer.requeue(batch)).toBe(2); // 1 and 2 were the oldest
      expect(buffer.take(10)).toEqual([3, 4, 5, 6]);
    });
  });

  it('keeps FIFO order under any interleaving (model check)', () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.integer({ min: 0, max: 100 }), fc.constant(-1)), { maxLength: 300 }), (ops) => {
        const buffer = new BoundedBuffer<number>(16);
        let model: number[] = [];
        for (const op of ops) {
          if (op === -1) expect(buffer.take(3)).toEqual(model.splice(0, 3));
          else {
            buffer.push(op);
            model.push(op);
            if (model.length > 16) model = model.slice(model.length - 16);
          }
          expect(buffer.size).toBe(model.length);
        }
      }),
    );
  });
});

describe('wire codec', () => {
  it('round-trips samples, one tenant per message, at most 500 per message, order kept', () => {
    const samples = [
      ...Array.from({ length: 1_203 }, (_, i) => sample(i, TENANT_A)),
      ...Array.from({ length: 10 }, (_, i) => sample(i, TENANT_B)),
    ];
    const messages = packSamples(samples);
    expect(messages.map((m) => m.key)).toEqual([TENANT_A, TENANT_A, TENANT_A, TENANT_B]);
    const decoded = messages.flatMap((m) => decodeSamples(m.value)?.samples ?? []);
    expect(decoded).toEqual(samples);
    expect(Math.max(...messages.map((m) => decodeSamples(m.value)?.samples.length ?? 0))).toBe(MAX_SAMPLES_PER_MESSAGE);
  });

  it('rejects anything that is not a valid message instead of throwing', () => {
    for (const bad of [
      null,
      'not json',
      '{}',
      '{"v":1,"t":"a","s":[]}',
      '{"v":1,"t":"a","s":[["u","/r","GET",99,1,1]]}',
      '{"v":2,"t":"a","s":[["u","/r","GET",200,1,1]]}',
    ]) {
      expect(decodeSamples(bad)).toBeUndefined();
    }
  });

  // Each of these once passed decoding and then failed its PostgreSQL batch on every retry, or
  // held a KPI wrong; a sample is dropped on its own, its neighbours kept.
  const message = (tenantId: string, ...tuples: unknown[][]) => JSON.stringify({ v: 1, t: tenantId, s: tuples });
  const NOW = 1_700_000_000_000;
  const good = ['kept', '/r', 'GET', 200, 1, NOW];
  const keeps = (bad: unknown[], now = NOW) => {
    const decoded = decodeSamples(message(TENANT_A, good, bad, good), now);
    expect(decoded?.samples.map((s) => s.userId)).toEqual(['kept', 'kept']);
    expect(decoded?.dropped).toBe(1);
  };

  it('refuses a message whose tenant is no uuid', () => {
    expect(decodeSamples(message('a', good), NOW)).toBeUndefined();
  });

  it('drops a sample the rollups cannot store: NUL, a lone surrogate, a year past 9999', () => {
    const lastInstant = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
    expect(decodeSamples(message(TENANT_A, ['u', '/r', 'GET', 200, 1, lastInstant]), lastInstant)?.samples[0]?.timestamp).toBe(lastInstant);
    keeps(['u\u0000', '/r', 'GET', 200, 1, NOW]);
    keeps(['u', '/r\u0000', 'GET', 200, 1, NOW]);
    // Two ids the PostgreSQL driver would both write as U+FFFD: one upsert row twice.
    expect(decodeSamples(message(TENANT_A, ['\ud800', '/r', 'GET', 200, 1, 1], ['\ud801', '/r', 'GET', 200, 1, 1]), NOW)).toEqual({
      samples: [],
      dropped: 2,
    });
    keeps(['u', '/r', 'GET', 200, 1, lastInstant + 1], lastInstant);
    keeps(['u', '/r', 'GET', 200, 1, 8.64e15 + 1], lastInstant);
  });

  it('drops a duration no request has (over an hour), which would make latency quantiles Infinity', () => {
    expect(decodeSamples(message(TENANT_A, ['u', '/r', 'GET', 200, 3_600_000, NOW]), NOW)?.samples).toHaveLength(1);
    keeps(['u', '/r', 'GET', 200, 3_600_001, NOW]);
    keeps(['u', '/r', 'GET', 200, 1e307, NOW]);
  });

  it("drops a sample stamped more than ten minutes after the consumer's clock", () => {
    expect(decodeSamples(message(TENANT_A, ['u', '/r', 'GET', 200, 1, NOW + MAX_CLOCK_AHEAD_MS]), NOW)?.samples).toHaveLength(1);
    keeps(['u', '/r', 'GET', 200, 1, NOW + MAX_CLOCK_AHEAD_MS + 1]);
  });
});

describe('in-process bus', () => {
  describe('when the sink is healthy', () => {
    it('delivers every sample, in order, off the publishing call', async () => {
      const { publisher, source } = createInProcessBus({ batchSize: 100 });
      const received: UsageSample[] = [];
      await source.start({
        storedOffsets: async () => new Map(),
        apply: async (b: SampleBatch) => {
          received.push(...b.samples);
          return { kind: 'applied' as const };
        },
      });
      for (let i = 0; i < 1_000; i++) publisher.publish(sample(i));
      expect(received).toHaveLength(0); // nothing ran on the caller's stack
      await publisher.flush();
      expect(received).toEqual(Array.from({ length: 1_000 }, (_, i) => sample(i)));
      await source.stop();
    });
  });

  describe('when the sink keeps failing', () => {
    it('holds at most `capacity` samples and counts the dropped ones', async () => {
      const registry = new Registry();
      const { publisher, source } = createInProcessBus({ capacity: 50, registry });
      let attempts = 0;
      await source.start({
        storedOffsets: async () => new Map(),
        apply: async () => {
          attempts++;
          throw new Error('database down');
        },
      });
      for (let i = 0; i < 500; i++) publisher.publish(sample(i));
      await waitFor(() => attempts > 0);
      const text = await registry.metrics();
      expect(Number(/usage_samples_dropped_total\{reason="buffer_full"\} (\d+)/.exec(text)?.[1])).toBe(450);
      await source.stop();
    });
  });
});
