import fc from 'fast-check';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { HOSTILE_ANY, HOSTILE_TEXT, hostileStrings, TEN_K } from '../../support/openApiFuzz/hostile.ts';
import { applyChange, baseline, check, checked, failures, mutate, sample, send } from '../../support/openApiFuzz/requests.ts';
import { bodySchemaOf, fieldName, fieldsOf, isStringField, parametersOf } from '../../support/openApiFuzz/schema.ts';
import { ops, startTarget, stopTarget } from '../../support/openApiFuzz/target.ts';
import type { Op } from '../../support/openApiFuzz/types.ts';

/**
 * A fuzz test of every operation of GET /v1/openapi.json (so routes added later are
 * covered without touching this file) against the service's own capability list
 * (`gatewayRoutes`, as the gateway role mounts it) on a real database. Each field of each
 * operation — path, query, header and body, nested ones included — gets hostile values one at
 * a time; then fast-check throws random mixes at random operations (fixed seed, printed by
 * fast-check on failure). Every answer must be below 500, every error an RFC 9457 problem with
 * a status the operation documents, and nothing of another tenant may show up in any answer.
 */
const SEED = 10_2026;
/** Operations whose baseline request the generator is known to build validly (checked strictly). */
const VALID_BASELINE = new Set([
  'POST /v1/auth/login',
  'POST /v1/auth/refresh',
  'POST /v1/auth/logout',
  'GET /v1/roles',
  'GET /v1/employees',
  'POST /v1/employees',
  'GET /v1/employees/{id}',
  'PATCH /v1/employees/{id}',
  'POST /v1/employees/{id}/status',
  'GET /v1/employees/{id}/history',
  'GET /v1/analytics/kpi',
  'POST /v1/analytics/billing-events',
]);

beforeAll(startTarget, 120_000);
afterAll(stopTarget);

