import type { FastifySchema, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { jsonSchemaTransform, jsonSchemaTransformObject } from 'fastify-type-provider-zod';
import { problemSchema } from './problems.ts';

/** Headers a route sends on its success answers, beyond those the gateway adds to every route of its kind. */
export type SuccessHeader = 'ETag' | 'X-Log-Position' | 'X-Consistency';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** What the route's 2xx answers carry besides the common headers; declared in the OpenAPI document. */
    responseHeaders?: readonly SuccessHeader[];
    /** Set by the rate-limit plugin on each route it limits: RateLimit headers and a 429 in the document. */
    rateLimited?: boolean;
  }
}

type HeaderObject = {
  description: string;
  required?: boolean;
  schema: Record<string, unknown>;
  /** The HTTP header, when it differs from the component's name: one header required on some answers, optional on others. */
  header?: string;
};
type Json = Record<string, unknown>;

const text = (maxLength: number, extra: Json = {}) => ({ type: 'string', maxLength, ...extra });
const wholeNumber = { type: 'integer', format: 'int32', minimum: 0, maximum: 2_147_483_647 };

/**
 * Every response header the service sends with meaning for a client, declared once under
 * `components.headers` and referenced from each response that carries it. Transport and security
 * headers (Content-Type, helmet's) are the same on every answer and are not listed.
 */
export const RESPONSE_HEADERS: Record<string, HeaderObject> = {
  'X-Request-Id': {
    description:
      'The request’s id: the client’s own X-Request-Id when it is 1–128 of `A-Za-z0-9._:-`, else a new UUID. Quote it when reporting a problem.',
    required: true,
    schema: text(128),
  },
  RateLimit: {
    description:
      'Tokens left in the tenant’s bucket (IETF ratelimit-headers draft): `"burst";r=<whole tokens left>;t=<seconds>` — t is the time until the bucket is full again, or at r=0 the wait for the next token. On every answer the bucket counted: after authentication, and not for an unlimited plan.',
    schema: text(64, { pattern: '^"burst";r=\\d+;t=\\d+$' }),
  },
  'RateLimit-Policy': {
    description: 'The tenant’s policy: `"burst";q=<burst>;w=<seconds to refill the whole bucket>` (q/w is the sustained rate).',
    schema: text(64, { pattern: '^"burst";q=\\d+;w=\\d+$' }),
  },
  'RateLimit-Limit': { description: 'The burst (q of RateLimit-Policy), for clients that read the older trio.', schema: wholeNumber },
  'RateLimit-Remaining': { description: 'Whole tokens left (r of RateLimit).', schema: wholeNumber },
  'RateLimit-Reset': { description: 'Seconds (t of RateLimit).', schema: wholeNumber },
  'Retry-After': { description: 'Seconds to wait before retrying.', required: true, schema: wholeNumber },
  'WWW-Authenticate': {
    description: 'The Bearer challenge (RFC 6750), with `error="invalid_token"` when a token was sent but refused.',
    required: true,
    schema: text(512),
  },
  'WWW-Authenticate-InsufficientScope': {
    header: 'WWW-Authenticate',
    description:
      'On a 403 for want of a permission: the Bearer challenge with `error="insufficient_scope"` (RFC 6750) naming the permission. Absent when the 403 has another cause (a token issued for another tenant).',
    schema: text(512),
  },
  Location: { description: 'The path of the created resource.', required: true, schema: text(256, { format: 'uri-reference' }) },
  ETag: {
    description: 'The stream revision as a strong entity tag (`"3"`); send it back as If-Match to guard a write.',
    required: true,
    schema: text(24, { pattern: '^"\\d+"$' }),
  },
  'X-Log-Position': {
    description: 'The write’s position in the event log (`<commit>-<prepare>`); send it as X-Min-Position to read your write from a list.',
    schema: text(41, { pattern: '^\\d+-\\d+$' }),
  },
  'X-Consistency': {
    description: '`consistent` when the read model had reached the X-Min-Position asked for, `stale` when the wait ended first.',
    schema: { type: 'string', enum: ['consistent', 'stale'] },
  },
  'Cache-Control': {
    description: '`no-store`: an answer is for one tenant and caller (tokens among them), and no cache may keep it.',
    required: true,
    schema: { type: 'string', const: 'no-store' },
  },
  Deprecation: { description: 'RFC 9745: `@<unix seconds>`, when this operation was deprecated.', required: true, schema: text(24) },
  Sunset: { description: 'RFC 8594: the HTTP-date after which this operation answers 410.', required: true, schema: text(40) },
  Link: { description: 'Where the deprecation is explained (`rel="deprecation"`).', schema: text(2048) },
};

const RATE_LIMIT_HEADERS = ['RateLimit', 'RateLimit-Policy', 'RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset'];

/** The HTTP header a component of RESPONSE_HEADERS describes. */
export const headerNameOf = (component: string): string => RESPONSE_HEADERS[component]?.header ?? component;

/** The facts of a route that decide its headers, read from its config (a permission: the authenticated scope's route). */
type RouteFacts = Pick<NonNullable<RouteOptions['config']>, 'responseHeaders' | 'rateLimited' | 'deprecation' | 'permission'>;

