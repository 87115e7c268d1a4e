import { randomBytes, randomUUID } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import { encodeAny, HOSTILE_TEXT } from './hostile.ts';
import { bodySchemaOf, parametersOf, resolve, typeOf } from './schema.ts';
import { app, context, headersA, secretsOfB } from './target.ts';
import type { Field, Op, RequestSpec, Schema } from './types.ts';

/**
 * Requests built from the document (plus a few values only the test can know), sent with
 * app.inject, and checked: `check` records what is wrong rather than throwing, so one run lists
 * every finding in `failures`.
 */
/** Answers a route may give without listing them: transport limits, rate limits. */
const ALWAYS_ALLOWED = new Set([400, 413, 414, 415, 429]);

/** How many answers were checked: a document that lost its operations must not pass silently. */
export let checked = 0;
export const failures: string[] = [];

const CANDIDATE_STRINGS = ['sales', 'a', 'evt_1NG8Du2eZvKYlo2C', '49.99', 'EUR', 'cus-1', '1-1', 'a@example.test', '2024-05-01', 'x1'];

/** Values the document cannot tell: real ids of tenant A, fresh ids, unique emails. */
function known(name: string, schema: Schema): unknown {
  switch (name) {
    case 'id':
    case 'employeeId':
      return typeOf(schema) === 'string' && (schema.format === 'uuid' ? undefined : context.employeeA);
    case 'roleId':
      return context.roleA;
    case 'email':
      return `fuzz-${randomBytes(5).toString('hex')}@example.test`;
    case 'eventId':
      return randomUUID();
    case 'occurredAt':
      return new Date(Date.now() - 86_400_000).toISOString();
    case 'after':
      return typeOf(schema) === 'string' ? context.cursorA : undefined;
    case 'from':
      return typeOf(schema) === 'string' ? '2025-01-01T00:00:00.000Z' : undefined;
    case 'to':
      return typeOf(schema) === 'string' ? '2025-01-02T00:00:00.000Z' : undefined;
    case 'url':
      return typeOf(schema) === 'string' ? 'https://example.com/hooks/fuzz' : undefined;
    case 'amount':
      return '49.99';
    case 'status':
      // A transition the baseline employee (active) may make, so the baseline reaches the decider.
      return schema.enum?.includes('on_leave') ? 'on_leave' : undefined;
    default:
      return undefined;
  }
}

export function sample(schema0: Schema | undefined, name = ''): unknown {
  const schema = resolve(schema0);
  const fixed = known(name, schema);
  if (fixed !== undefined && fixed !== false) return fixed;
  if (schema.const !== undefined) return schema.const;
  if (schema.enum?.length) return schema.enum[0];
  if (schema.default !== undefined) return schema.default;
  switch (typeOf(schema)) {
    case 'integer':
    case 'number':
      return Math.max(schema.minimum ?? 1, 1);
    case 'boolean':
      return true;
    case 'array':
      return Array.from({ length: Math.max(schema.minItems ?? 1, 1) }, () => sample(schema.items, name));
    case 'object': {
      const required = new Set(schema.required ?? []);
      const out: Record<string, unknown> = {};
      const entries = Object.entries(schema.properties ?? {});
      for (const [key, property] of entries) {
        if (required.has(key)) out[key] = sample(property, key);
      }
      // All optional (a PATCH): one field, since an empty change is refused.
      const [first] = entries;
      if (required.size === 0 && first) out[first[0]] = sample(first[1], first[0]);
      return out;
    }
    default:
      return sampleString(schema);
  }
}

function sampleString(schema: Schema): string {
  if (schema.format === 'uuid') return randomUUID();
  if (schema.format === 'email') return `fuzz-${randomBytes(5).toString('hex')}@example.test`;
  if (schema.format === 'date-time') return '2024-05-01T09:00:00.000Z';
  if (schema.format === 'date') return '2024-05-01';
  const fits = (s: string) =>
    (!schema.pattern || new RegExp(schema.pattern, 'u').test(s)) &&
    s.length >= (schema.minLength ?? 0) &&
    s.length <= (schema.maxLength ?? Infinity);
  return CANDIDATE_STRINGS.find(fits) ?? 'a'.repeat(Math.max(schema.minLength ?? 1, 1));
}

export function baseline(op: Op): RequestSpec {
  const spec: RequestSpec = { pathParams: {}, query: [], headers: { ...headersA }, body: undefined };
  for (const p of parametersOf(op)) {
    if (p.in === 'path') spec.pathParams[p.name] = String(sample(p.schema, p.name));
    else if (p.required && p.in === 'query') spec.query.push([p.name, encodeURIComponent(String(sample(p.schema, p.name)))]);
    else if (p.required && p.in === 'header' && p.name !== 'x-tenant') spec.headers[p.name] = String(sample(p.schema, p.name));
  }
  if (op.operation.security?.length === 0) delete spec.headers.authorization;
  const body = bodySchemaOf(op);
  if (body) spec.body = { kind: 'json', value: sample(body) };
  return spec;
}

