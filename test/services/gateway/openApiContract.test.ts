import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rolesAllow } from '../../../services/auth/permissions.ts';
import { headerNameOf, RESPONSE_HEADERS } from '../../../services/gateway/openApiContract.ts';
import { authHeaders, provisionTenant } from '../../support/auth.ts';
import { baseline, send } from '../../support/openApiFuzz/requests.ts';
import { app, auth, context, db, doc, ops, startTarget, stopTarget } from '../../support/openApiFuzz/target.ts';
import type { Op, RequestSpec } from '../../support/openApiFuzz/types.ts';

/**
 * The contract the document states beyond its schemas, for every operation (routes added later
 * included): a stable operationId, declared tags, 429 and the rate-limit headers where the
 * service limits, and every declared response header really sent — checked by driving each
 * operation of the live gateway (`gatewayRoutes`, as the gateway role mounts it).
 */
beforeAll(startTarget, 120_000);
afterAll(stopTarget);

type HeaderRef = { $ref: string };
type Response = { headers?: Record<string, HeaderRef> };
type ContractDoc = {
  tags?: Array<{ name: string; description?: string }>;
  components: { headers?: Record<string, { required?: boolean }>; securitySchemes?: Record<string, { description?: string }> };
};
type ContractOperation = { operationId?: string; tags?: string[]; responses: Record<string, Response>; security?: unknown[] };

const contract = () => doc as unknown as ContractDoc;
const operationOf = (op: Op) => op.operation as unknown as ContractOperation;
const name = (op: Op) => `${op.method} ${op.path}`;
const headersOf = (op: Op, status: number | string) => Object.keys(operationOf(op).responses[String(status)]?.headers ?? {});
/** Whether the component an answer's header refers to says it is always sent. */
const isRequired = (op: Op, status: number, header: string) => {
  const ref = operationOf(op).responses[String(status)]?.headers?.[header]?.$ref ?? '';
  return contract().components.headers?.[ref.replace('#/components/headers/', '')]?.required === true;
};
/** The HTTP headers the catalogue describes (one header may have two components). */
const CATALOGUE = [...new Set(Object.keys(RESPONSE_HEADERS).map(headerNameOf))];
/** What is wrong with an answer's headers: a required one of its status not sent, or one of the catalogue sent undeclared. */
function headerFindings(op: Op, response: { statusCode: number; headers: Record<string, unknown> }): string[] {
  const declared = headersOf(op, response.statusCode);
  const at = `${name(op)} → ${response.statusCode}`;
  return [
    ...declared
      .filter((h) => isRequired(op, response.statusCode, h) && response.headers[h.toLowerCase()] === undefined)
      .map((h) => `${at}: no ${h}`),
    ...CATALOGUE.filter((h) => response.headers[h.toLowerCase()] !== undefined && !declared.includes(h)).map(
      (h) => `${at}: sends ${h} undeclared`,
    ),
  ];
}
const byId = (operationId: string) => {
  const op = ops.find((o) => operationOf(o).operationId === operationId);
  if (!op) throw new Error(`no ${operationId} in the document`);
  return op;
};

/** Whether an operation opts out of authentication: `security: []` (its own non-empty list keeps it in). */
const isPublic = (op: Op) => Array.isArray(operationOf(op).security) && operationOf(op).security?.length === 0;
/** Operations of the authenticated scope: every one but those with `security: []`. */
const authenticatedOps = () => ops.filter((op) => !isPublic(op));

/**
 * Published operationIds: part of the compatibility policy (docs/versioning.md). A generated
 * client names its methods after them, so one renamed or removed breaks its users' code.
 */
const PUBLISHED_OPERATION_IDS = [
  'login',
  'refreshToken',
  'logout',
  'listRoles',
  'listEmployeeChanges',
  'createWebhook',
  'listWebhooks',
  'deleteWebhook',
  'listWebhookDeliveries',
  'replayWebhook',
  'createEmployee',
  'listEmployees',
  'getEmployee',
  'updateEmployee',
  'changeEmployeeStatus',
  'assignEmployeeRole',
  'getEmployeeHistory',
  'getKpiSummary',
  'getKpiSeries',
  'getWorkforceSummary',
  'getWorkforceSeries',
  'recordBillingEvents',
  'eraseEmployee',
];

