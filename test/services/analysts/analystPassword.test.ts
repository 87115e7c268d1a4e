import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../../../shared/db/embedded.ts';
import { freePort, runOps } from '../../support/processes.ts';

/**
 * The printed connection string logs in where passwords are checked: the shared test cluster trusts
 * every local connection, so this runs the CLI against an embedded PostgreSQL of its own, switched
 * to SCRAM-SHA-256 authentication, so that a login checks both keys of the verifier the CLI stored
 * (the client's proof against StoredKey, the server's signature against ServerKey).
 */
const dataDir = mkdtempSync(join(tmpdir(), 'eas-analyst-password-'));
let server: EmbeddedDatabase;

beforeAll(async () => {
  server = await startEmbeddedPostgres({ dataDir, port: await freePort() });
  const hba = join(dataDir, 'pg', 'pg_hba.conf');
  writeFileSync(hba, readFileSync(hba, 'utf8').replace(/\bpassword$/gm, 'scram-sha-256'));
  const owner = new pg.Client({ connectionString: server.url });
  await owner.connect();
  await owner.query('select pg_reload_conf()');
  const methods = await owner.query<{ method: string }>(`select distinct auth_method as method from pg_hba_file_rules`);
  await owner.end();
  expect(methods.rows).toEqual([{ method: 'scram-sha-256' }]);
}, 120_000);

afterAll(async () => {
  await server?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('when the password check is on', () => {
  it('logs in with the printed connection string, and not with another password', { timeout: 120_000 }, async () => {
    const created = await runOps(
      server.url,
      'tenants',
      'create',
      'acme',
      '--plan',
      'pro',
      '--admin-email',
      'a@acme.test',
      '--admin-password',
      'admin-password',
    );
    expect(created.code, created.stderr).toBe(0);
    const granted = await runOps(server.url, 'analysts', 'grant', 'acme');
    expect(granted.code, granted.stderr).toBe(0);
    const url = granted.stdout.split('\n').find((line) => line.startsWith('postgres'));
    expect(url).toMatch(/^postgres:\/\/analyst_acme:[A-Za-z0-9_-]{32}@127\.0\.0\.1:\d+\/postgres$/);

    const analyst = new pg.Client({ connectionString: url });
    await analyst.connect();
    try {
      expect((await analyst.query('select current_user as who')).rows).toEqual([{ who: 'analyst_acme' }]);
      expect((await analyst.query('select count(*)::int as n from kpi_usage_days')).rows).toEqual([{ n: 0 }]);
      await expect(analyst.query('select * from es_events limit 1')).rejects.toThrow(/permission denied/);
    } finally {
      await analyst.end();
    }

    const wrong = new URL(url ?? '');
    wrong.password = 'not-the-password-at-all';
    const intruder = new pg.Client({ connectionString: wrong.toString() });
    await expect(intruder.connect()).rejects.toThrow(/password authentication failed for user "analyst_acme"/);
  });
});
