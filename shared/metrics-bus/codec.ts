import { z } from 'zod';
import { MAX_YEAR, safeText, uuid } from '../validation.ts';
import type { UsageSample } from './port.ts';

/**
 * Wire form on the bus: one message carries up to `MAX_SAMPLES_PER_MESSAGE` samples of ONE
 * tenant (the message key), as compact JSON tuples. Per-record overhead in the Kafka client
 * (encoding, CRC, partitioning) dominated at one sample per message (~8k/s on the reference
 * machine); packing is what lets one publisher and one consumer move tens of thousands per
 * second. Decoding validates, so one bad message or sample cannot poison a rollup.
 *
 *   {"v":1,"t":"<tenant>","s":[["<user>","<route>","<method>",<status>,<durationMs>,<epochMs>], ...]}
 */
export const MAX_SAMPLES_PER_MESSAGE = 500;

// The rollups store the tenant as a uuid, the strings as text and the instants as timestamptz and
// date: a value PostgreSQL refuses (a NUL, a lone surrogate, a year past 9999) would fail its whole
// batch on every retry, so such a sample is dropped here (a tenant that is no uuid, its message).
// No request lasts an hour; a duration near the float limit would make every latency quantile
// over it Infinity, which no KPI answer can carry.
const LAST_INSTANT = Date.UTC(MAX_YEAR + 1, 0, 1) - 1;
const MAX_DURATION_MS = 3_600_000;
const tuple = z.tuple([
  safeText(128, { min: 1 }),
  safeText(512),
  safeText(16),
  z.number().int().min(100).max(599),
  z.number().finite().min(0).max(MAX_DURATION_MS),
  z.number().int().min(0).max(LAST_INSTANT),
]);
// The envelope decides whether the message is ours at all; each sample is then kept or dropped on
// its own, so one sample no request can have does not take its neighbours with it.
const wireMessage = z.object({ v: z.literal(1), t: uuid(), s: z.array(z.unknown()).min(1) });

/**
 * How far ahead of the consumer's clock a sample may be stamped (the gateways' clocks drift a
 * little). A sample from further ahead is no request that happened: kept, it would hold a user
 * active and the KPI watermarks ahead until its day came.
 */
export const MAX_CLOCK_AHEAD_MS = 10 * 60_000;

/** Encodes samples that all belong to `tenantId`. */
export function encodeSamples(tenantId: string, samples: readonly UsageSample[]): string {
  return JSON.stringify({
    v: 1,
    t: tenantId,
    s: samples.map((s) => [s.userId, s.route, s.method, s.status, s.durationMs, s.timestamp]),
  });
}

/** A message's samples, and how many of its samples were dropped (see above). */
export type DecodedMessage = { readonly samples: UsageSample[]; readonly dropped: number };

/**
 * The samples of one message, or `undefined` when the bytes are not a message of ours. A sample
 * the rollups cannot store, or stamped more than `MAX_CLOCK_AHEAD_MS` after `now`, is dropped.
 */
export function decodeSamples(bytes: Buffer | string | null, now = Date.now()): DecodedMessage | undefined {
  if (bytes === null) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(typeof bytes === 'string' ? bytes : bytes.toString('utf8'));
  } catch {
    return undefined;
  }
  const parsed = wireMessage.safeParse(json);
  if (!parsed.success) return undefined;
  const latest = now + MAX_CLOCK_AHEAD_MS;
  const tenantId = parsed.data.t;
  const samples: UsageSample[] = [];
  for (const raw of parsed.data.s) {
    const sample = tuple.safeParse(raw);
    if (!sample.success || sample.data[5] > latest) continue;
    const [userId, route, method, status, durationMs, timestamp] = sample.data;
    samples.push({ tenantId, userId, route, method, status, durationMs, timestamp });
  }
  return { samples, dropped: parsed.data.s.length - samples.length };
}

/** Groups samples by tenant into messages of at most MAX_SAMPLES_PER_MESSAGE, keeping order. */
export function packSamples(samples: readonly UsageSample[]): Array<{ key: string; value: string }> {
  const byTenant = new Map<string, UsageSample[]>();
  for (const s of samples) {
    const list = byTenant.get(s.tenantId);
    if (list) list.push(s);
    else byTenant.set(s.tenantId, [s]);
  }
  const messages: Array<{ key: string; value: string }> = [];
  for (const [tenantId, list] of byTenant) {
    for (let i = 0; i < list.length; i += MAX_SAMPLES_PER_MESSAGE) {
      messages.push({ key: tenantId, value: encodeSamples(tenantId, list.slice(i, i + MAX_SAMPLES_PER_MESSAGE)) });
    }
  }
  return messages;
}
