import { describe, expect, it } from 'vitest';
import { workforceBuckets } from '../../../services/analytics/workforceRoutes.ts';

const at = (iso: string) => Date.parse(iso);
const show = (buckets: ReturnType<typeof workforceBuckets>) =>
  buckets?.map((b) => `${new Date(b.start).toISOString().slice(0, 10)}..${new Date(b.end).toISOString()}${b.partial ? ' partial' : ''}`);

describe('workforce series buckets', () => {
  const now = at('2026-04-15T12:00:00.000Z');

  it('has one bucket per boundary in [from, to], the one holding now ending at now (inclusive) and partial', () => {
    expect(show(workforceBuckets(at('2026-02-01T00:00:00Z'), at('2026-12-31T00:00:00Z'), 'month', now))).toEqual([
      '2026-02-01..2026-03-01T00:00:00.000Z',
      '2026-03-01..2026-04-01T00:00:00.000Z',
      '2026-04-01..2026-04-15T12:00:00.001Z partial',
    ]);
  });

  it('starts at the first boundary at or after from, and keeps a whole bucket that starts by to', () => {
    expect(show(workforceBuckets(at('2026-01-31T10:00:00Z'), at('2026-03-01T00:00:00Z'), 'month', now))).toEqual([
      '2026-02-01..2026-03-01T00:00:00.000Z',
      '2026-03-01..2026-04-01T00:00:00.000Z',
    ]);
  });

  it('has no bucket after now, and none at all for a range in the future', () => {
    expect(show(workforceBuckets(at('2026-04-16T00:00:00Z'), at('2026-05-01T00:00:00Z'), 'day', now))).toEqual([]);
  });

  it('refuses more than 1,000 buckets', () => {
    expect(workforceBuckets(at('2020-01-01T00:00:00Z'), at('2026-01-01T00:00:00Z'), 'day', now)).toBeNull();
  });
});
