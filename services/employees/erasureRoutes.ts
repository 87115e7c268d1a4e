import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { ErasedError, NotFoundError } from '../../shared/errors.ts';
import { formatPosition, type EventStore } from '../../shared/event-store/port.ts';
import { problemSchema } from '../gateway/problems.ts';
import { requireAuth } from '../gateway/requestContext.ts';
import { employeeStreamId } from './contract.ts';
import type { CommandMetadata } from './decide.ts';
import type { ErasureResult } from './erasure.ts';
import { employeeParams, erasedResponse, erasureSchema, historyResponse, problemResponses } from './schemas.ts';

export type ErasureRoutesDeps = {
  readonly store: EventStore;
  /** Erases the person (services/employees/erasure.ts, bound to its ports). */
  readonly erase: (employeeId: string, metadata: CommandMetadata) => Promise<ErasureResult>;
  /** The command metadata of a request: its tenant, its actor, now. */
  readonly metadataOf: (request: FastifyRequest) => CommandMetadata;
};

/**
 * The routes about a person's whole record: its audit trail (every event of the employee's
 * stream) and its erasure, after which that trail, like the employee, answers 410.
 */
export function erasureRoutes(deps: ErasureRoutesDeps) {
  return async (v1: FastifyInstance): Promise<void> => {
    const app = v1.withTypeProvider<ZodTypeProvider>();
    const tags = ['employees'];

    app.post(
      '/employees/:id/erasure',
      {
        config: { permission: 'employees:erase', responseHeaders: ['X-Log-Position'] },
        schema: {
          operationId: 'eraseEmployee',
          tags,
          summary: 'Erase the person (right to erasure): their personal data becomes unreadable everywhere; idempotent',
          description:
            'Appends EmployeeErased and destroys the data key of the employee in one transaction. Afterwards the employee ' +
            'answers 410 (problem /problems/erased), is in no list, their e-mail address is free again, every change of ' +
            'theirs in the feed has its personal fields null, a change employee.erased is delivered, and their logins ' +
            '(made for them, or at their address) lose the address and are disabled. Repeating the request answers the ' +
            'same erasedAt.',
          params: employeeParams,
          // 409: the employee, their address or one they held before kept changing while the erasure was decided again.
          response: { 200: erasureSchema, ...problemResponses, 409: problemSchema },
        },
      },
      async (request, reply) => {
        const { id, erasedAt, position } = await deps.erase(request.params.id, deps.metadataOf(request));
        // A list read with this position no longer shows the employee (read-your-writes).
        if (position) reply.header('x-log-position', formatPosition(position));
        return { id, erasedAt };
      },
    );

    app.get(
      '/employees/:id/history',
      {
        config: { permission: 'employees:read' },
        schema: {
          tags,
          operationId: 'getEmployeeHistory',
          summary: "The employee's events, oldest first: the audit trail",
          params: employeeParams,
          response: { 200: historyResponse, ...problemResponses, ...erasedResponse },
        },
      },
      async (request) => {
        const auth = requireAuth(request);
        const events = await deps.store.readStream(employeeStreamId(auth.tenantId, request.params.id));
        if (events.length === 0) throw new NotFoundError(`No employee ${request.params.id}`);
        // The history of an erased person is theirs too: what is left of it is not shown.
        const erasure = events.find((e) => e.type === 'EmployeeErased');
        if (erasure || events.some((e) => e.redacted))
          throw new ErasedError('This employee was erased', {
            erasedAt: erasure && isRecord(erasure.data) ? erasure.data.erasedAt : undefined,
          });
        return {
          data: events.map((e) => ({
            type: e.type,
            revision: e.revision,
            data: isRecord(e.data) ? e.data : {},
            occurredAt: typeof e.metadata.occurredAt === 'string' ? e.metadata.occurredAt : e.recordedAt,
            actor: typeof e.metadata.actor === 'string' ? e.metadata.actor : null,
          })),
        };
      },
    );
  };
}

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
