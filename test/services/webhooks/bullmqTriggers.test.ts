import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { staysTrue } from '../../support/staysTrue.ts';
import { waitFor } from '../../support/waitFor.ts';
import { bullmqTriggers, type DrainJob, type DrainTriggers, type SweptJob } from '../../../services/webhooks/triggers.ts';

/**
 * Regression: every sweep queued a drain job for each due endpoint with no id, so an endpoint
 * waiting for a free slot collected one duplicate job per sweep. Real Redis.
 */
const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = `test-wh-dedupe-${randomBytes(4).toString('hex')}`;
let triggers: DrainTriggers | undefined;

afterAll(async () => {
  await triggers?.close();
  const redis = new Redis(redisUrl);
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
});

describe('when the sweep queues a due endpoint again (BullMQ)', () => {
  it('keeps one job per endpoint and state it saw, and never drops the drain’s own follow-up', async () => {
    const calls = new Map<string, number>();
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const drain = async (job: DrainJob) => {
      calls.set(job.endpointId, (calls.get(job.endpointId) ?? 0) + 1);
      if (job.endpointId === 'busy' && calls.get('busy') === 1) await gate;
    };
    triggers = await bullmqTriggers(drain, { concurrency: 1, redisUrl, prefix, queueName: 'webhook-delivery' });
    const swept = (endpointId: string, stateSeen = 'none-0-0'): SweptJob => ({ job: { endpointId, tenantId: 't' }, stateSeen });

    await triggers.addBulk([swept('busy')]);
    await waitFor(() => calls.get('busy') === 1);
    // The only slot is taken: every sweep finds both endpoints again, in the same state.
    for (let sweep = 0; sweep < 3; sweep++) await triggers.addBulk([swept('due'), swept('busy')]);
    // The running drain's follow-up (more came while it delivered): a plain job.
    await triggers.add({ endpointId: 'busy', tenantId: 't' });
    open();

    await waitFor(() => (calls.get('due') ?? 0) >= 1 && (calls.get('busy') ?? 0) >= 2);
    const total = () => [...calls.values()].reduce((sum, n) => sum + n, 0);
    const settled = total();
    expect(await staysTrue(() => total() === settled, 500)).toBe(true); // nothing more runs
    expect(Object.fromEntries(calls)).toEqual({ busy: 2, due: 1 });
  });
});
