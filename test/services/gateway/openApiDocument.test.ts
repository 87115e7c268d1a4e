import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fieldName, fieldsOf, typeOf, usesTenantScheme } from '../../support/openApiFuzz/schema.ts';
import { doc, ops, startTarget, stopTarget } from '../../support/openApiFuzz/target.ts';

/**
 * The OpenAPI document the gateway serves: it lists the service's operations, puts X-Tenant on
 * every authenticated one, and bounds every input field, so that the fuzz tests beside this file
 * (openApiFuzz, openApiTenantIsolation) reach every operation and field.
 */
beforeAll(startTarget, 120_000);
afterAll(stopTarget);

describe('the OpenAPI document of /v1', () => {
  it('enumerates the document: the service’s operations are all there', () => {
    const names = ops.map((op) => `${op.method} ${op.path}`);
    expect(names).toEqual(
      expect.arrayContaining(['POST /v1/auth/login', 'GET /v1/employees', 'PATCH /v1/employees/{id}', 'POST /v1/analytics/billing-events']),
    );
    // X-Tenant on every authenticated operation, through the document's `tenant` security scheme.
    expect(doc.components?.securitySchemes?.tenant).toMatchObject({ type: 'apiKey', in: 'header', name: 'X-Tenant' });
    expect(ops.filter((op) => op.operation.security?.length !== 0).every(usesTenantScheme)).toBe(true);
  });

  it('documents a maximum for every input field: maxLength on strings, a bound on numbers and lists', () => {
    const unbounded = ops.flatMap((op) =>
      fieldsOf(op)
        .filter((field) => {
          const schema = field.schema;
          if (schema.enum || schema.const !== undefined) return false;
          switch (typeOf(schema)) {
            case 'string':
              return schema.maxLength === undefined;
            case 'integer':
            case 'number':
              return (schema as { maximum?: number }).maximum === undefined && field.in !== 'body';
            case 'array':
              return (schema as { maxItems?: number }).maxItems === undefined;
            default:
              return false;
          }
        })
        .map((field) => `${op.method} ${op.path} ${fieldName(field)}`),
    );
    expect(unbounded).toEqual([]);
  });
});