describe('every operation of /v1/openapi.json, with hostile input', () => {
  beforeEach(() => {
    failures.length = 0;
  });

  it('answers each valid baseline request without a 5xx, and not with a 400', async () => {
    // A baseline the service refuses would make every mutation below a test of the first
    // validation error only: teach `known()` the field's rule instead. Operations added after
    // this list still get every mutation; for them an invalid baseline is reported, not failed,
    // so a new route is never blocked by this file (add it here once `known()` covers it).
    for (const op of ops) {
      const response = await send(op, baseline(op));
      check(op, 'baseline', response);
      if (response.statusCode !== 400) continue;
      const message = `${op.method} ${op.path} baseline is invalid: ${response.body.slice(0, 300)}`;
      if (VALID_BASELINE.has(`${op.method} ${op.path}`)) failures.push(message);
      else console.warn(`[openApiFuzz] ${message}`);
    }
    expect(failures).toEqual([]);
  });

  it('answers 400 for NUL, lone surrogates, 10k strings and out-of-range instants in every string field', async () => {
    for (const op of ops) {
      for (const field of fieldsOf(op).filter(isStringField)) {
        if (field.in === 'body') {
          const names = field.path.join('.');
          for (const h of hostileStrings(field.schema))
            check(op, `${fieldName(field)} = ${h.label}`, await send(op, mutate(op, field, h.value)), { must: [400], names });
        } else {
          // URL values go percent-encoded; header values as the raw characters.
          const forms =
            field.in === 'header'
              ? [
                  { label: 'NUL', value: 'a\u0000b' },
                  { label: 'lone surrogate', value: 'a\uD800' },
                  { label: '10k characters', value: TEN_K },
                ]
              : HOSTILE_TEXT.filter((h) => h.must400);
          const dateForms = field.schema.format === 'date-time' ? hostileStrings(field.schema).filter((h) => h.label.includes('year')) : [];
          for (const h of [...forms, ...dateForms]) {
            // A path segment past the router's limit is a 414 before it reaches the route.
            const must = field.in === 'path' ? [400, 404, 414] : [400];
            check(op, `${fieldName(field)} = ${h.label}`, await send(op, mutate(op, field, h.value)), { must, names: field.name });
          }
        }
      }
    }
    expect(failures).toEqual([]);
  });

  it('never answers 5xx to wrong types, huge numbers, deep JSON or odd encodings in any field', async () => {
    for (const op of ops) {
      for (const field of fieldsOf(op)) {
        const variants = field.in === 'body' ? HOSTILE_ANY : HOSTILE_TEXT.filter((h) => !h.must400);
        for (const h of variants) check(op, `${fieldName(field)} = ${h.label}`, await send(op, mutate(op, field, h.value)));
      }
    }
    expect(failures).toEqual([]);
  });

  it('handles duplicated and array-style query keys', async () => {
    for (const op of ops) {
      for (const p of parametersOf(op).filter((x) => x.in === 'query')) {
        const value = encodeURIComponent(String(sample(p.schema, p.name)));
        for (const [label, pairs] of [
          [
            'duplicated key',
            [
              [p.name, value],
              [p.name, value],
            ],
          ],
          ['array key', [[`${p.name}[]`, value]]],
          ['indexed key', [[`${p.name}[0]`, value]]],
        ] as const) {
          const spec = baseline(op);
          spec.query = [...spec.query.filter(([k]) => k !== p.name), ...pairs.map(([k, v]) => [k, v] as [string, string])];
          check(op, `query.${p.name} ${label}`, await send(op, spec));
        }
      }
    }
    expect(failures).toEqual([]);
  });

  it('answers bodies that are not the documented JSON with 400, 413 or 415 problems', async () => {
    for (const op of ops.filter((o) => bodySchemaOf(o))) {
      const raw = (label: string, text: string, contentType = 'application/json', must: readonly number[] = [400]) => {
        const spec = baseline(op);
        spec.body = { kind: 'raw', text, contentType };
        return send(op, spec).then((r) => check(op, label, r, { must }));
      };
      await raw('invalid JSON', '{"a":');
      await raw('JSON array', '[]');
      await raw('JSON string', '"x"');
      await raw('JSON null', 'null');
      await raw('deep JSON (10k levels)', `${'['.repeat(10_000)}1${']'.repeat(10_000)}`);
      await raw('deep JSON object (10k levels)', `${'{"a":'.repeat(10_000)}1${'}'.repeat(10_000)}`);
      await raw('text/plain', 'hello', 'text/plain', [415]);
      await raw('body over the limit', JSON.stringify({ x: 'y'.repeat(1_100_000) }), 'application/json', [413]);
      await raw('duplicated key with NUL', `{"x":1,"x":"\\u0000"}`);
    }
    expect(failures).toEqual([]);
  });

  it('survives random mixes of hostile values in random operations (fast-check, fixed seed)', async () => {
    const text = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 40 }),
      fc.string({ unit: 'grapheme', maxLength: 40 }),
      fc.constantFrom(
        '\u0000',
        '\uD800',
        '\uDFFF',
        TEN_K.slice(0, 300),
        '0000-01-01T00:00:00Z',
        '9999-12-31T23:59:59-01:00',
        '1970-01-01',
        '-0',
        'NaN',
      ),
    );
    const value = fc.oneof(text, fc.double(), fc.integer(), fc.boolean(), fc.constant(null), fc.jsonValue({ maxDepth: 3 }));
    const arbitraryRequest = fc.nat({ max: ops.length - 1 }).chain((index) => {
      const op = ops[index] as Op;
      const fields = fieldsOf(op);
      return fc.tuple(
        fc.constant(op),
        fc.array(fc.tuple(fc.nat({ max: Math.max(fields.length - 1, 0) }), value), { minLength: 1, maxLength: 4 }),
        fc.constant(fields),
      );
    });
    const before = failures.length;
    await fc.assert(
      fc.asyncProperty(arbitraryRequest, async ([op, changes, fields]) => {
        const spec = baseline(op);
        const labels: string[] = [];
        for (const [i, v] of changes) {
          const field = fields[i];
          if (!field) continue;
          applyChange(spec, field, v);
          labels.push(fieldName(field));
        }
        check(op, `random ${labels.join(', ')}`, await send(op, spec));
        return failures.length === before;
      }),
      { seed: SEED, numRuns: 150, endOnFailure: true },
    );
    expect(failures).toEqual([]);
  });

  it('covered the document (a document that lost its operations must not pass silently)', () => {
    expect(checked).toBeGreaterThan(500);
  });
});
