import { randomUUID } from 'node:crypto';
import { setTimeout } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ignoredRows, sql, type DatabasePool } from '../../shared/db/pool.ts';
import { BadRequestError, NotFoundError, UnprocessableError } from '../../shared/errors.ts';
import { START } from '../../shared/event-store/port.ts';
import { CHANGES_CHANNEL } from '../../projections/changes/changesProjection.ts';
import { latestChange, readChanges } from '../../projections/changes/queries.ts';
import { encodeCursor } from '../changes/cursor.ts';
import { changeTypeSchema, cursorSchema, parseAfter } from '../changes/routes.ts';
import { problemSchema } from '../gateway/problems.ts';
import { requestSignal, requireAuth, waitOnPurpose } from '../gateway/requestContext.ts';
import { generateSigningSecret, type SecretBox } from './secrets.ts';
import { ATTEMPTS_KEPT, listDeliveries } from './deliveryLog.ts';
import { deleteEndpoint, findEndpoint, insertEndpoint, listEndpoints, MAX_ENDPOINTS_PER_TENANT, type EndpointRecord } from './endpoints.ts';
import { leaseRevoked, rewindEndpoint } from './lease.ts';
import { resolveTarget, TargetRefusedError, type TargetPolicy } from './targets.ts';
import { boundedInt, safeText, uuid } from '../../shared/validation.ts';

export type WebhooksRoutesDeps = {
  readonly pool: DatabasePool;
  readonly secrets: SecretBox;
  readonly targets: TargetPolicy;
};

/** The replay's look at the revoked lease: soon at first (an attempt is usually quick), then every 250 ms. */
const handOffPollMs = (attempt: number) => Math.min(250, 25 * 2 ** attempt);

const endpointId = uuid().describe('Webhook endpoint id');
const params = z.object({ id: endpointId });

const endpointSchema = z
  .object({
    id: endpointId,
    url: z.string(),
    events: z.array(changeTypeSchema),
    status: z.enum(['active', 'disabled']),
    disabledReason: z.string().nullable().describe('Why deliveries stopped (410 Gone, retries exhausted); replay re-enables'),
    cursor: z.string().describe('Where deliveries stand: every change of its types up to here was delivered (or where deliveries start)'),
    createdAt: z.string(),
  })
  .meta({ id: 'WebhookEndpoint' });

const createBody = z
  .object({
    url: safeText(2048).describe('https URL (plain http only for hosts in WEBHOOK_ALLOW_HOSTS)'),
    events: z.array(changeTypeSchema).min(1).max(20).describe('Change types to deliver'),
    after: cursorSchema.optional().describe('Deliver changes after this cursor; default: only changes from now on'),
  })
  .strict();

const deliveryStatus = z.enum(['retrying', 'succeeded', 'failed']);

const attemptSchema = z
  .object({
    at: z.string().describe('When the attempt started'),
    statusCode: z
      .number()
      .int()
      .nullable()
      .describe("The receiver's HTTP status; null when it did not answer (timeout, connection error, refused target)"),
    durationMs: z.number().int().describe('How long the attempt took, DNS lookup included'),
    error: z.string().nullable().describe('Why it failed; null on a 2xx'),
  })
  .meta({ id: 'WebhookDeliveryAttempt' });

const deliverySchema = z
  .object({
    cursor: z.string().describe('The change (also the `webhook-id` header)'),
    type: z.string(),
    status: deliveryStatus,
    attempts: z.number().int().describe('Attempts made for this change, in all'),
    lastStatusCode: z.number().int().nullable(),
    lastError: z.string().nullable(),
    lastAttemptAt: z.string(),
    nextAttemptAt: z.string().nullable().describe('When the next retry is due (status retrying)'),
    attemptLog: z
      .array(attemptSchema)
      .max(ATTEMPTS_KEPT)
      .describe(
        `Every attempt, oldest first: the latest ${ATTEMPTS_KEPT} when there were more (replays add attempts), none older than the log's retention. ` +
          'Empty for an entry last attempted before the service listed attempts: `attempts` still counts them',
      ),
  })
  .meta({ id: 'WebhookDelivery' });

