import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { baseline, check, failures, mutate, send } from '../../support/openApiFuzz/requests.ts';
import { fieldName, fieldsOf } from '../../support/openApiFuzz/schema.ts';
import { context, ops, startTarget, stopTarget, tenantB } from '../../support/openApiFuzz/target.ts';

/**
 * Tenant isolation across every operation of GET /v1/openapi.json: tenant A's requests with
 * tenant B's ids or B's X-Tenant never show B's data (`check` looks for B's strings in every
 * answer) and are refused as the operation documents.
 */
beforeAll(startTarget, 120_000);
afterAll(stopTarget);

describe('every operation of /v1/openapi.json, across tenants', () => {
  beforeEach(() => {
    failures.length = 0;
  });

  it("never shows tenant B's data to tenant A: B's ids and B's X-Tenant", async () => {
    for (const op of ops) {
      // B's employee id wherever an id goes.
      for (const field of fieldsOf(op).filter((f) => (f.in === 'body' ? String(f.path.at(-1)) : f.name).match(/^(id|employeeId)$/))) {
        check(op, `${fieldName(field)} = B's employee`, await send(op, mutate(op, field, context.employeeB)), { must: [400, 404] });
      }
      // A's token with B's slug: refused (403) on every authenticated operation.
      const spec = baseline(op);
      const authenticated = spec.headers.authorization !== undefined;
      spec.headers['x-tenant'] = tenantB.slug;
      check(op, "X-Tenant = B's slug", await send(op, spec), authenticated ? { must: [403] } : {});
      // No X-Tenant at all.
      const missing = baseline(op);
      delete missing.headers['x-tenant'];
      check(op, 'no X-Tenant', await send(op, missing), { must: authenticated ? [400] : [400] });
    }
    expect(failures).toEqual([]);
  });
});
