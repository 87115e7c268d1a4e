import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { monotonicFactory } from 'ulid';
import { bufferedRandom } from '../../shared/random.ts';
import { z } from 'zod';
import type { DatabasePool } from '../../shared/db/pool.ts';
import type { TenantReader } from '../../shared/db/tenantReader.ts';
import { ForbiddenError, NotFoundError } from '../../shared/errors.ts';
import { formatPosition, type EventStore } from '../../shared/event-store/port.ts';
import type { EmailHash } from '../../shared/personal-data/emailHash.ts';
import type { LegacyReservationsWatch } from './legacyReservations.ts';
import { EMPLOYEES_PROJECTION } from '../../projections/employees/employeesProjection.ts';
import { listEmployees, type EmployeeRecord } from '../../projections/employees/queries.ts';
import { WORKFORCE_PROJECTION } from '../../projections/workforce/workforceProjection.ts';
import { listEmployeesAsOf } from '../../projections/workforce/asOf.ts';
import { problemSchema } from '../gateway/problems.ts';
import { requireAuth } from '../gateway/requestContext.ts';
import { awaitMinPosition, readYourWritesDeps, readYourWritesHeaders } from '../gateway/readYourWrites.ts';
import { rolesAllow } from '../auth/permissions.ts';
import { ifMatchHeader, strongEntityTags } from '../../shared/validation.ts';
import type { CommandMetadata } from './decide.ts';
import { type EmployeeState, toEmployeeView } from './contract.ts';
import {
  assignEmployeeRole,
  changeEmployeeDetails,
  changeEmployeeStatus,
  hireEmployee,
  loadEmployee,
  type EmployeeResult,
} from './commands.ts';
import type { IfMatch } from '../commandHandler.ts';
import type { ErasureResult } from './erasure.ts';
import { erasureRoutes } from './erasureRoutes.ts';
import {
  changeStatusBody,
  createEmployeeBody,
  employeeParams,
  employeeSchema,
  erasedResponse,
  listEmployeesQuery,
  listResponse,
  patchEmployeeBody,
  problemResponses,
  readQuery,
  roleAssignmentBody,
  roleAssignmentSchema,
} from './schemas.ts';

export type EmployeesRoutesDeps = {
  readonly pool: DatabasePool;
  /** When given, list pages read through it (no transaction; see shared/db/tenantReader.ts). */
  readonly tenantReader?: TenantReader | undefined;
  readonly store: EventStore;
  /** Fails with 422 when `roleId` names no role of the tenant (services/auth). */
  readonly assertRoleExists: (tenantId: string, roleId: string) => Promise<void>;
  /** Erases the person (services/employees/erasure.ts, bound to its ports). */
  readonly erase: (employeeId: string, metadata: CommandMetadata) => Promise<ErasureResult>;
  /** The keyed hash email uniqueness is kept on (shared/personal-data/emailHash.ts). */
  readonly emailHash: EmailHash;
  /** Whether hires must look for first-form email reservations (services/employees/legacyReservations.ts). */
  readonly legacyReservations?: LegacyReservationsWatch;
  readonly clock?: () => Date;
  /** Longest a read waits for the projection to reach a client's `minPosition`. */
  readonly readWaitMs?: number;
};

const writeHeaders = z.object({ 'if-match': ifMatchHeader().optional() });

/**
 * `If-Match` (already well-formed) as the revisions it accepts: one per strong tag that names a
 * revision (`"3"`). `*` asks only that the employee exists: no condition.
 *
 * Strong comparison (RFC 9110 §8.8.3.2) is string equality with the ETag we send, `"<revision>"`
 * in plain decimal: `"03"` or `"00"` is another tag, which names no revision (412), so only the
 * canonical spelling is turned into a number.
 */
const REVISION_TAG = /^(?:0|[1-9]\d{0,14})$/;
function ifMatchOf(header: string | undefined): IfMatch | undefined {
  const tags = header === undefined ? null : strongEntityTags(header);
  return tags?.filter((tag) => REVISION_TAG.test(tag)).map(Number);
}

const etag = (revision: number) => `"${revision}"`;

/**
 * The employees capability: commands go through the generic command handler and are
 * answered from the events they decided; a single employee is read from its stream (strongly
 * consistent); lists come from the projection, optionally after waiting for a position the
 * client got from an earlier write (read-your-writes).
 */