/**
 * The headers a response with `status` carries. X-Request-Id and Cache-Control always (every
 * operation of the document is under /v1, whose answers are not cached); the bucket's headers on
 * every answer the limiter counted — all but 401, which authentication gives before the bucket
 * is known (a 400 or 403 may come from either side, so there they may be absent); Retry-After on
 * 429 and 503 (every 503, also a draining instance's); the challenge on 401, and on an
 * authenticated route's 403 (sent when a permission is missing); Location on 201. The names are
 * components of RESPONSE_HEADERS.
 */
export function headersFor(status: string, route: RouteFacts): string[] {
  const code = Number(status);
  const success = code >= 200 && code < 300;
  return [
    'X-Request-Id',
    'Cache-Control',
    ...(route.rateLimited && (success || (code >= 400 && code < 500 && code !== 401)) ? RATE_LIMIT_HEADERS : []),
    ...(code === 429 || code === 503 ? ['Retry-After'] : []),
    ...(code === 401 ? ['WWW-Authenticate'] : []),
    ...(code === 403 && route.permission !== undefined ? ['WWW-Authenticate-InsufficientScope'] : []),
    ...(code === 201 ? ['Location'] : []),
    ...(success ? (route.responseHeaders ?? []) : []),
    ...(route.deprecation ? ['Deprecation', 'Sunset', ...(route.deprecation.link ? ['Link'] : [])] : []),
  ];
}

/**
 * The answers every route may give whatever it declares: 500 (an internal error, its details
 * hidden) and 503 (a dependency down, a read model not built yet, an instance shutting down).
 * Added at registration, like the authenticated scope's 400/401/403, so routes added later have
 * them too.
 */
export const commonResponsesPlugin = fp(
  async (app) => {
    app.addHook('onRoute', (route) => {
      if (route.schema?.hide || route.schema?.response === undefined) return;
      route.schema = { ...route.schema, response: { 500: problemSchema, 503: problemSchema, ...(route.schema.response as object) } };
    });
  },
  { name: 'common-responses' },
);

const HEADERS_KEY = 'x-response-headers';

/**
 * The per-route step of document generation: the zod schemas become JSON Schema, and the
 * route's headers per status (from its config) ride along on the operation, for
 * `contractTransformObject` to turn into references.
 */
export const contractTransform: typeof jsonSchemaTransform = (input) => {
  const output = jsonSchemaTransform(input);
  const schema = output.schema as (FastifySchema & { response?: Json; hide?: boolean }) | undefined;
  if (!schema || schema.hide || !schema.response) return output;
  const route = input.route.config ?? {};
  const headers = Object.fromEntries(Object.keys(schema.response).map((status) => [status, headersFor(status, route)]));
  return { ...output, schema: { ...schema, [HEADERS_KEY]: headers } };
};

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * An integer's `format` from its bounds (int32 when they fit, else int64): the range a client's
 * type must hold. zod's `.int()` bounds every integer already; the format says it in the words
 * client generators read.
 */
function addIntegerFormats(node: unknown): void {
  if (Array.isArray(node)) return node.forEach(addIntegerFormats);
  if (!isObject(node)) return;
  const types = [node.type].flat();
  if (types.includes('integer') && node.format === undefined) {
    const min = typeof node.minimum === 'number' ? node.minimum : -Infinity;
    const max = typeof node.maximum === 'number' ? node.maximum : Infinity;
    node.format = min >= -(2 ** 31) && max <= 2 ** 31 - 1 ? 'int32' : 'int64';
  }
  for (const value of Object.values(node)) addIntegerFormats(value);
}

/** The whole-document step: references to the declared headers, and integer formats. */
export const contractTransformObject: typeof jsonSchemaTransformObject = (input) => {
  const document = jsonSchemaTransformObject(input) as Json & { paths?: Json; components?: Json };
  const used = new Set<string>();
  for (const item of Object.values(document.paths ?? {})) {
    for (const operation of Object.values(isObject(item) ? item : {})) {
      if (!isObject(operation) || !isObject(operation[HEADERS_KEY])) continue;
      const perStatus = operation[HEADERS_KEY] as Record<string, string[]>;
      delete operation[HEADERS_KEY];
      for (const [status, response] of Object.entries(isObject(operation.responses) ? operation.responses : {})) {
        const names = perStatus[status] ?? [];
        if (!isObject(response) || names.length === 0) continue;
        for (const name of names) used.add(name);
        response.headers = Object.fromEntries(names.map((name) => [headerNameOf(name), { $ref: `#/components/headers/${name}` }]));
      }
    }
  }
  const headers = Object.entries(RESPONSE_HEADERS)
    .filter(([name]) => used.has(name))
    .map(([name, { description, required, schema }]) => [name, { description, ...(required && { required }), schema }]);
  document.components = { ...document.components, headers: Object.fromEntries(headers) };
  addIntegerFormats(document);
  return document as ReturnType<typeof jsonSchemaTransformObject>;
};