describe('the document names and groups every operation', () => {
  it('gives each operation a unique camelCase operationId, and keeps every published one', () => {
    const ids = ops.map((op) => operationOf(op).operationId);
    expect(ops.filter((op) => !/^[a-z][A-Za-z0-9]*$/.test(operationOf(op).operationId ?? '')).map(name)).toEqual([]);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toEqual(expect.arrayContaining(PUBLISHED_OPERATION_IDS));
  });

  it('declares every tag an operation uses, each with a description', () => {
    const declared = new Map((contract().tags ?? []).map((tag) => [tag.name, tag.description ?? '']));
    const used = new Set(ops.flatMap((op) => operationOf(op).tags ?? []));
    expect(ops.filter((op) => (operationOf(op).tags ?? []).length === 0).map(name)).toEqual([]);
    expect([...used].filter((tag) => !declared.get(tag))).toEqual([]);
  });

  it('describes the bearer scheme: EdDSA, 15-minute tokens, where the keys are (RFC 8725)', () => {
    const description = contract().components.securitySchemes?.bearerAuth?.description ?? '';
    expect(description).toMatch(/EdDSA/);
    expect(description).toMatch(/15 minutes/);
    expect(description).toContain('/.well-known/jwks.json');
    expect(description).toContain('RFC8725');
  });
});

describe('the document declares the answers and headers the service gives', () => {
  it('declares 429 with Retry-After and the bucket’s headers on every rate-limited operation', () => {
    const missing = authenticatedOps().flatMap((op) =>
      ['Retry-After', 'RateLimit', 'RateLimit-Policy'].filter((h) => !headersOf(op, 429).includes(h)).map((h) => `${name(op)} 429 ${h}`),
    );
    expect(authenticatedOps().length).toBeGreaterThan(10);
    expect(missing).toEqual([]);
  });

  it('declares X-Request-Id everywhere, RateLimit on limited 2xx, Retry-After on 429/503, Location on 201', () => {
    const missing: string[] = [];
    for (const op of ops) {
      for (const status of Object.keys(operationOf(op).responses)) {
        const has = headersOf(op, status);
        const want = [
          'X-Request-Id',
          ...(['429', '503'].includes(status) ? ['Retry-After'] : []),
          ...(status === '201' ? ['Location'] : []),
          ...(status.startsWith('2') && !isPublic(op) ? ['RateLimit', 'RateLimit-Policy'] : []),
        ];
        missing.push(...want.filter((h) => !has.includes(h)).map((h) => `${name(op)} ${status} ${h}`));
      }
      if (!operationOf(op).responses['503']) missing.push(`${name(op)} 503`);
    }
    expect(missing).toEqual([]);
  });
});

