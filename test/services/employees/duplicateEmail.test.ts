import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEmployeesHarness, expectProblem, type EmployeesHarness } from '../../support/harness/employees.ts';

/**
 * Email uniqueness under concurrency on the PostgreSQL adapter: the reservation stream is
 * created with expected revision `no_stream`, so exactly one of many racing creates wins.
 */
let h: EmployeesHarness;
beforeAll(async () => {
  h = await createEmployeesHarness();
});
afterAll(async () => {
  await h?.close();
});

describe('when 50 creates with the same email race', () => {
  it('exactly one answers 201 and the other 49 answer 409', async () => {
    const { headers } = await h.tenant();
    const responses = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        h.app.inject({
          method: 'POST',
          url: '/v1/employees',
          headers,
          // Same address, different case: uniqueness is case-insensitive.
          payload: { email: i % 2 === 0 ? 'race@example.test' : 'RACE@Example.Test', firstName: `N${i}`, lastName: 'Racer' },
        }),
      ),
    );
    const created = responses.filter((r) => r.statusCode === 201);
    expect(created).toHaveLength(1);
    for (const response of responses.filter((r) => r.statusCode !== 201)) expectProblem(response, 409);

    const position = String(created[0]?.headers['x-log-position']);
    const list = await h.app.inject({ method: 'GET', url: '/v1/employees', headers: { ...headers, 'x-min-position': position } });
    expect(list.json<{ meta: { total: number } }>().meta.total).toBe(1);
  });

  it('holds for racing email changes as well', async () => {
    const { headers } = await h.tenant();
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) {
      const r = await h.app.inject({
        method: 'POST',
        url: '/v1/employees',
        headers,
        payload: { email: `p${i}@example.test`, firstName: 'P', lastName: `${i}` },
      });
      ids.push(r.json<{ id: string }>().id);
    }
    const responses = await Promise.all(
      ids.map((id) => h.app.inject({ method: 'PATCH', url: `/v1/employees/${id}`, headers, payload: { email: 'wanted@example.test' } })),
    );
    expect(responses.filter((r) => r.statusCode === 200)).toHaveLength(1);
    for (const response of responses.filter((r) => r.statusCode !== 200)) expectProblem(response, 409);
  });
});
