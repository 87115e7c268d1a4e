import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadMigrations } from '../../shared/db/migrate.ts';
import { allMigrations } from '../../services/migrations.ts';

/**
 * Every migration, in the order it applies, with the SHA-256 of its file, as checked in beside
 * this test (`<sha256>  <id>` per line). A deployed database recorded these hashes and refuses to
 * start when an applied file changed, so a file, once here, never changes.
 */
const snapshot = readFileSync(new URL('./migrations.sha256', import.meta.url), 'utf8')
  .split('\n')
  .filter((line) => line !== '')
  .map((line) => {
    const [sha256 = '', id = ''] = line.split('  ');
    return { id, sha256 };
  });

describe('the migrations', () => {
  const migrations = loadMigrations(allMigrations);
  const byId = new Map(migrations.map((m) => [m.id, m]));

  it('keep every recorded migration unchanged', () => {
    for (const expected of snapshot) {
      const actual = byId.get(expected.id);
      const problem = `${expected.id} is no longer what was recorded: migrations are frozen (a deployed database applied it); restore the file and add a new migration file instead`;
      expect({ id: actual?.id, sha256: actual?.sha256 }, problem).toEqual(expected);
    }
  });

  it('apply in the recorded order, every one of them in the snapshot', () => {
    const lines = migrations.map((m) => `${m.sha256}  ${m.id}`);
    const recorded = snapshot.map((m) => `${m.sha256}  ${m.id}`);
    expect(lines, 'a new migration file: add its line to test/services/migrations.sha256 where it applies').toEqual(recorded);
  });
});
