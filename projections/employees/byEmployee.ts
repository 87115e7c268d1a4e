import type { RecordedEvent } from '../../shared/event-store/port.ts';
import { EMPLOYEE_EVENT_TYPES, parseEmployeeStreamId } from '../../services/employees/contract.ts';

/** Whether the event is one of an employee's (its stream may hold no other, but a page holds every stream's). */
export const isEmployeeEvent = (event: RecordedEvent): boolean => (EMPLOYEE_EVENT_TYPES as readonly string[]).includes(event.type);

/** The employee an event belongs to, if it is one of an employee's events. */
export const employeeOf = (event: RecordedEvent): { tenantId: string; employeeId: string } | undefined =>
  isEmployeeEvent(event) ? parseEmployeeStreamId(event.streamId) : undefined;

/** One employee's events of a page, in the page's (global) order. */
export type EmployeeBatch = { readonly tenantId: string; readonly id: string; readonly events: RecordedEvent[] };

/** The key the employee read models index an employee by within a page. */
export const employeeKey = (tenantId: string, id: string): string => `${tenantId}/${id}`;

/** A page's employee events grouped per employee (other events are left out), keyed by `employeeKey`. */
export function byEmployee(events: readonly RecordedEvent[]): Map<string, EmployeeBatch> {
  const batches = new Map<string, EmployeeBatch>();
  for (const event of events) {
    const parsed = employeeOf(event);
    if (!parsed) continue;
    const key = employeeKey(parsed.tenantId, parsed.employeeId);
    const batch = batches.get(key) ?? { tenantId: parsed.tenantId, id: parsed.employeeId, events: [] };
    batch.events.push(event);
    batches.set(key, batch);
  }
  return batches;
}
