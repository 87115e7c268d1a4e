import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { applyMigrations as migrate } from '../../../../shared/db/migrate.ts';
import { createEmptyTestDatabase, sqlAt } from '../../../support/database.ts';
import { eventStoreMigrations, flushArguments, indexOfMigration, type FlushPart } from '../../../support/eventStoreMigrations.ts';
import { seededRandom } from '../../../support/random.ts';

/**
 * `es_append_batch` as event-store/015 replaced it, against the version before it: the same
 * decisions on random batches, and a part without an expected revision refused on either path.
 */
type BatchAnswer =
  { error: string } | { outcomes: string[]; revisions: (string | null)[]; commits: (string | null)[]; prepares: (string | null)[] };

/** One flush through the 9-argument `es_append_batch`, as the adapter sends it (no wake-up). */
async function flushOn(client: pg.Client, parts: readonly FlushPart[]): Promise<BatchAnswer> {
  try {
    const { rows } = await client.query<{
      outcomes: string[];
      revisions: (string | null)[];
      commits: (string | null)[];
      prepares: (string | null)[];
    }>(
      'select outcomes, revisions, commits, prepares from es_append_batch($1::int4[], $2::text[], $3::text[], $4::int4[], $5::uuid[], $6::text[], $7::jsonb[], $8::jsonb[], $9::text)',
      [...flushArguments(parts), null],
    );
    const row = rows[0];
    if (!row) throw new Error('es_append_batch returned no row');
    return row;
  } catch (error) {
    if (error instanceof pg.DatabaseError) return { error: error.code ?? 'unknown' };
    throw error;
  }
}