export function employeesRoutes(deps: EmployeesRoutesDeps) {
  const clock = deps.clock ?? (() => new Date());
  const positionWait = readYourWritesDeps(deps.pool, deps.readWaitMs);
  const nextId = monotonicFactory(bufferedRandom());

  const metadataOf = (request: FastifyRequest): CommandMetadata => {
    const auth = requireAuth(request);
    return { tenantId: auth.tenantId, actor: auth.userId, now: clock().toISOString() };
  };

  /** ETag and X-Log-Position of a write; answers the employee as hired. */
  const setWriteHeaders = (reply: FastifyReply, result: EmployeeResult) => {
    reply.header('etag', etag(result.revision));
    if (result.position) reply.header('x-log-position', formatPosition(result.position));
    return hired(result.state);
  };
  const sendWrite = (reply: FastifyReply, result: EmployeeResult) => toEmployeeView(setWriteHeaders(reply, result));

  return async (v1: FastifyInstance): Promise<void> => {
    const app = v1.withTypeProvider<ZodTypeProvider>();
    const tags = ['employees'];

    app.post(
      '/employees',
      {
        config: { permission: 'employees:write', responseHeaders: ['ETag', 'X-Log-Position'] },
        schema: {
          tags,
          operationId: 'createEmployee',
          summary: 'Hire (create) an employee',
          body: createEmployeeBody,
          response: { 201: employeeSchema, ...problemResponses, 409: problemSchema, 422: problemSchema },
        },
      },
      async (request, reply) => {
        const metadata = metadataOf(request);
        const employeeId = nextId(Date.parse(metadata.now));
        const { roleId, ...rest } = request.body;
        // A role is an account's privilege, not an employee attribute: setting one needs its own
        // permission, or `employees:write` would let an hr_manager make anyone (themselves) admin.
        if (roleId !== undefined && !rolesAllow(requireAuth(request).roles, 'roles:assign')) {
          throw new ForbiddenError('Assigning a role (roleId) needs the roles:assign permission (admin)');
        }
        const result = await hireEmployee(
          {
            store: deps.store,
            assertRoleExists: deps.assertRoleExists,
            emailHash: deps.emailHash,
            legacyReservations: deps.legacyReservations,
          },
          { type: 'HireEmployee', data: { employeeId, ...rest, ...(roleId !== undefined && { roleId }) }, metadata },
        );
        // The role reaches the user (users.role_id) through the role reactor, not from here:
        // a failure there is retried instead of failing an already-recorded hire.
        reply.code(201).header('location', `/v1/employees/${employeeId}`);
        return sendWrite(reply, result);
      },
    );

    app.get(
      '/employees',
      {
        config: { permission: 'employees:read', responseHeaders: ['X-Consistency'] },
        schema: {
          tags,
          operationId: 'listEmployees',
          summary: 'List employees (hiredAt desc, id desc), now or as of an instant',
          querystring: listEmployeesQuery,
          headers: readYourWritesHeaders,
          response: { 200: listResponse, ...problemResponses },
        },
      },
      async (request, reply) => {
        const auth = requireAuth(request);
        const { minPosition, asOf, ...query } = request.query;
        // An as-of list reads the effective-dated versions, which their own projection keeps.
        await awaitMinPosition(
          request,
          reply,
          positionWait,
          asOf === undefined ? EMPLOYEES_PROJECTION : WORKFORCE_PROJECTION,
          request.headers['x-min-position'] ?? minPosition,
        );
        const scope = deps.tenantReader ?? deps.pool;
        const { data, total } =
          asOf === undefined
            ? await listEmployees(scope, auth.tenantId, query)
            : await listEmployeesAsOf(scope, auth.tenantId, { ...query, asOf });
        return { data: data.map(toView), meta: { page: query.page, limit: query.limit, total } };
      },
    );

    app.get(
      '/employees/:id',
      {
        config: { permission: 'employees:read', responseHeaders: ['ETag', 'X-Consistency'] },
        schema: {
          tags,
          operationId: 'getEmployee',
          summary: 'Read one employee from its stream (strongly consistent); ETag is its stream revision',
          params: employeeParams,
          querystring: readQuery,
          headers: readYourWritesHeaders,
          response: { 200: employeeSchema, ...problemResponses, ...erasedResponse },
        },
      },
      async (request, reply) => {
        const auth = requireAuth(request);
        // Strongly consistent: folded from the stream, never from the lagging read
        // model, so a GET-then-PATCH with this ETag cannot get a spurious 412. A client's
        // minPosition (validated by the header schema) is therefore always met already.
        const found = await loadEmployee(deps.store, auth.tenantId, request.params.id);
        if (!found) throw new NotFoundError(`No employee ${request.params.id}`);
        reply.header('etag', etag(found.revision)).header('x-consistency', 'consistent');
        return toEmployeeView(found.state);
      },
    );

    app.patch(
      '/employees/:id',
      {
        config: { permission: 'employees:write', responseHeaders: ['ETag', 'X-Log-Position'] },
        schema: {
          tags,
          operationId: 'updateEmployee',
          summary: 'Change name, department or email; If-Match guards against lost updates',
          params: employeeParams,
          headers: writeHeaders,
          body: patchEmployeeBody,
          response: { 200: employeeSchema, ...problemResponses, ...erasedResponse, 409: problemSchema, 412: problemSchema },
        },
      },
      async (request, reply) => {
        const metadata = metadataOf(request);
        const result = await changeEmployeeDetails(
          {
            store: deps.store,
            assertRoleExists: deps.assertRoleExists,
            emailHash: deps.emailHash,
            legacyReservations: deps.legacyReservations,
          },
          request.params.id,
          { type: 'ChangeEmployeeDetails', data: request.body, metadata },
          ifMatchOf(request.headers['if-match']),
        );
        return sendWrite(reply, result);
      },
    );

    app.post(
      '/employees/:id/status',
      {
        config: { permission: 'employees:write', responseHeaders: ['ETag', 'X-Log-Position'] },
        schema: {
          tags,
          operationId: 'changeEmployeeStatus',
          summary: 'Change status (active ⇄ on_leave, active|on_leave → inactive, inactive → active)',
          params: employeeParams,
          headers: writeHeaders,
          body: changeStatusBody,
          response: { 200: employeeSchema, ...problemResponses, ...erasedResponse, 409: problemSchema, 412: problemSchema },
        },
      },
      async (request, reply) => {
        const metadata = metadataOf(request);
        const result = await changeEmployeeStatus(
          {
            store: deps.store,
            assertRoleExists: deps.assertRoleExists,
            emailHash: deps.emailHash,
            legacyReservations: deps.legacyReservations,
          },
          request.params.id,
          metadata,
          request.body,
          ifMatchOf(request.headers['if-match']),
        );
        return sendWrite(reply, result);
      },
    );

    app.put(
      '/employees/:id/role',
      {
        config: { permission: 'roles:assign', responseHeaders: ['ETag', 'X-Log-Position'] },
        schema: {
          tags,
          operationId: 'assignEmployeeRole',
          summary: "Set the employee's person's role (admin); applied to their login within seconds",
          description:
            'Records EmployeeRoleAssigned on the employee stream; the role reactor then sets the role of the user with ' +
            "the employee's e-mail (creating a login without a password if there is none). Access tokens carry the new " +
            'role from their next refresh. ETag and X-Log-Position as for every write.',
          params: employeeParams,
          headers: writeHeaders,
          body: roleAssignmentBody,
          response: { 200: roleAssignmentSchema, ...problemResponses, ...erasedResponse, 412: problemSchema, 422: problemSchema },
        },
      },
      async (request, reply) => {
        const metadata = metadataOf(request);
        const result = await assignEmployeeRole(
          {
            store: deps.store,
            assertRoleExists: deps.assertRoleExists,
            emailHash: deps.emailHash,
            legacyReservations: deps.legacyReservations,
          },
          request.params.id,
          metadata,
          request.body.roleId,
          ifMatchOf(request.headers['if-match']),
        );
        return { employeeId: setWriteHeaders(reply, result).id, roleId: request.body.roleId };
      },
    );

    // Last: the OpenAPI document lists paths in the order their routes are registered.
    await erasureRoutes({ store: deps.store, erase: deps.erase, metadataOf })(v1);
  };
}

function hired(state: EmployeeState): Extract<EmployeeState, { kind: 'hired' }> {
  if (state.kind !== 'hired') throw new NotFoundError('No such employee');
  return state;
}

const toView = ({ revision: _, ...employee }: EmployeeRecord) => employee;
