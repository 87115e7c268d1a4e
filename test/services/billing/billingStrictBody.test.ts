import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authHeaders, provisionTenant } from '../../support/auth.ts';
import { createAnalyticsHarness, type AnalyticsHarness } from '../../support/harness/analytics.ts';

/**
 * Regression: docs/versioning.md says request bodies are strict (an unknown field is a 400, so a
 * misspelt optional field is never silently ignored), but POST /v1/analytics/billing-events
 * accepted unknown fields in the body and in each event, and dropped them.
 */
let harness: AnalyticsHarness;

beforeAll(async () => {
  harness = await createAnalyticsHarness();
});

afterAll(async () => {
  await harness?.close();
});

const event = (overrides: Record<string, unknown> = {}) => ({
  eventId: `evt_${randomUUID().replace(/-/g, '')}`,
  type: 'subscription.started',
  customerId: `cus_${randomUUID().slice(0, 8)}`,
  amount: '50',
  currency: 'EUR',
  interval: 'month',
  occurredAt: new Date(Date.now() - 86_400_000).toISOString(),
  ...overrides,
});

type Problem = { status: number; errors?: { path: string; message: string }[] };

describe('when a billing-events body carries a field the API does not define', () => {
  it('answers 400 naming it, in the body and in an event', async () => {
    const tenant = await provisionTenant(harness.db.pool);
    const headers = await authHeaders(harness.auth, tenant, 'admin');
    const post = (payload: object) => harness.app.inject({ method: 'POST', url: '/v1/analytics/billing-events', headers, payload });

    const inBody = await post({ events: [event()], dryRun: true });
    expect(inBody.statusCode).toBe(400);
    expect(inBody.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(JSON.stringify(inBody.json<Problem>().errors)).toContain('dryRun');

    const inEvent = await post({ events: [event(), event({ quantity: 2 })] });
    expect(inEvent.statusCode).toBe(400);
    expect(JSON.stringify(inEvent.json<Problem>().errors)).toContain('quantity');

    // The same events without the extra fields are accepted.
    const ok = await post({ events: [event()] });
    expect(ok.statusCode).toBe(202);
    expect(ok.json<{ accepted: number }>().accepted).toBe(1);
  });
});
