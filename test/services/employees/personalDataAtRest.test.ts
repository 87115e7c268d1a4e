import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { normaliseEmail } from '../../../services/employees/contract.ts';
import { createEmployeesHarness, type EmployeesHarness } from '../../support/harness/employees.ts';

/**
 * What the event log holds of a person after a hire, a rename and an email change through the
 * API: their address and names in no event and no stream name, in any case; while the API, the
 * history and the read model show them as given.
 */
let h: EmployeesHarness;
beforeAll(async () => {
  h = await createEmployeesHarness();
});
afterAll(async () => {
  await h?.close();
});

const tag = () => crypto.randomUUID().slice(0, 8);

describe('when an employee is hired, renamed and moved to another address', () => {
  it('keeps the address and names out of the event log, and shows them plain through the API', async () => {
    const { headers } = await h.tenant();
    const person = { email: `Ada.${tag()}@Example.test`, firstName: `Ada${tag()}`, lastName: `Lovelace${tag()}` };
    const newEmail = `countess.${tag()}@example.test`;
    const newLastName = `King${tag()}`;
    const hired = await h.app.inject({ method: 'POST', url: '/v1/employees', headers, payload: person });
    expect(hired.statusCode, hired.body).toBe(201);
    const id = hired.json<{ id: string }>().id;
    const patched = await h.app.inject({
      method: 'PATCH',
      url: `/v1/employees/${id}`,
      headers,
      payload: { email: newEmail, lastName: newLastName },
    });
    expect(patched.statusCode, patched.body).toBe(200);

    const read = await h.app.inject({ method: 'GET', url: `/v1/employees/${id}`, headers });
    expect(read.json()).toMatchObject({ email: newEmail, firstName: person.firstName, lastName: newLastName });
    const history = await h.app.inject({ method: 'GET', url: `/v1/employees/${id}/history`, headers });
    expect(JSON.stringify(history.json())).toContain(person.email);

    const clear = [person.email, normaliseEmail(person.email), newEmail, person.firstName, person.lastName, newLastName];
    // A plain (unkeyed) hash of an address is as good as the address to anyone with a list of them.
    const plainHashes = [person.email, newEmail].map((e) => createHash('sha256').update(normaliseEmail(e)).digest('hex'));
    const stored = await h.db.pool.anyFirst(sql.type(z.object({ row: z.string() }))`
      select stream_id || ' ' || type || ' ' || data::text || ' ' || metadata::text as row from es_events
    `);
    expect(stored.length).toBeGreaterThanOrEqual(5);
    const log = stored.join('\n').toLowerCase();
    for (const value of [...clear, ...plainHashes]) expect(log).not.toContain(value.toLowerCase());
  });
});
