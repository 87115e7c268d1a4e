import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { BadRequestError } from '../../shared/errors.ts';
import { START } from '../../shared/event-store/port.ts';
import { PUBLIC_CHANGE_TYPES, type ChangeType } from '../../projections/changes/changesProjection.ts';
import { readChanges } from '../../projections/changes/queries.ts';
import { employeeSchema } from '../employees/schemas.ts';
import { problemSchema } from '../gateway/problems.ts';
import { requestSignal, requireAuth, waitOnPurpose } from '../gateway/requestContext.ts';
import { toChange } from './change.ts';
import { decodeCursor, encodeCursor } from './cursor.ts';
import type { ChangeWakeups } from './wakeups.ts';
import { boundedInt, safeText } from '../../shared/validation.ts';

export type ChangesRoutesDeps = {
  readonly pool: DatabasePool;
  readonly wakeups: ChangeWakeups;
  /** Upper bound of `wait` (seconds): 30 by default. */
  readonly maxWaitSeconds?: number;
};

export const changeTypeSchema = z.enum(PUBLIC_CHANGE_TYPES as [ChangeType, ...ChangeType[]]).describe('What happened to the employee');

export const cursorSchema = safeText(64).describe('Opaque cursor: a `cursor` or `next` value this feed returned');

export const changeSchema = z
  .object({
    cursor: z.string().describe('Position of this change; pass it as `after` to read what follows'),
    type: changeTypeSchema,
    employeeId: z.string(),
    occurredAt: z.string().describe('ISO 8601 UTC instant the change was made'),
    employee: employeeSchema
      .extend({
        email: z.string().nullable(),
        firstName: z.string().nullable(),
        lastName: z.string().nullable(),
      })
      .describe(
        'The employee as it was right after this change. Once the employee is erased, email, firstName and lastName are null in every change of theirs',
      ),
    erasedAt: z.string().optional().describe('On `employee.erased` only: when the person was erased (ISO 8601 UTC)'),
  })
  .meta({ id: 'EmployeeChange' });

const changesQuery = z
  .object({
    after: cursorSchema.optional().describe('Read changes strictly after this cursor; omitted: from the first change'),
    limit: boundedInt(1, 1000).default(100).describe('Page size, 1–1000 (default 100)'),
    wait: boundedInt(0, 30).default(0).describe('Long-poll: seconds to wait for a change when none is pending (0–30, default 0)'),
  })
  .strict();

const changesResponse = z.object({
  data: z.array(changeSchema),
  next: z.string().describe('Cursor to pass as `after` next time (also when `data` is empty)'),
  hasMore: z.boolean().describe('True when more changes are pending right now'),
});

/** Parses `after`; a malformed cursor is a 400 naming the parameter. */
export function parseAfter(after: string | undefined) {
  if (after === undefined) return START;
  const position = decodeCursor(after);
  if (!position)
    throw new BadRequestError('after is not a cursor of this feed', { errors: [{ path: 'after', message: 'malformed cursor' }] });
  return position;
}

/**
 * GET /v1/employees/changes: the tenant's employee changes in global log order. A
 * client that stores `next` and calls again gets every later change exactly once, in order; a
 * change applied late by `projections retry` comes after the ones already served (queries.ts).
 * The path is static, so the router matches it before `/employees/:id`.
 */
export function changesRoutes(deps: ChangesRoutesDeps) {
  const maxWait = deps.maxWaitSeconds ?? 30;
  return async (v1: FastifyInstance): Promise<void> => {
    const app = v1.withTypeProvider<ZodTypeProvider>();
    app.get(
      '/employees/changes',
      {
        config: { permission: 'employees:read' },
        schema: {
          tags: ['employees'],
          operationId: 'listEmployeeChanges',
          summary:
            'Change feed: every employee change, in log order (a change applied late by an operator comes next), with the state after it',
          querystring: changesQuery,
          response: { 200: changesResponse, 400: problemSchema, 401: problemSchema, 403: problemSchema },
        },
      },
      async (request, reply) => {
        const auth = requireAuth(request);
        const after = parseAfter(request.query.after);
        const { limit } = request.query;
        const waitMs = Math.min(request.query.wait, maxWait) * 1000;
        const deadline = Date.now() + waitMs;
        // Watch before the first read, so a change committed between the read and the wait still wakes us.
        const watch = waitMs > 0 ? await deps.wakeups.watch(auth.tenantId) : undefined;
        // A client gone mid-wait, or a gateway starting to close: answer at once with what there is (and its `next`).
        const signal = requestSignal(request, reply);
        try {
          for (let slice = 0; ; slice++) {
            // One more than asked tells whether more is pending. The cursor is checked on the first slice.
            const page = await readChanges(deps.pool, auth.tenantId, after, limit + 1, { trusted: slice > 0 });
            if (!page.known) {
              throw new BadRequestError('after names no change of this tenant: use a cursor this feed returned', {
                errors: [{ path: 'after', message: 'unknown cursor' }],
              });
            }
            const remaining = deadline - Date.now();
            if (page.changes.length > 0 || !watch || remaining <= 0 || signal.aborted) {
              const data = page.changes.slice(0, limit).map(toChange);
              return { data, next: data.at(-1)?.cursor ?? encodeCursor(after), hasMore: page.changes.length > limit };
            }
            // Bounded slices: a lost notification costs at most a second of latency.
            await waitOnPurpose(request, () => watch.wait(Math.min(remaining, 1_000), signal));
          }
        } finally {
          watch?.cancel();
        }
      },
    );
  };
}
