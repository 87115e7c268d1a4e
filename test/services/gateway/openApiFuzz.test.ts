import { randomBytes, randomUUID } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import fc from 'fast-check';
import pino from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createGateway } from '../../../services/gateway/app.ts';
import { tenantSlugSchema } from '../../../services/tenants/tenants.ts';
import type { AuthDeps } from '../../../services/auth/plugin.ts';
import { gatewayRoutes } from '../../../services/roles/gateway.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { createPostgresEventStore } from '../../../shared/event-store/postgres.ts';
import { START, type EventStore } from '../../../shared/event-store/port.ts';
import { runProjection, waitForCheckpoint, type ProjectorHandle } from '../../../projections/runner/runner.ts';
import { allProjections } from '../../../projections/index.ts';
import { createInProcessBus } from '../../../shared/metrics-bus/inProcess.ts';
import { createRateLimiter } from '../../../shared/rate-limit/limiter.ts';
import { createMemoryRateLimitStore } from '../../../shared/rate-limit/memory.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';
import { authHeaders, createTestAuth, createTestUser, provisionTenant, type TestTenant } from '../../support/auth.ts';

/**
 * A fuzz test of every operation of GET /v1/openapi.json (so routes added later are
 * covered without touching this file) against the service's own capability list
 * (`gatewayRoutes`, as the gateway role mounts it) on a real database. Each field of each
 * operation — path, query, header and body, nested ones included — gets hostile values one at
 * a time; then fast-check throws random mixes at random operations (fixed seed, printed by
 * fast-check on failure). Every answer must be below 500, every error an RFC 9457 problem with
 * a status the operation documents, and nothing of another tenant may show up in any answer.
 */

type Schema = {
  $ref?: string;
  type?: string | string[];
  format?: string;
  pattern?: string;
  enum?: unknown[];
  const?: unknown;
  minimum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  default?: unknown;
};
type Parameter = { in: 'path' | 'query' | 'header' | 'cookie'; name: string; required?: boolean; schema?: Schema };
type Operation = {
  parameters?: Parameter[];
  requestBody?: { required?: boolean; content?: Record<string, { schema?: Schema }> };
  responses?: Record<string, unknown>;
  security?: Security;
};
type Security = Array<Record<string, unknown>>;
type OpenApiDocument = {
  paths: Record<string, Record<string, Operation>>;
  components?: { schemas?: Record<string, Schema>; securitySchemes?: Record<string, { type?: string; in?: string; name?: string }> };
  security?: Security;
};

type Op = { readonly method: string; readonly path: string; readonly operation: Operation; readonly documented: ReadonlySet<number> };

/** A field of a request: where it lives and how to reach it. */
type Field =
  | { readonly in: 'path' | 'query' | 'header'; readonly name: string; readonly schema: Schema }
  | { readonly in: 'body'; readonly path: readonly (string | number)[]; readonly schema: Schema };

type RequestSpec = {
  pathParams: Record<string, string>;
  /** Raw query pairs, already percent-encoded (hostile encodings included). */
  query: Array<[string, string]>;
  headers: Record<string, string>;
  /** A JSON value, or raw text sent as is. */
  body: { kind: 'json'; value: unknown } | { kind: 'raw'; text: string; contentType: string } | undefined;
};

const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;
/** Answers a route may give without listing them: transport limits, rate limits. */
const ALWAYS_ALLOWED = new Set([400, 413, 414, 415, 429]);
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

let db: TestDatabase;
let store: EventStore;
let auth: AuthDeps;
let app: FastifyInstance;
let projectors: ProjectorHandle[] = [];
let doc: OpenApiDocument;
let ops: Op[];

/** Tenant A: the caller. Tenant B: the other tenant whose data must never show up. */
let tenantA: TestTenant;
let tenantB: TestTenant;
let headersA: Record<string, string>;
const context: { employeeA?: string; employeeB?: string; roleA?: string; cursorA?: string } = {};
/** Strings only tenant B's data contains. */
const secretsOfB: string[] = [];

