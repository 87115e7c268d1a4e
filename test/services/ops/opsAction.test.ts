import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { opsAction } from '../../../services/ops/tenants.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

// What an ops command prints when it fails in a way nobody planned for.
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** The error PostgreSQL and slonik give a second row at a unique address: its detail quotes it. */
async function duplicateAddressError(): Promise<unknown> {
  try {
    await db.pool.transaction(async (tx) => {
      await tx.query(sql.type(z.object({}))`create temporary table logins (email text unique) on commit drop`);
      await tx.query(sql.type(z.object({}))`insert into logins values ('quoted@ops.test')`);
      await tx.query(sql.type(z.object({}))`insert into logins values ('quoted@ops.test')`);
    });
  } catch (error) {
    return error;
  }
  throw new Error('the second insert was not refused');
}

/** What `opsAction` prints to stderr for an action failing with `error`; it must set exit code 1. */
async function printedFor(error: unknown): Promise<string> {
  const printed: string[] = [];
  const write = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    printed.push(String(chunk));
    return true;
  });
  const exitCode = process.exitCode;
  try {
    await opsAction(() => Promise.reject(error))();
    expect(process.exitCode).toBe(1);
  } finally {
    write.mockRestore();
    process.exitCode = exitCode;
  }
  return printed.join('');
}

describe('an ops command that fails unexpectedly', () => {
  it('prints the error as the logs have it, without the data its fields quote, and exits 1', async () => {
    const error = await duplicateAddressError();
    expect(JSON.stringify(error)).toContain('quoted@ops.test');
    const output = await printedFor(error);
    expect(output).toMatch(/^unexpected error: /);
    expect(output).toContain('UniqueIntegrityConstraintViolationError');
    expect(output).toContain('logins_email_key');
    expect(output).not.toContain('quoted@ops.test');
  });

  it('prints an error whose fields JSON cannot write (a bigint, a cycle)', async () => {
    const error = Object.assign(new Error('the log answered oddly'), { revision: 7n });
    Object.assign(error, { self: error });
    const output = await printedFor(error);
    expect(output).toMatch(/^unexpected error: /);
    expect(output).toContain('the log answered oddly');
    expect(output).toContain('"revision": "7n"');
  });
});
