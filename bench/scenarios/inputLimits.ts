/**
 * The price of the edge's exactness, in-process and CPU-only (no I/O to blur it):
 * - reading `timestamptz` text with our field-by-field parser (exact for every year) against
 *   what it replaced, `new Date(text).toISOString()` (year 45 read as 2045);
 * - validating a create-employee body with the input-limits schema (storable text, bounded, instants
 *   in range) against the schema it replaced (same shape, no NUL/surrogate/year checks).
 * Rounds alternate baseline/ours; medians of per-round throughput (operations per second).
 */
import { z } from 'zod';
import { parsePostgresTimestamp } from '../../shared/db/timestamps.ts';
import { createEmployeeBody } from '../../services/employees/schemas.ts';
import { median } from '../support/measure.ts';

type Comparison = { name: string; ours: number; baseline: number; ratio: number };

function opsPerSecond(work: () => void, operations: number): number {
  const started = process.hrtime.bigint();
  work();
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return operations / seconds;
}

function compare(name: string, rounds: number, operations: number, baseline: () => void, ours: () => void): Comparison {
  baseline();
  ours(); // warm up both
  const a: number[] = [];
  const b: number[] = [];
  for (let round = 0; round < rounds; round++) {
    a.push(opsPerSecond(baseline, operations));
    b.push(opsPerSecond(ours, operations));
  }
  const ourRate = median(b);
  const baseRate = median(a);
  return { name, ours: Math.round(ourRate), baseline: Math.round(baseRate), ratio: Number((ourRate / baseRate).toFixed(3)) };
}

export async function runInputLimitsBench(options: { rounds?: number } = {}): Promise<Comparison[]> {
  const rounds = options.rounds ?? 7;

  // PostgreSQL's ISO output as the pool receives it, microseconds included.
  const texts = Array.from({ length: 200_000 }, (_, i) => {
    const d = new Date((i * 9_876_543_211_037) % 253_402_300_799_000); // spread over 1970–9999
    return `${d.toISOString().slice(0, 10)} ${d.toISOString().slice(11, 23)}${String(i % 1000).padStart(3, '0')}+00`;
  });
  let sink = 0;
  const timestamps = compare(
    'timestamptz-parse (ours: exact parser; baseline: new Date().toISOString())',
    rounds,
    texts.length,
    () => {
      for (const t of texts) sink += new Date(t).toISOString().length;
    },
    () => {
      for (const t of texts) sink += parsePostgresTimestamp(t).length;
    },
  );

  // The schema before the input limits (commit cc39a53): bounded, but NUL, lone surrogates
  // and any year passed.
  const previousInstant = z.iso
    .datetime({ offset: true })
    .refine((v) => !Number.isNaN(Date.parse(v)), 'is not a valid instant')
    .transform((v) => new Date(v).toISOString());
  const previous = z
    .object({
      email: z.email().max(320),
      firstName: z.string().trim().min(1).max(100),
      lastName: z.string().trim().min(1).max(100),
      department: z.string().trim().min(1).max(100).optional(),
      roleId: z.uuid().optional(),
      hiredAt: previousInstant.optional(),
    })
    .strict();
  const bodies = Array.from({ length: 20_000 }, (_, i) => ({
    email: `person-${i}@example.test`,
    firstName: `Ada ${i}`,
    lastName: 'Lovelace-Byron',
    department: 'engineering',
    hiredAt: '2024-05-01T09:00:00+02:00',
  }));
  const validation = compare(
    'create-employee body validation (ours: input-limits schema; baseline: the schema before it)',
    rounds,
    bodies.length,
    () => {
      for (const body of bodies) sink += previous.safeParse(body).success ? 1 : 0;
    },
    () => {
      for (const body of bodies) sink += createEmployeeBody.safeParse(body).success ? 1 : 0;
    },
  );
  if (sink === 0) throw new Error('nothing measured');
  return [timestamps, validation];
}
