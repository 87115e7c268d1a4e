import type { ChangeRecord } from '../../projections/changes/queries.ts';
import { encodeCursor } from './cursor.ts';

/**
 * A change as clients see it, in the feed (`GET /v1/changes`) and in webhook deliveries alike:
 * the stored record with its position as an opaque cursor.
 */
export const toChange = (record: ChangeRecord) => ({
  cursor: encodeCursor(record.position),
  type: record.type,
  employeeId: record.employeeId,
  occurredAt: record.occurredAt,
  employee: record.employee,
  // What an integrator needs to forget the person in their copy too.
  ...(record.type === 'employee.erased' && { erasedAt: record.occurredAt }),
});