let checked = 0;
const failures: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  store = createPostgresEventStore(db.pool, { listenUrl: db.url });
  auth = await createTestAuth(db.pool);
  // The read side runs, as it does beside every gateway.
  projectors = allProjections.map((projection) => runProjection(db.pool, store, projection, { pollIntervalMs: 100 }));
  for (const projection of allProjections) await waitForCheckpoint(db.pool, projection.name, START, 60_000);
  const registry = new Registry();
  const logger = pino({ level: 'silent' });
  const bus = createInProcessBus();
  const rateLimiter = createRateLimiter({ store: createMemoryRateLimitStore(), failOpen: true, registry, logger });
  app = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'test' },
    readiness: [],
    registry,
    ...gatewayRoutes({
      auth,
      pool: db.pool,
      eventStore: store,
      rateLimiter,
      usagePublisher: bus.publisher,
      databaseUrl: db.url,
      // No target is allow-listed: a fuzzed webhook URL must never be called.
      webhooks: { secrets: createSecretBox(randomBytes(32)), allowHosts: [] },
    }),
  });

  // Enterprise: no rate limit in the way of the fuzzing (429 would still be an allowed answer).
  tenantA = await provisionTenant(db.pool, { plan: 'enterprise' });
  tenantB = await provisionTenant(db.pool, { plan: 'enterprise' });
  headersA = await authHeaders(auth, tenantA, 'admin');
  const headersB = await authHeaders(auth, tenantB, 'admin');

  const marker = `secret${randomBytes(6).toString('hex')}`;
  secretsOfB.push(tenantB.tenantId, `${marker}@example.test`, `${marker}First`, `${marker}Dept`, `${marker}-cus`);
  const b = await app.inject({
    method: 'POST',
    url: '/v1/employees',
    headers: headersB,
    payload: { email: `${marker}@example.test`, firstName: `${marker}First`, lastName: 'B', department: `${marker}Dept` },
  });
  expect(b.statusCode, b.body).toBe(201);
  context.employeeB = b.json<{ id: string }>().id;
  const billingB = await app.inject({
    method: 'POST',
    url: '/v1/analytics/billing-events',
    headers: headersB,
    payload: { events: [{ eventId: randomUUID(), type: 'subscription.started', customerId: `${marker}-cus`, amount: '10', currency: 'EUR', interval: 'month', occurredAt: '2025-01-01T00:00:00Z' }] },
  });
  expect(billingB.statusCode, billingB.body).toBe(202);
  await createTestUser(db.pool, tenantB, 'employee', { email: `${marker}.user@example.test` });

  const a = await app.inject({ method: 'POST', url: '/v1/employees', headers: headersA, payload: { email: `fuzz-a-${randomBytes(4).toString('hex')}@example.test`, firstName: 'A', lastName: 'A' } });
  expect(a.statusCode, a.body).toBe(201);
  context.employeeA = a.json<{ id: string }>().id;
  const roles = await app.inject({ method: 'GET', url: '/v1/roles', headers: headersA });
  context.roleA = roles.json<{ data: Array<{ id: string; name: string }> }>().data.find((r) => r.name === 'employee')?.id;

  // A real cursor of tenant A's change feed, for operations that require one.
  const feed = await app.inject({ method: 'GET', url: '/v1/employees/changes', headers: headersA });
  if (feed.statusCode === 200) context.cursorA = feed.json<{ next?: string }>().next;

  const response = await app.inject({ method: 'GET', url: '/v1/openapi.json' });
  expect(response.statusCode).toBe(200);
  doc = response.json<OpenApiDocument>();
  ops = Object.entries(doc.paths).flatMap(([path, item]) =>
    METHODS.filter((m) => item[m]).map((method) => {
      const operation = item[method] as Operation;
      const documented = new Set(Object.keys(operation.responses ?? {}).map(Number).filter(Number.isInteger));
      return { method: method.toUpperCase(), path, operation, documented };
    }),
  );
}, 120_000);

