import { Writable } from 'node:stream';
import pg from 'pg';
import { SchemaValidationError, UniqueIntegrityConstraintViolationError } from 'slonik';
import { describe, expect, it } from 'vitest';
import { errorForLog, requestForLog } from '../../shared/logSerializers.ts';
import { createLogger } from '../../shared/logger.ts';

/** A unique violation as PostgreSQL reports it on `users (tenant_id, email_key)`, and slonik wraps it. */
function duplicateAddress(): UniqueIntegrityConstraintViolationError {
  const cause = Object.assign(new pg.DatabaseError('duplicate key value violates unique constraint "users_email_key"', 0, 'error'), {
    code: '23505',
    constraint: 'users_email_key',
    table: 'users',
    schema: 'public',
    detail: 'Key (tenant_id, email_key)=(7d6f…, ada@example.test) already exists.',
    where: 'COPY users, line 2: "ada@example.test,Ada"',
  });
  return new UniqueIntegrityConstraintViolationError(cause);
}

/** The JSON lines the service's logger writes. */
function loggedLines(write: (logger: ReturnType<typeof createLogger>) => void): string {
  const written: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      written.push(chunk.toString());
      done();
    },
  });
  write(createLogger({ LOG_LEVEL: 'info' }, 'test', sink));
  return written.join('');
}

describe('an error in a log line', () => {
  it('keeps what failed (type, message, stack, SQLSTATE, constraint and table) and leaves out the values of a duplicate key', () => {
    const error = duplicateAddress();
    const line = errorForLog(error) as Record<string, unknown>;
    expect(line).toMatchObject({
      type: 'UniqueIntegrityConstraintViolationError',
      message: expect.stringContaining('Query violates a unique integrity constraint.'),
      stack: expect.stringContaining('Query violates a unique integrity constraint.'),
      sqlState: '23505',
      constraint: 'users_email_key',
      table: 'users',
    });
    expect(line).not.toHaveProperty('detail');
    expect(JSON.stringify(line)).not.toContain('ada@example.test');
    // The error itself is left as it was: only the line leaves the detail out.
    expect(error.detail).toContain('ada@example.test');
  });

  it("keeps a database error's SQLSTATE and leaves out its detail and where it failed", () => {
    const cause = duplicateAddress().cause as pg.DatabaseError;
    const line = errorForLog(cause) as Record<string, unknown>;
    expect(line).toMatchObject({ code: '23505', constraint: 'users_email_key', schema: 'public' });
    expect(JSON.stringify(line)).not.toContain('ada@example.test');
  });

  it("keeps a deadlock's detail and the function a PL/pgSQL error was raised in: they quote no data", () => {
    const deadlock = Object.assign(new pg.DatabaseError('deadlock detected', 0, 'error'), {
      code: '40P01',
      detail: 'Process 101 waits for ShareLock on transaction 7; blocked by process 102.',
      where: 'PL/pgSQL function es_append_batch(integer[],text[]) line 42 at SQL statement',
    });
    expect(errorForLog(deadlock)).toMatchObject({ detail: deadlock.detail, where: deadlock.where });
    // The same detail without a SQLSTATE to tell what it is: left out.
    const unknown = Object.assign(new Error('failed'), { detail: 'Key (email)=(ada@example.test) already exists.' });
    expect(errorForLog(unknown)).not.toHaveProperty('detail');
  });

  it('leaves out the row and bound values a schema validation error carries', () => {
    const error = new SchemaValidationError(
      { sql: 'select email from users where id = $1', values: ['grace@example.test'] },
      { email: 'grace@example.test' },
      [{ message: 'Invalid input', path: ['email'] }],
    );
    const line = errorForLog(error) as Record<string, unknown>;
    expect(line).toMatchObject({ type: 'SchemaValidationError', sql: 'select email from users where id = $1' });
    expect(line).not.toHaveProperty('row');
    expect(line).not.toHaveProperty('values');
    expect(JSON.stringify(line)).not.toContain('grace@example.test');
  });

  it('strips the errors an aggregate holds too', () => {
    const line = errorForLog(new AggregateError([duplicateAddress()], 'several failed'));
    expect(JSON.stringify(line)).not.toContain('ada@example.test');
    expect(JSON.stringify(line)).toContain('users_email_key');
  });

  it('passes anything that is not an error through', () => {
    expect(errorForLog('plain text')).toBe('plain text');
    expect(errorForLog(undefined)).toBeUndefined();
  });

  it("is how the service's logger writes `err`", () => {
    const written = loggedLines((logger) => logger.error({ err: duplicateAddress() }, 'request failed'));
    expect(written).toContain('users_email_key');
    expect(written).toContain('"sqlState":"23505"');
    expect(written).not.toContain('ada@example.test');
  });
});

describe('a request in a log line', () => {
  it('carries method, path and route, without the query string', () => {
    expect(requestForLog({ method: 'GET', url: '/v1/employees?email=ada@example.test', routeOptions: { url: '/v1/employees' } })).toEqual({
      method: 'GET',
      url: '/v1/employees',
      route: '/v1/employees',
    });
  });
});
