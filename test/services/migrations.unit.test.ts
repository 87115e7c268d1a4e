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
    const [sha256, id] = line.split('  ');
    return { id, sha256 };
  });

describe('the migrations', () => {
  const migrations = loadMigrations(allMigrations);

  it('keep every recorded migration, in its place, unchanged', () => {
    snapshot.forEach((expected, i) => {
      const actual = migrations[i];
      const problem = `migration ${i + 1} (${expected.id}) is no longer what was recorded: migrations are frozen (a deployed database applied it); restore the file and add a new migration file instead`;
      expect({ id: actual?.id, sha256: actual?.sha256 }, problem).toEqual(expected);
    });
  });

  it('are all in the snapshot', () => {
    const added = migrations.slice(snapshot.length).map((m) => `${m.sha256}  ${m.id}`);
    expect(added, 'a new migration file: append these lines to test/services/migrations.sha256').toEqual([]);
  });
});