afterAll(async () => {
  await app?.close();
  await auth?.close();
  for (const projector of projectors) await projector.stop();
  await store?.close();
  await db?.drop();
});

// ---------------------------------------------------------------------------------------------
// Valid requests, built from the document (plus a few values only the test can know).

function resolve(schema: Schema | undefined): Schema {
  let current = schema ?? {};
  for (let depth = 0; current.$ref && depth < 10; depth++) {
    const name = current.$ref.replace('#/components/schemas/', '');
    current = doc.components?.schemas?.[name] ?? {};
  }
  if (current.allOf?.length === 1 && current.allOf[0]) return resolve(current.allOf[0]);
  const alternatives = current.anyOf ?? current.oneOf;
  if (alternatives) {
    const first = alternatives.map(resolve).find((s) => s.type !== 'null');
    if (first) return first;
  }
  return current;
}

const typeOf = (schema: Schema): string | undefined => (Array.isArray(schema.type) ? schema.type.find((t) => t !== 'null') : schema.type);

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

function sample(schema0: Schema | undefined, name = ''): unknown {
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
    (!schema.pattern || new RegExp(schema.pattern, 'u').test(s)) && s.length >= (schema.minLength ?? 0) && s.length <= (schema.maxLength ?? Infinity);
  return CANDIDATE_STRINGS.find(fits) ?? 'a'.repeat(Math.max(schema.minLength ?? 1, 1));
}

const parametersOf = (op: Op) => (op.operation.parameters ?? []).filter((p) => p.in !== 'cookie');
const bodySchemaOf = (op: Op): Schema | undefined => op.operation.requestBody?.content?.['application/json']?.schema;