const problems = { 400: problemSchema, 401: problemSchema, 403: problemSchema } as const;

const toView = (e: EndpointRecord) => ({
  id: e.id,
  url: e.url,
  events: e.eventTypes.map((t) => changeTypeSchema.parse(t)),
  status: e.status,
  disabledReason: e.disabledReason,
  cursor: encodeCursor(e.cursor),
  createdAt: e.createdAt,
});

/**
 * Webhook endpoints, permission `webhooks:manage`. The signing secret is returned by
 * POST only; it is stored sealed (secrets.ts) and never shown again. Targets are checked here
 * (https, resolves to a public address) and again at every delivery.
 */
export function webhooksRoutes(deps: WebhooksRoutesDeps) {
  /** A cursor to start from: the start, or a change of this tenant (400 otherwise). */
  const startingPoint = async (tenantId: string, after: string | undefined) => {
    if (after === undefined) return (await latestChange(deps.pool, tenantId)) ?? START;
    const position = parseAfter(after);
    const page = await readChanges(deps.pool, tenantId, position, 1);
    if (!page.known)
      throw new BadRequestError('after names no change of this tenant', { errors: [{ path: 'after', message: 'unknown cursor' }] });
    return position;
  };
  // Wakes the delivery workers (they LISTEN on the feed's channel) instead of waiting for a sweep.
  const wakeDispatch = (tenantId: string) =>
    deps.pool.query(sql.type(ignoredRows)`select pg_notify(${CHANGES_CHANNEL}, ${tenantId})`).then(
      () => undefined,
      () => undefined,
    );

  return async (v1: FastifyInstance): Promise<void> => {
    const app = v1.withTypeProvider<ZodTypeProvider>();
    const tags = ['webhooks'];
    const config = { permission: 'webhooks:manage' } as const;

    app.post(
      '/webhooks',
      {
        config,
        schema: {
          tags,
          operationId: 'createWebhook',
          summary: 'Register a webhook endpoint; the signing secret is in this response only',
          description: `A tenant has at most ${MAX_ENDPOINTS_PER_TENANT} endpoints; registering one more answers 409.`,
          body: createBody,
          response: {
            201: endpointSchema.extend({ secret: z.string().describe('whsec_…: shown once') }),
            ...problems,
            409: problemSchema,
            422: problemSchema,
          },
        },
      },
      async (request, reply) => {
        const auth = requireAuth(request);
        const { events, after } = request.body;
        let url: string;
        try {
          // Stored as the parser normalised it (percent-encoded), so what is stored is what is checked.
          url = (await resolveTarget(request.body.url, deps.targets)).url.href;
        } catch (error) {
          if (!(error instanceof TargetRefusedError)) throw error;
          throw new UnprocessableError(`url refused: ${error.message}`, { errors: [{ path: 'url', message: error.message }] });
        }
        const cursor = await startingPoint(auth.tenantId, after);
        const secret = generateSigningSecret();
        const endpoint = await insertEndpoint(deps.pool, {
          id: randomUUID(),
          tenantId: auth.tenantId,
          url,
          eventTypes: [...new Set(events)],
          secretSealed: deps.secrets.seal(secret),
          cursor,
        });
        await wakeDispatch(auth.tenantId);
        reply.code(201).header('location', `/v1/webhooks/${endpoint.id}`);
        return { ...toView(endpoint), secret };
      },
    );

    app.get(
      '/webhooks',
      {
        config,
        schema: {
          tags,
          operationId: 'listWebhooks',
          summary: 'List webhook endpoints (without secrets)',
          response: { 200: z.object({ data: z.array(endpointSchema) }), ...problems },
        },
      },
      async (request) => ({ data: (await listEndpoints(deps.pool, requireAuth(request).tenantId)).map(toView) }),
    );

    app.delete(
      '/webhooks/:id',
      {
        config,
        schema: {
          tags,
          operationId: 'deleteWebhook',
          summary: 'Delete a webhook endpoint and its delivery log',
          params,
          response: { 204: z.null(), ...problems, 404: problemSchema },
        },
      },
      async (request, reply) => {
        if (!(await deleteEndpoint(deps.pool, requireAuth(request).tenantId, request.params.id)))
          throw new NotFoundError('No such webhook endpoint');
        return reply.code(204).send(null);
      },
    );

    app.get(
      '/webhooks/:id/deliveries',
      {
        config,
        schema: {
          tags,
          operationId: 'listWebhookDeliveries',
          summary: 'Recent deliveries of an endpoint, newest first: each attempt, status, next retry',
          description:
            'One entry per change, with each of its attempts (when, status code, duration, error). The log keeps an entry for WEBHOOK_DELIVERY_RETENTION_DAYS (default 30) after its last attempt, and a retry whose time has not come yet whatever its age.',
          params,
          querystring: z
            .object({
              limit: boundedInt(1, 100).default(50).describe('Page size, 1–100 (default 50)'),
              status: deliveryStatus.optional().describe('Only the entries in this status (e.g. `failed`, or `retrying`)'),
            })
            .strict(),
          response: { 200: z.object({ data: z.array(deliverySchema) }), ...problems, 404: problemSchema },
        },
      },
      async (request) => {
        const { tenantId } = requireAuth(request);
        if (!(await findEndpoint(deps.pool, tenantId, request.params.id))) throw new NotFoundError('No such webhook endpoint');
        const rows = await listDeliveries(deps.pool, tenantId, request.params.id, request.query.limit, request.query.status);
        return {
          data: rows.map(({ position, attemptLog, ...d }) => ({ cursor: encodeCursor(position), ...d, attemptLog: [...attemptLog] })),
        };
      },
    );

    app.post(
      '/webhooks/:id/replay',
      {
        config,
        schema: {
          tags,
          operationId: 'replayWebhook',
          summary: 'Redeliver every change after a cursor (also re-enables a disabled endpoint)',
          description:
            "Answers once a delivery in flight to the endpoint (if any) has finished (at most until that delivery run's lease runs out: the delivery timeout plus 30 s, 45 s by default); the next delivery the receiver gets is then the first change after `after`.",
          params,
          body: z.object({ after: cursorSchema.describe('Redeliver changes after this cursor (the start cursor: all)') }).strict(),
          response: { 202: endpointSchema, ...problems, 404: problemSchema },
        },
      },
      async (request, reply) => {
        const { tenantId } = requireAuth(request);
        const cursor = await startingPoint(tenantId, request.body.after);
        const endpoint = await rewindEndpoint(deps.pool, tenantId, request.params.id, cursor);
        if (!endpoint) throw new NotFoundError('No such webhook endpoint');
        // A run was delivering: its lease is revoked (lease.ts), it sends nothing more, and the
        // replay's run starts once it has let go, after its attempt in flight. Waiting for that
        // here means that after the 202 the receiver's next delivery is the first change after
        // `after`. Bounded by the revoked lease itself, which leaseRevoked stops seeing once it runs
        // out (the worker never lets an attempt outlive its lease, whatever its timeout; a worker
        // that died holds it until then, and its replacement starts), and by the request's signal.
        if (endpoint.handingOver) {
          const signal = requestSignal(request, reply);
          // The replay itself has committed: a failed look only ends the wait, never the 202.
          const stillRevoked = () =>
            leaseRevoked(deps.pool, tenantId, endpoint.id).catch((error: unknown) => {
              request.log.warn(
                { err: error, endpointId: endpoint.id },
                'replay: could not look at the delivery lease; answering without waiting',
              );
              return false;
            });
          // A wait the replay's semantics ask for, not the service's work: latency leaves it out.
          await waitOnPurpose(request, async () => {
            for (let attempt = 0; !signal.aborted && (await stillRevoked()); attempt++) {
              await setTimeout(handOffPollMs(attempt), undefined, { signal }).catch(() => undefined);
            }
          });
        }
        await wakeDispatch(tenantId);
        return reply.code(202).send(toView(endpoint));
      },
    );
  };
}
