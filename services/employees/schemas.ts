import { z } from 'zod';
import { parsePosition } from '../../shared/event-store/port.ts';
import {
  boundedInt,
  dateOrInstant,
  HIRE_MIN_YEAR,
  instant,
  logPositionText,
  rangeEnd,
  safeText,
  uuid,
  type DateBound,
} from '../../shared/validation.ts';
import { problemSchema } from '../gateway/problems.ts';
import { EMPLOYEE_STATUSES } from './contract.ts';

/** The HTTP shapes of the employees capability; the OpenAPI document is generated from them. */
export const employeeIdSchema = z
  .string()
  .max(26)
  .regex(/^[0-9A-HJKMNP-TV-Z]{26}$/, 'must be an employee id (ULID)')
  .describe('Employee id (ULID)');

export const employeeSchema = z
  .object({
    id: employeeIdSchema,
    email: z.string(),
    firstName: z.string(),
    lastName: z.string(),
    department: z.string().nullable().describe('Department slug, null when none was given'),
    status: z.enum(EMPLOYEE_STATUSES),
    hiredAt: z.string().describe('ISO 8601 UTC'),
  })
  .meta({ id: 'Employee' });

/** Every field storable and bounded; the limits are documented in docs/api.md. */
const name = safeText(100, { trim: true, min: 1 });
const department = safeText(100, { trim: true, min: 1 }).describe('Department slug');
const email = z.email().max(320);

/** A hire date: an instant in 1900–9999 (existing staff may have been hired before 1970), normalised to UTC (`Z`). */
const hireInstant = instant({ minYear: HIRE_MIN_YEAR });

export const createEmployeeBody = z
  .object({
    email,
    firstName: name,
    lastName: name,
    department: department.optional(),
    roleId: uuid().optional().describe('RBAC role to assign (GET /v1/roles lists them)'),
    hiredAt: hireInstant.optional().describe('For imports of existing staff; default: now'),
  })
  .strict();

export const patchEmployeeBody = z
  .object({ firstName: name, lastName: name, department: department.nullable(), email })
  .partial()
  .strict()
  .refine((body) => Object.keys(body).length > 0, 'name at least one of firstName, lastName, department, email');

export const roleAssignmentBody = z.object({ roleId: uuid().describe('RBAC role (GET /v1/roles lists them)') }).strict();

export const roleAssignmentSchema = z.object({ employeeId: employeeIdSchema, roleId: z.uuid() }).meta({ id: 'EmployeeRoleAssignment' });

export const erasureSchema = z
  .object({
    id: employeeIdSchema,
    erasedAt: z.string().describe('ISO 8601 UTC instant of the (first) erasure'),
  })
  .meta({ id: 'EmployeeErasure' });

export const changeStatusBody = z
  .object({
    status: z.enum(EMPLOYEE_STATUSES),
    reason: safeText(500, { trim: true, min: 1 }).optional(),
    effectiveAt: hireInstant
      .optional()
      .describe(
        'When the change took effect (ISO 8601 with offset): not after now, not before the hire date; may precede the status in force now (it then rewrites that past only). Default: now (a future hire: the hire date), unchecked',
      ),
  })
  .strict();

/** ISO 8601 date (`2024-05-01`) or date-time with offset, years 1900–9999; inclusive bounds. */
const hiredBound = dateOrInstant({ minYear: HIRE_MIN_YEAR });

export const logPosition = logPositionText()
  .refine((v) => parsePosition(v) !== undefined, 'must be a log position as returned in X-Log-Position')
  .transform((v) => parsePosition(v) ?? { commit: 0n, prepare: 0n });

/** Whether some instant lies in [from, to]; a date-only `to` covers its whole day (as the list query reads it). */
function hiredRangeHolds(from: DateBound, to: DateBound): boolean {
  const start = Date.parse(from.at);
  const end = rangeEnd(to);
  return end.inclusive ? start <= end.ms : start < end.ms;
}

export const listEmployeesQuery = z
  .object({
    page: boundedInt(1, 1_000_000).default(1).describe('Page number, from 1 (default 1)'),
    limit: boundedInt(1, 100).default(20).describe('Page size, 1–100 (default 20)'),
    department: department.optional(),
    status: z.enum(EMPLOYEE_STATUSES).optional(),
    hiredFrom: hiredBound.optional(),
    hiredTo: hiredBound.optional(),
    asOf: hireInstant
      .transform((iso) => Date.parse(iso))
      .optional()
      .describe(
        'The list as it was at this instant (ISO 8601 with offset), by effective dates: who was employed, with the department, names and status in force then',
      ),
    minPosition: logPosition.optional().describe('Read-your-writes: wait (≤ 2 s) until the read model reached this position'),
  })
  .strict()
  .refine((q) => !q.hiredFrom || !q.hiredTo || hiredRangeHolds(q.hiredFrom, q.hiredTo), {
    message: 'hiredFrom is after hiredTo',
    path: ['hiredFrom'],
  });

export const readQuery = z.object({ minPosition: logPosition.optional() }).strict();

export const listResponse = z.object({
  data: z.array(employeeSchema),
  meta: z.object({ page: z.number().int(), limit: z.number().int(), total: z.number().int() }),
});

export const historyResponse = z.object({
  data: z.array(
    z.object({
      type: z.string(),
      revision: z.number().int(),
      data: z.record(z.string(), z.unknown()),
      occurredAt: z.string(),
      actor: z.string().nullable(),
    }),
  ),
});

/** The path parameters of a route about one employee. */
export const employeeParams = z.object({ id: employeeIdSchema });

/** The problems every employees route may answer. */
export const problemResponses = { 400: problemSchema, 401: problemSchema, 403: problemSchema, 404: problemSchema } as const;

/** What a route about one employee may also answer once the person is erased. */
export const erasedResponse = { 410: problemSchema } as const;