function setIn(target: unknown, path: readonly (string | number)[], value: unknown): unknown {
  if (path.length === 0) return value;
  const [head, ...rest] = path;
  const container: Record<string | number, unknown> =
    typeof head === 'number'
      ? ((Array.isArray(target) ? [...(target as unknown[])] : []) as unknown as Record<number, unknown>)
      : { ...(target as Record<string, unknown>) };
  container[head as string | number] = setIn(
    (target as Record<string | number, unknown> | undefined)?.[head as string | number],
    rest,
    value,
  );
  return container;
}

function urlOf(op: Op, spec: RequestSpec): string {
  const path = op.path.replace(/\{([^}]+)\}/g, (_m, name: string) => {
    const value = spec.pathParams[name] ?? 'x';
    // Values from HOSTILE_TEXT are sent as already encoded; others are encoded here.
    return /%[0-9A-Fa-f]{0,2}/.test(value) ? value : encodeAny(value);
  });
  const query = spec.query.map(([k, v]) => `${encodeURIComponent(k)}=${v}`).join('&');
  return query ? `${path}?${query}` : path;
}

export async function send(op: Op, spec: RequestSpec): Promise<LightMyRequestResponse> {
  const headers: Record<string, string> = { ...spec.headers };
  let payload: string | undefined;
  if (spec.body?.kind === 'json') {
    headers['content-type'] = 'application/json';
    payload = JSON.stringify(spec.body.value);
  } else if (spec.body?.kind === 'raw') {
    headers['content-type'] = spec.body.contentType;
    payload = spec.body.text;
  }
  const method = op.method as 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  return app.inject({ method, url: urlOf(op, spec), headers, ...(payload !== undefined && { payload }) });
}

/** Records (rather than throws) what is wrong with an answer, so one run lists every finding. */
export function check(
  op: Op,
  label: string,
  response: LightMyRequestResponse,
  options: { must?: readonly number[]; names?: string } = {},
): void {
  checked++;
  const where = `${op.method} ${op.path} [${label}] → ${response.statusCode}`;
  const problems: string[] = [];
  if (response.statusCode >= 500) problems.push(`5xx: ${response.body.slice(0, 300)}`);
  if (response.statusCode >= 400) {
    const type = String(response.headers['content-type'] ?? '');
    if (!type.startsWith('application/problem+json')) problems.push(`error is not a problem (${type})`);
    else {
      const body = response.json<Record<string, unknown>>();
      if (body.status !== response.statusCode || typeof body.title !== 'string' || typeof body.type !== 'string')
        problems.push(`bad problem body ${response.body.slice(0, 200)}`);
      if (
        body.errors !== undefined &&
        !(
          Array.isArray(body.errors) &&
          body.errors.every((e: { path?: unknown; message?: unknown }) => typeof e.path === 'string' && typeof e.message === 'string')
        )
      ) {
        problems.push('errors[] is not [{path, message}]');
      }
    }
    if (!op.documented.has(response.statusCode) && !ALWAYS_ALLOWED.has(response.statusCode))
      problems.push(`status not documented (${[...op.documented].join(',')})`);
  }
  if (options.names !== undefined && response.statusCode === 400) {
    // The 400 names the field (`errors[].path` ends with it, e.g. body.events.0.amount).
    const paths = (response.json<{ errors?: Array<{ path: string }> }>().errors ?? []).map((e) => e.path);
    if (!paths.some((p) => p === options.names || p.endsWith(`.${options.names}`)))
      problems.push(`400 does not name ${options.names}: ${JSON.stringify(paths)}`);
  }
  if (options.must && !options.must.includes(response.statusCode))
    problems.push(`expected ${options.must.join(' or ')}: ${response.body.slice(0, 200)}`);
  for (const secret of secretsOfB) if (response.body.includes(secret)) problems.push(`tenant B's data in the answer (${secret})`);
  if (problems.length > 0) failures.push(`${where}: ${problems.join('; ')}`);
}

/** Puts `value` into `field` of `spec` (in place); URL and header values are sent as text. */
export function applyChange(spec: RequestSpec, field: Field, value: unknown): void {
  if (field.in === 'body') {
    spec.body = { kind: 'json', value: setIn(spec.body?.kind === 'json' ? spec.body.value : {}, field.path, value) };
    return;
  }
  const text = typeof value === 'string' ? value : (JSON.stringify(value) ?? '');
  if (field.in === 'path') spec.pathParams[field.name] = text;
  else if (field.in === 'query') {
    const encoded = HOSTILE_TEXT.some((h) => h.value === text) ? text : encodeAny(text);
    spec.query = [...spec.query.filter(([k]) => k !== field.name), [field.name, encoded]];
  } else {
    // Over real HTTP a header is bytes; app.inject hands the string over as is, NUL included.
    spec.headers[field.name] = text;
  }
}

export function mutate(op: Op, field: Field, value: unknown): RequestSpec {
  const spec = baseline(op);
  applyChange(spec, field, value);
  return spec;
}