function baseline(op: Op): RequestSpec {
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

/** X-Tenant as the `tenant` security scheme declares it (the slug schema the auth hook checks). */
const TENANT_HEADER_SCHEMA = z.toJSONSchema(tenantSlugSchema) as Schema;

const usesTenantScheme = (op: Op) => (op.operation.security ?? doc.security ?? []).some((requirement) => 'tenant' in requirement);

/** Every field of the operation, nested body fields included (arrays: their first element). */
function fieldsOf(op: Op): Field[] {
  const fields: Field[] = parametersOf(op).flatMap((p) => (p.in === 'cookie' ? [] : [{ in: p.in, name: p.name, schema: resolve(p.schema) }]));
  if (usesTenantScheme(op) && !fields.some((f) => f.in === 'header' && f.name === 'x-tenant')) {
    fields.push({ in: 'header', name: 'x-tenant', schema: TENANT_HEADER_SCHEMA });
  }
  const walk = (schema0: Schema | undefined, path: (string | number)[], depth: number) => {
    const schema = resolve(schema0);
    if (path.length > 0) fields.push({ in: 'body', path, schema });
    if (depth > 4) return;
    if (typeOf(schema) === 'object') for (const [key, property] of Object.entries(schema.properties ?? {})) walk(property, [...path, key], depth + 1);
    if (typeOf(schema) === 'array') walk(schema.items, [...path, 0], depth + 1);
  };
  const body = bodySchemaOf(op);
  if (body) walk(body, [], 0);
  return fields;
}

// ---------------------------------------------------------------------------------------------
// Hostile values.

const TEN_K = 'x'.repeat(10_000);
const deepArray = (depth: number): unknown => {
  let value: unknown = 'x';
  for (let i = 0; i < depth; i++) value = [value];
  return value;
};
const deepObject = (depth: number): unknown => {
  let value: unknown = 'x';
  for (let i = 0; i < depth; i++) value = { a: value };
  return value;
};

/** A hostile value and whether the answer must be exactly a 400 (else: any documented status). */
type Hostile = { readonly label: string; readonly value: unknown; readonly must400: boolean };

/** Strings that are invalid in every string field: 400, whatever the field means. */
function hostileStrings(schema: Schema): Hostile[] {
  const list: Hostile[] = [
    { label: 'NUL', value: 'a\u0000b', must400: true },
    { label: 'lone high surrogate', value: 'a\uD800', must400: true },
    { label: 'lone low surrogate', value: '\uDFFFz', must400: true },
    { label: '10k characters', value: TEN_K, must400: true },
  ];
  if (schema.format === 'date-time') {
    list.push(
      { label: 'year 0', value: '0000-06-01T00:00:00Z', must400: true },
      { label: 'normalises to year 10000', value: '9999-12-31T23:00:00-05:00', must400: true },
      { label: 'year 10000', value: '+010000-01-01T00:00:00Z', must400: true },
    );
  }
  return list;
}

const HOSTILE_ANY: readonly Hostile[] = [
  { label: 'number', value: 12_345, must400: false },
  { label: 'huge number', value: 1e308, must400: false },
  { label: 'negative huge number', value: -1e308, must400: false },
  { label: 'unsafe integer', value: 2 ** 53 + 1, must400: false },
  { label: 'boolean', value: true, must400: false },
  { label: 'null', value: null, must400: false },
  { label: 'array', value: ['a', 'b'], must400: false },
  { label: 'object', value: { a: 1 }, must400: false },
  { label: 'empty string', value: '', must400: false },
  { label: 'numeric string', value: '99999999999999999999999', must400: false },
  { label: 'deep array', value: deepArray(2_000), must400: false },
  { label: 'deep object', value: deepObject(2_000), must400: false },
  { label: 'proto key', value: JSON.parse('{"__proto__":{"polluted":1}}'), must400: false },
];

/** Text forms for the URL and headers, where every value is a string. */
const HOSTILE_TEXT: readonly Hostile[] = [
  { label: 'NUL (%00)', value: '%00', must400: true },
  { label: 'lone surrogate (WTF-8 %ED%A0%80)', value: '%ED%A0%80', must400: false },
  { label: 'invalid UTF-8 (%C3%28)', value: '%C3%28', must400: false },
  { label: 'broken escape (%E0%A4%A)', value: '%E0%A4%A', must400: false },
  { label: '10k characters', value: TEN_K, must400: true },
  { label: 'negative', value: '-1', must400: false },
  { label: 'fraction', value: '1.5', must400: false },
  { label: 'huge', value: '1e400', must400: false },
  { label: 'empty', value: '', must400: false },
  { label: 'word', value: 'abc', must400: false },
];

// ---------------------------------------------------------------------------------------------
// Sending and checking.

function setIn(target: unknown, path: readonly (string | number)[], value: unknown): unknown {
  if (path.length === 0) return value;
  const [head, ...rest] = path;
  const container: Record<string | number, unknown> =
    typeof head === 'number' ? (Array.isArray(target) ? [...(target as unknown[])] : []) as unknown as Record<number, unknown> : { ...(target as Record<string, unknown>) };
  container[head as string | number] = setIn((target as Record<string | number, unknown> | undefined)?.[head as string | number], rest, value);
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

async function send(op: Op, spec: RequestSpec): Promise<LightMyRequestResponse> {
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
function check(op: Op, label: string, response: LightMyRequestResponse, options: { must?: readonly number[]; names?: string } = {}): void {
  checked++;
  const where = `${op.method} ${op.path} [${label}] → ${response.statusCode}`;
  const problems: string[] = [];
  if (response.statusCode >= 500) problems.push(`5xx: ${response.body.slice(0, 300)}`);
  if (response.statusCode >= 400) {
    const type = String(response.headers['content-type'] ?? '');
    if (!type.startsWith('application/problem+json')) problems.push(`error is not a problem (${type})`);
    else {
      const body = response.json<Record<string, unknown>>();
      if (body.status !== response.statusCode || typeof body.title !== 'string' || typeof body.type !== 'string') problems.push(`bad problem body ${response.body.slice(0, 200)}`);
      if (body.errors !== undefined && !(Array.isArray(body.errors) && body.errors.every((e: { path?: unknown; message?: unknown }) => typeof e.path === 'string' && typeof e.message === 'string'))) {
        problems.push('errors[] is not [{path, message}]');
      }
    }
    if (!op.documented.has(response.statusCode) && !ALWAYS_ALLOWED.has(response.statusCode)) problems.push(`status not documented (${[...op.documented].join(',')})`);
  }
  if (options.names !== undefined && response.statusCode === 400) {
    // The 400 names the field (`errors[].path` ends with it, e.g. body.events.0.amount).
    const paths = (response.json<{ errors?: Array<{ path: string }> }>().errors ?? []).map((e) => e.path);
    if (!paths.some((p) => p === options.names || p.endsWith(`.${options.names}`))) problems.push(`400 does not name ${options.names}: ${JSON.stringify(paths)}`);
  }
  if (options.must && !options.must.includes(response.statusCode)) problems.push(`expected ${options.must.join(' or ')}: ${response.body.slice(0, 200)}`);
  for (const secret of secretsOfB) if (response.body.includes(secret)) problems.push(`tenant B's data in the answer (${secret})`);
  if (problems.length > 0) failures.push(`${where}: ${problems.join('; ')}`);
}

/** encodeURIComponent, except that a lone surrogate goes out as its WTF-8 bytes (as an attacker would send it). */
const encodeAny = (text: string) =>
  [...text]
    .map((ch) => {
      const code = ch.charCodeAt(0);
      if (ch.length === 1 && code >= 0xd800 && code <= 0xdfff) {
        return [0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f)].map((b) => `%${b.toString(16).toUpperCase()}`).join('');
      }
      return encodeURIComponent(ch);
    })
    .join('');

/** Puts `value` into `field` of `spec` (in place); URL and header values are sent as text. */
function applyChange(spec: RequestSpec, field: Field, value: unknown): void {
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

function mutate(op: Op, field: Field, value: unknown): RequestSpec {
  const spec = baseline(op);
  applyChange(spec, field, value);
  return spec;
}

const fieldName = (field: Field) => (field.in === 'body' ? `body.${field.path.join('.')}` : `${field.in}.${field.name}`);
const isStringField = (field: Field) => typeOf(field.schema) === 'string' || (field.in !== 'body' && typeOf(field.schema) === undefined);

describe('every operation of /v1/openapi.json, with hostile input', () => {
  beforeEach(() => {
    failures.length = 0;
  });

  it('enumerates the document: the service’s operations are all there', () => {
    const names = ops.map((op) => `${op.method} ${op.path}`);
    expect(names).toEqual(expect.arrayContaining(['POST /v1/auth/login', 'GET /v1/employees', 'PATCH /v1/employees/{id}', 'POST /v1/analytics/billing-events']));
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
          for (const h of hostileStrings(field.schema)) check(op, `${fieldName(field)} = ${h.label}`, await send(op, mutate(op, field, h.value)), { must: [400], names });
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
          ['duplicated key', [[p.name, value], [p.name, value]]],
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

  it('survives random mixes of hostile values in random operations (fast-check, fixed seed)', async () => {
    const text = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 40 }),
      fc.string({ unit: 'grapheme', maxLength: 40 }),
      fc.constantFrom('\u0000', '\uD800', '\uDFFF', TEN_K.slice(0, 300), '0000-01-01T00:00:00Z', '9999-12-31T23:59:59-01:00', '1970-01-01', '-0', 'NaN'),
    );
    const value = fc.oneof(text, fc.double(), fc.integer(), fc.boolean(), fc.constant(null), fc.jsonValue({ maxDepth: 3 }));
    const arbitraryRequest = fc.nat({ max: ops.length - 1 }).chain((index) => {
      const op = ops[index] as Op;
      const fields = fieldsOf(op);
      return fc.tuple(fc.constant(op), fc.array(fc.tuple(fc.nat({ max: Math.max(fields.length - 1, 0) }), value), { minLength: 1, maxLength: 4 }), fc.constant(fields));
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
