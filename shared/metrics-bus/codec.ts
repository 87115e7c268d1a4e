import { z } from 'zod';
import type { UsageSample } from './port.ts';

/**
 * Wire form of a sample: compact JSON with short keys (the samples are the bulk of the bus's
 * bytes). Decoding validates, so one bad message cannot poison a rollup.
 */
const wireSample = z.object({
  t: z.string().min(1).max(64),
  u: z.string().min(1).max(128),
  r: z.string().max(512),
  m: z.string().max(16),
  s: z.number().int().min(100).max(599),
  d: z.number().finite().min(0),
  ts: z.number().int().min(0),
});

export function encodeSample(sample: UsageSample): string {
  return JSON.stringify({
    t: sample.tenantId,
    u: sample.userId,
    r: sample.route,
    m: sample.method,
    s: sample.status,
    d: sample.durationMs,
    ts: sample.timestamp,
  });
}

/** The sample, or `undefined` when the bytes are not a valid sample. */
export function decodeSample(bytes: Buffer | string | null): UsageSample | undefined {
  if (bytes === null) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(typeof bytes === 'string' ? bytes : bytes.toString('utf8'));
  } catch {
    return undefined;
  }
  const parsed = wireSample.safeParse(json);
  if (!parsed.success) return undefined;
  const w = parsed.data;
  return { tenantId: w.t, userId: w.u, route: w.r, method: w.m, status: w.s, durationMs: w.d, timestamp: w.ts };
}