describe('es_append_batch as 015 replaced it', () => {
  it('decides every batch as the version before it did: the same outcomes, revisions, positions and log', async () => {
    const before = await createEmptyTestDatabase();
    const after = await createEmptyTestDatabase();
    const clients = [new pg.Client({ connectionString: before.url }), new pg.Client({ connectionString: after.url })] as const;
    try {
      await migrate(before.url, eventStoreMigrations.slice(0, indexOfMigration('event-store/015')));
      // No variable of the new function's blocks hides another (PL/pgSQL refuses such a function
      // where an operator asks it to).
      await sqlAt(after.url, `alter database ${after.name} set plpgsql.extra_errors to 'shadowed_variables'`);
      await migrate(after.url, eventStoreMigrations);
      await Promise.all(clients.map((c) => c.connect()));
      const random = seededRandom(11);
      const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
      const streams = Array.from({ length: 10 }, (_, i) => `diff-${i}`);
      const revision = new Map<string, number>();
      const written: { stream: string; ids: readonly string[] }[] = [];
      const seen = { inOneGo: 0, severalEvents: 0, someRefused: 0 };
      /** The event id at each of `positions`, in one database. */
      const idsAt = async (client: pg.Client, positions: readonly (string | null)[]) => {
        const { rows } = await client.query<{ position: string; event_id: string }>(
          'select position::text, event_id::text from es_events where position = any($1::int8[])',
          [positions.filter((p) => p !== null)],
        );
        const byPosition = new Map(rows.map((r) => [r.position, r.event_id]));
        return positions.map((p) => (p === null ? null : byPosition.get(p)));
      };

      for (let batch = 0; batch < 300; batch++) {
        const parts: FlushPart[] = [];
        const distinct = random() < 0.7;
        const free = [...streams];
        const size = 1 + Math.floor(random() * 6);
        for (let i = 0; i < size; i++) {
          const stream = distinct && free.length > 0 ? (free.splice(Math.floor(random() * free.length), 1)[0] as string) : pick(streams);
          const current = revision.get(stream);
          const roll = random();
          const expected =
            roll < 0.5
              ? current === undefined
                ? 'no_stream'
                : String(current)
              : roll < 0.6
                ? String((current ?? -1) + 1)
                : roll < 0.72
                  ? 'any'
                  : roll < 0.8
                    ? 'no_stream'
                    : roll < 0.88
                      ? 'stream_exists'
                      : roll < 0.92
                        ? pick(['x1', '-1', ''])
                        : current === undefined
                          ? 'no_stream'
                          : String(current);
          const count = random() < 0.7 ? 1 : 2 + Math.floor(random() * 2);
          let ids: string[] = Array.from({ length: count }, () => randomUUID());
          const reuse = random();
          const earlier = written.length > 0 ? pick(written) : undefined;
          if (earlier && reuse < 0.06)
            ids = [...earlier.ids]; // a retry (on its own stream: a duplicate)
          else if (earlier && reuse < 0.09)
            ids[0] = earlier.ids[0] as string; // an id used before, among new ones
          else if (parts.length > 0 && reuse < 0.12) ids[0] = (parts.at(-1) as FlushPart).ids[0] as string; // repeated in the batch
          const retry = earlier && reuse < 0.06 && random() < 0.7;
          parts.push({
            req: i === 0 || random() < 0.6 ? i : (parts.at(-1) as FlushPart).req,
            stream: retry ? earlier.stream : stream,
            expected,
            ids,
            type: `T${ids.length}`,
            metadata: ids.map(() => (random() < 0.1 ? null : '{}')),
          });
        }
        const [old, now] = [await flushOn(clients[0], parts), await flushOn(clients[1], parts)];
        expect(now, `batch ${batch}: ${JSON.stringify(parts)}`).toMatchObject(
          'error' in old ? { error: old.error } : { outcomes: old.outcomes, revisions: old.revisions },
        );
        if ('error' in old || 'error' in now) continue;
        // One transaction per flush: the appended parts share its id; a retry has its first
        // append's, a refused part none.
        expect(now.commits.map((c) => c === null)).toEqual(old.commits.map((c) => c === null));
        expect(new Set(now.commits.filter((_, i) => now.outcomes[i] === 'appended')).size).toBeLessThanOrEqual(1);
        // Each part's position is the same event's in both logs: its last event, or a retry's first.
        expect(await idsAt(clients[1], now.prepares)).toEqual(await idsAt(clients[0], old.prepares));
        parts.forEach((part, i) => {
          if (old.outcomes[i] !== 'appended') return;
          revision.set(part.stream, Number(old.revisions[i]));
          written.push({ stream: part.stream, ids: part.ids });
        });
        if (old.outcomes.every((o) => o === 'appended')) {
          if (new Set(parts.map((p) => p.stream)).size === parts.length) seen.inOneGo++;
          if (parts.some((p) => p.ids.length > 1)) seen.severalEvents++;
        } else seen.someRefused++;
      }
      const log = async (client: pg.Client) =>
        (
          await client.query(
            'select stream_id, revision::int, event_id::text, type, data, metadata from es_events order by stream_id, revision',
          )
        ).rows;
      const logs = await Promise.all(clients.map(log));
      expect(logs[1]).toEqual(logs[0]);
      expect(logs[0]?.length).toBeGreaterThan(300);
      // Both of the new version's paths ran many times: batches it wrote in one go, and batches
      // decided request by request (a refused, repeated or retried part).
      expect(seen.inOneGo).toBeGreaterThan(60);
      expect(seen.severalEvents).toBeGreaterThan(20);
      expect(seen.someRefused).toBeGreaterThan(60);
    } finally {
      await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
      await Promise.all([before.drop(), after.drop()]);
    }
  }, 60_000);

  it('refuses a part without an expected revision, on either path, and appends nothing for its request', async () => {
    const db = await createEmptyTestDatabase();
    const client = new pg.Client({ connectionString: db.url });
    try {
      await migrate(db.url, eventStoreMigrations);
      await client.connect();
      const part = (req: number, stream: string, expected: string | null): FlushPart => ({
        req,
        stream,
        expected,
        ids: [randomUUID()],
        type: 'N',
      });
      // Distinct streams: the batch check fails, and the request-by-request path decides.
      expect(await flushOn(client, [part(0, 'n-a', null), part(1, 'n-b', 'no_stream')])).toMatchObject({
        outcomes: ['wrong_expected_revision', 'appended'],
        revisions: [null, '0'],
      });
      // A stream repeated: straight to the request-by-request path.
      expect(await flushOn(client, [part(0, 'n-c', 'no_stream'), part(1, 'n-c', null), part(1, 'n-d', 'any')])).toMatchObject({
        outcomes: ['appended', 'wrong_expected_revision', 'not_attempted'],
      });
      const { rows } = await client.query<{ stream_id: string }>(
        `select stream_id from es_events where stream_id like 'n-%' order by stream_id`,
      );
      expect(rows.map((r) => r.stream_id)).toEqual(['n-b', 'n-c']);
    } finally {
      await client.end().catch(() => undefined);
      await db.drop();
    }
  });
});
