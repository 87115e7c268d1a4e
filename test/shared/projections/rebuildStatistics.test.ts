import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from '../../../shared/db/pool.ts';
import { replayProjection } from '../../../shared/projections/replay.ts';
import { useTestEventStore } from '../../support/database.ts';
import { tallied, tallyProjection } from '../../support/projections/tallyProjection.ts';

/**
 * Regression: a rebuild without a bulk path swapped in tables PostgreSQL had no statistics for,
 * and until autovacuum came by the planner took them for tiny ones: the change feed's pages read
 * and sorted a whole range of a tenant's rows instead of walking the index in order to the page's
 * end. `reltuples` is what ANALYZE (or VACUUM) last counted; -1 means never.
 */
describe('a rebuild page by page', () => {
  const fixture = useTestEventStore();

  it('hands readers tables the planner has statistics for', async () => {
    const { db, store } = fixture;
    for (let s = 0; s < 40; s++) await store.append(`statistics-${s}`, [tallied(), tallied()]);
    const projection = tallyProjection();
    expect(projection.bulk).toBeUndefined();
    await replayProjection(db.pool, store, projection, { batchSize: 25 });
    const counted = await db.pool.oneFirst(sql.type(z.object({ n: z.number() }))`
      select reltuples::int as n from pg_class where oid = ${Object.keys(projection.tables)[0] ?? ''}::regclass
    `);
    expect(counted).toBe(40);
  });
});
