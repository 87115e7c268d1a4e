import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, expect } from 'vitest';
import { createEmployeesHarness, type EmployeesHarness } from './employees.ts';

export type Employee = {
  id: string;
  email: string;
  firstName: string;
  lastName: string;
  department: string | null;
  status: string;
  hiredAt: string;
};
export type Page = { data: Employee[]; meta: { page: number; limit: number; total: number } };

export type EmployeesApi = {
  /** The harness of this test file, set in its beforeAll. */
  readonly h: EmployeesHarness;
  uniqueEmail(prefix?: string): string;
  /** POST /v1/employees with a valid body, overridden by `body`. */
  hire(headers: Record<string, string>, body?: Record<string, unknown>): Promise<LightMyRequestResponse>;
  /** `hire`, asserted 201: the employee, its log position and its ETag. */
  hired(headers: Record<string, string>, body?: Record<string, unknown>): Promise<{ employee: Employee; position: string; etag: string }>;
  /** Reads after the projection caught up with `position` (read-your-writes). */
  read(headers: Record<string, string>, url: string, position?: string): Promise<LightMyRequestResponse>;
};

/**
 * The employees API on a harness of its own for the calling test file (created in beforeAll,
 * closed in afterAll). The clock moves one second per command, so hire dates and list order are
 * known in advance.
 */
export function useEmployeesApi(): EmployeesApi {
  let h: EmployeesHarness | undefined;
  let tick = Date.parse('2025-03-01T10:00:00.000Z');
  const clock = () => new Date((tick += 1_000));
  beforeAll(async () => {
    h = await createEmployeesHarness({ clock, readWaitMs: 2_000 });
  });
  afterAll(async () => {
    await h?.close();
  });

  const harness = () => {
    if (!h) throw new Error('useEmployeesApi: the harness starts in beforeAll');
    return h;
  };
  let counter = 0;
  const uniqueEmail = (prefix = 'person') => `${prefix}-${Date.now().toString(36)}-${counter++}@example.test`;
  const hire = (headers: Record<string, string>, body: Record<string, unknown> = {}) =>
    harness().app.inject({
      method: 'POST',
      url: '/v1/employees',
      headers,
      payload: { email: uniqueEmail(), firstName: 'Ada', lastName: 'Lovelace', department: 'engineering', ...body },
    });
  return {
    get h() {
      return harness();
    },
    uniqueEmail,
    hire,
    async hired(headers, body = {}) {
      const response = await hire(headers, body);
      expect(response.statusCode, response.body).toBe(201);
      return {
        employee: response.json<Employee>(),
        position: String(response.headers['x-log-position']),
        etag: String(response.headers.etag),
      };
    },
    read: (headers, url, position) =>
      harness().app.inject({ method: 'GET', url, headers: { ...headers, ...(position && { 'x-min-position': position }) } }),
  };
}
