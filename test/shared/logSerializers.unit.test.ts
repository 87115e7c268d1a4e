import { describe, expect, it } from 'vitest';
import { requestForLog } from '../../shared/logSerializers.ts';

describe('a request in a log line', () => {
  it('carries method, path and route, without the query string', () => {
    expect(requestForLog({ method: 'GET', url: '/v1/employees?email=ada@example.test', routeOptions: { url: '/v1/employees' } })).toEqual({
      method: 'GET',
      url: '/v1/employees',
      route: '/v1/employees',
    });
  });
});
