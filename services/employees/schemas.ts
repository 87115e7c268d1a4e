import { z } from 'zod';
import { parsePosition } from '../../shared/event-store/port.ts';
import { EMPLOYEE_STATUSES } from './events.ts';

/** The HTTP shapes of the employees capability; the OpenAPI document is generated from them. */
export const employeeIdSchema = z
  .string()
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

const name = z.string().trim().min(1).max(100);
const department = z.string().trim().min(1).max(100).describe('Department slug');
const email = z.email().max(320);

/** An instant with an explicit offset, normalised to UTC (`Z`). */
const instant = z.iso
  .datetime({ offset: true })
  .refine((v) => !Number.isNaN(Date.parse(v)), 'is not a valid instant')
  .transform((v) => new Date(v).toISOString());

export const createEmployeeBody = z
  .object({
    email,
    firstName: name,
    lastName: name,
    department: department.optional(),
    roleId: z.uuid().optional().describe('RBAC role to assign (GET /v1/roles lists them)'),
    hiredAt: instant.optional().describe('For imports of existing staff; default: now'),
  })
  .strict();

export const patchEmployeeBody = z
  .object({ firstName: name, lastName: name, department: department.nullable(), email })
  .partial()
  .strict()
  .refine((body) => Object.keys(body).length > 0, 'name at least one of firstName, lastName, department, email');

export const roleAssignmentBody = z
  .object({ roleId: z.uuid().describe('RBAC role (GET /v1/roles lists them)') })
  .strict();

export const roleAssignmentSchema = z
  .object({ employeeId: employeeIdSchema, roleId: z.uuid() })
  .meta({ id: 'EmployeeRoleAssignment' });

export const changeStatusBody = z
  .object({ status: z.enum(EMPLOYEE_STATUSES), reason: z.string().trim().min(1).max(500).optional() })
  .strict();

const DATE = /^\d{4}-\d{2}-\d{2}$/;
/** ISO 8601 date (`2024-05-01`) or date-time with offset; inclusive bounds. */
const isDate = (v: string) => DATE.test(v) && !Number.isNaN(Date.parse(`${v}T00:00:00Z`)) && new Date(`${v}T00:00:00Z`).toISOString().startsWith(v);
const isDateTime = (v: string) => z.iso.datetime({ offset: true }).safeParse(v).success && !Number.isNaN(Date.parse(v));
const hiredBound = z
  .string()
  .refine((v) => isDate(v) || isDateTime(v), 'must be an ISO 8601 date or date-time')
  .transform((v) => ({ at: DATE.test(v) ? `${v}T00:00:00.000Z` : new Date(v).toISOString(), dateOnly: DATE.test(v) }));

export const logPosition = z
  .string()
  .refine((v) => parsePosition(v) !== undefined, 'must be a log position as returned in X-Log-Position')
  .transform((v) => parsePosition(v) ?? { commit: 0n, prepare: 0n });

export const listEmployeesQuery = z
  .object({
    page: z.coerce.number().int().min(1).max(1_000_000).default(1),
    limit: z.coerce.number().int().min(1).max(100).default(20),
    department: department.optional(),
    status: z.enum(EMPLOYEE_STATUSES).optional(),
    hiredFrom: hiredBound.optional(),
    hiredTo: hiredBound.optional(),
    minPosition: logPosition.optional().describe('Read-your-writes: wait (≤ 2 s) until the read model reached this position'),
  })
  .strict()
  .refine((q) => !q.hiredFrom || !q.hiredTo || q.hiredFrom.at <= q.hiredTo.at, { message: 'hiredFrom is after hiredTo', path: ['hiredFrom'] });

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