describe('every declared header is really sent', () => {
  it('sends each required header an operation declares, and declares each one it sends, on every operation', async () => {
    const failures: string[] = [];
    const answered = new Set<number>();
    for (const op of ops) {
      const response = await send(op, baseline(op));
      answered.add(response.statusCode);
      const declared = headersOf(op, response.statusCode);
      for (const header of declared.filter((h) => isRequired(op, response.statusCode, h))) {
        if (response.headers[header.toLowerCase()] === undefined) failures.push(`${name(op)} → ${response.statusCode}: no ${header}`);
      }
      // The other way round: a header of the catalogue sent but not declared for this answer.
      for (const header of CATALOGUE) {
        if (response.headers[header.toLowerCase()] !== undefined && !declared.includes(header)) {
          failures.push(`${name(op)} → ${response.statusCode}: sends ${header} undeclared`);
        }
      }
    }
    expect(failures).toEqual([]);
    expect([...answered]).toEqual(expect.arrayContaining([200, 201, 202, 204]));
  });

  it('answers 401 with WWW-Authenticate and X-Request-Id on every authenticated operation', async () => {
    const failures: string[] = [];
    for (const op of authenticatedOps()) {
      const spec = baseline(op);
      delete spec.headers.authorization;
      const response = await send(op, spec);
      expect(response.statusCode, name(op)).toBe(401);
      for (const header of headersOf(op, 401)) if (!response.headers[header.toLowerCase()]) failures.push(`${name(op)}: no ${header}`);
    }
    expect(failures).toEqual([]);
  });

  it('answers 403 with the insufficient_scope challenge, declared, on every write a read-only role may not make', async () => {
    const viewer = await authHeaders(auth, await provisionTenant(db.pool), 'employee');
    const permissionOf = (op: Op) =>
      auth.routes.find((r) => r.method === op.method && r.url.replace(/:(\w+)/g, '{$1}') === op.path)?.permission;
    const writes = authenticatedOps().filter((op) => op.method !== 'GET');
    const refused = writes.filter((op) => {
      const permission = permissionOf(op);
      if (!permission) throw new Error(`${name(op)} has no permission in the scope's routes`);
      return !rolesAllow(['employee'], permission);
    });
    // Every write but logout (session:end): a read-only role changes nothing.
    expect(writes.length - refused.length).toBe(1);
    const failures: string[] = [];
    for (const op of refused) {
      const response = await send(op, { ...baseline(op), headers: { ...baseline(op).headers, ...viewer } });
      expect(response.statusCode, name(op)).toBe(403);
      const declared = headersOf(op, 403);
      if (!declared.includes('WWW-Authenticate')) failures.push(`${name(op)} → 403: WWW-Authenticate undeclared`);
      expect(String(response.headers['www-authenticate']), name(op)).toContain('error="insufficient_scope"');
      for (const header of declared.filter((h) => isRequired(op, 403, h))) {
        if (response.headers[header.toLowerCase()] === undefined) failures.push(`${name(op)} → 403: no ${header}`);
      }
      for (const header of CATALOGUE) {
        if (response.headers[header.toLowerCase()] !== undefined && !declared.includes(header)) {
          failures.push(`${name(op)} → 403: sends ${header} undeclared`);
        }
      }
    }
    expect(failures).toEqual([]);
  });

  it('sends the bucket’s headers on the answers a limited tenant gets, wherever they are declared, and only there', async () => {
    // A tenant on a limited plan (the fuzz tenants are unlimited, and unlimited answers carry no bucket).
    const limited = await authHeaders(auth, await provisionTenant(db.pool, { plan: 'pro' }), 'admin');
    const failures: string[] = [];
    let counted = 0;
    for (const op of authenticatedOps()) {
      const response = await send(op, { ...baseline(op), headers: { ...baseline(op).headers, ...limited } });
      const declared = headersOf(op, response.statusCode);
      if (declared.includes('RateLimit')) counted++;
      for (const header of CATALOGUE) {
        const sent = response.headers[header.toLowerCase()] !== undefined;
        if (sent && !declared.includes(header)) failures.push(`${name(op)} → ${response.statusCode}: sends ${header} undeclared`);
        if (!sent && declared.includes(header) && header.startsWith('RateLimit'))
          failures.push(`${name(op)} → ${response.statusCode}: no ${header}`);
      }
    }
    expect(failures).toEqual([]);
    expect(counted).toBe(authenticatedOps().length);
  });

  it('sends Retry-After and the bucket’s headers with the 429 of a tenant out of tokens', async () => {
    const tenant = await provisionTenant(db.pool, { plan: 'starter', rateLimitOverride: { perMinute: 1, burst: 1 } });
    const headers = await authHeaders(auth, tenant, 'admin');
    const first = await app.inject({ method: 'GET', url: '/v1/roles', headers });
    expect(first.statusCode).toBe(200);
    const refused = await app.inject({ method: 'GET', url: '/v1/roles', headers });
    expect(refused.statusCode).toBe(429);
    const listRoles = ops.find((op) => operationOf(op).operationId === 'listRoles');
    if (!listRoles) throw new Error('no listRoles in the document');
    for (const header of headersOf(listRoles, 429)) expect(refused.headers[header.toLowerCase()], header).toBeDefined();
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
  });

  it('sends X-Log-Position, and every required header, on each write that declares it', async () => {
    // A fresh employee, so that each write (change, status, role) is one it may make.
    const created = await send(byId('createEmployee'), baseline(byId('createEmployee')));
    expect(created.statusCode, created.body).toBe(201);
    const shared = context.employeeA;
    context.employeeA = created.json<{ id: string }>().id;
    const failures: string[] = [];
    const writes = ops.filter((op) =>
      Object.keys(operationOf(op).responses).some((s) => s.startsWith('2') && headersOf(op, s).includes('X-Log-Position')),
    );
    try {
      for (const op of writes) {
        const response = await send(op, baseline(op));
        expect(response.statusCode, `${name(op)}: ${response.body}`).toBeLessThan(300);
        expect(String(response.headers['x-log-position']), name(op)).toMatch(/^\d+-\d+$/);
        failures.push(...headerFindings(op, response));
      }
    } finally {
      context.employeeA = shared;
    }
    expect(writes.map((op) => operationOf(op).operationId).sort()).toEqual(
      ['assignEmployeeRole', 'changeEmployeeStatus', 'createEmployee', 'eraseEmployee', 'recordBillingEvents', 'updateEmployee'].sort(),
    );
    expect(failures).toEqual([]);
  });

  it('declares exactly the headers it sends on a 404, a 409 and a 422', async () => {
    const unknownId = '01ARZ3NDEKTSV4RRFFQ69G5FAV';
    const withBody = (spec: RequestSpec, value: Record<string, unknown>): RequestSpec => ({ ...spec, body: { kind: 'json', value } });
    const create = byId('createEmployee');
    const taken = baseline(create);
    const created = await send(create, taken);
    expect(created.statusCode).toBe(201);
    const role = byId('assignEmployeeRole');
    // An employee of its own: the shared one may have been erased by an earlier case, and an erased one answers 410 first.
    const assignee = { id: created.json<{ id: string }>().id };
    const cases: Array<[Op, RequestSpec, number]> = [
      [byId('getEmployee'), { ...baseline(byId('getEmployee')), pathParams: { id: unknownId } }, 404],
      [byId('updateEmployee'), { ...baseline(byId('updateEmployee')), pathParams: { id: unknownId } }, 404],
      [create, taken, 409],
      [role, { ...withBody(baseline(role), { roleId: '00000000-0000-4000-8000-000000000000' }), pathParams: assignee }, 422],
    ];
    const failures: string[] = [];
    for (const [op, spec, status] of cases) {
      const response = await send(op, spec);
      expect(response.statusCode, `${name(op)}: ${response.body}`).toBe(status);
      expect(operationOf(op).responses[String(status)], `${name(op)} declares ${status}`).toBeDefined();
      failures.push(...headerFindings(op, response));
    }
    expect(failures).toEqual([]);
  });

  it('lets caches keep the document itself briefly, and no answer of an operation', async () => {
    const document = await app.inject({ method: 'GET', url: '/v1/openapi.json' });
    expect(document.statusCode).toBe(200);
    expect(document.headers['cache-control']).toBe('public, max-age=300');
    const roles = await send(byId('listRoles'), baseline(byId('listRoles')));
    expect(roles.statusCode).toBe(200);
    expect(roles.headers['cache-control']).toBe('no-store');
  });

  it('sends Location and ETag on a create, X-Log-Position to read it back, and X-Consistency on the reads that wait for it', async () => {
    const create = ops.find((op) => operationOf(op).operationId === 'createEmployee');
    if (!create) throw new Error('no createEmployee in the document');
    const created = await send(create, baseline(create));
    expect(created.statusCode, created.body).toBe(201);
    // (The fuzz tenant is unlimited: no bucket headers here; the test above checks those.)
    for (const header of ['Location', 'ETag', 'X-Log-Position', 'X-Request-Id']) {
      expect(headersOf(create, 201)).toContain(header);
      expect(created.headers[header.toLowerCase()], header).toBeDefined();
    }
    expect(created.headers.location).toBe(`/v1/employees/${created.json<{ id: string }>().id}`);

    const list = ops.find((op) => operationOf(op).operationId === 'listEmployees');
    if (!list) throw new Error('no listEmployees in the document');
    const spec = baseline(list);
    const listed = await send(list, { ...spec, headers: { ...spec.headers, 'x-min-position': String(created.headers['x-log-position']) } });
    expect(listed.statusCode).toBe(200);
    expect(headersOf(list, 200)).toContain('X-Consistency');
    expect(listed.headers['x-consistency']).toBe('consistent');

    for (const operationId of ['getWorkforceSeries', 'getWorkforceSummary']) {
      const read = byId(operationId);
      const request = baseline(read);
      const answer = await send(read, {
        ...request,
        headers: { ...request.headers, 'x-min-position': String(created.headers['x-log-position']) },
      });
      expect(answer.statusCode, operationId).toBe(200);
      expect(headersOf(read, 200)).toContain('X-Consistency');
      expect(answer.headers['x-consistency'], operationId).toBe('consistent');
    }
  });
});
