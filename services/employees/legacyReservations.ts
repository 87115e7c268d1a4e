import { z } from 'zod';
import { ignoredRows, sql, type DatabasePool } from '../../shared/db/pool.ts';
import type { EmailHash } from '../../shared/personal-data/emailHash.ts';
import { emailReservationStreamId } from './emailReservation.ts';

/**
 * The one-time conversion of the first form of email reservations (PostgreSQL log only): streams
 * named by a plain SHA-256 of the address, whose `EmployeeEmailReserved` events carried the
 * address. Each such stream is renamed in place to its keyed-hash name and its events lose the
 * address; revisions, positions and holders stay, so uniqueness holds across the conversion.
 *
 * Found by their events (an `EmployeeEmailReserved` that still has an `email`), a batch of
 * streams per transaction, so a stopped run is run again and goes on with what is left. If the keyed-hash stream already exists (an address
 * reserved by the new form before the conversion ran), the old stream is dropped and reported:
 * its holder may now share the address, which `ops employees check-emails` names.
 */
export type LegacyReservationsProgress = { readonly converted: number; readonly dropped: readonly string[]; readonly total: number };

const legacyEvent = z.object({
  transaction_id: z.string(),
  position: z.number(),
  stream_id: z.string(),
  email: z.string().nullable(),
  tenant_id: z.string().nullable(),
  legacy: z.boolean(),
});

const LEGACY_EVENTS = sql.fragment`type = 'EmployeeEmailReserved' and data ? 'email' and stream_id like 'employee-email-%'`;

const countRow = z.object({ n: z.number() });

/** Reservation streams of the first form still to convert. */
export async function countLegacyReservations(pool: DatabasePool): Promise<number> {
  return pool.oneFirst(sql.type(countRow)`
    select count(distinct stream_id)::int8 as n from es_events where ${LEGACY_EVENTS}
  `);
}

const streamIdRow = z.object({ stream_id: z.string() });

export async function convertLegacyReservations(
  pool: DatabasePool,
  emailHash: EmailHash,
  options: { readonly batchSize?: number; readonly onProgress?: (progress: LegacyReservationsProgress) => void } = {},
): Promise<LegacyReservationsProgress> {
  const progress = { converted: 0, dropped: [] as string[], total: await countLegacyReservations(pool) };
  // Paged on the log's unique order index, each batch after the last: no scan from the start per batch.
  let after = { tx: '0', position: 0 };
  for (;;) {
    // A window on the log's index, then filtered (a filter in the same query makes the planner scan the table).
    const window = await pool.any(sql.type(legacyEvent)`
      with w as (
        select e.transaction_id, e.position, e.stream_id, e.type, e.data, e.metadata from es_events e
        where (e.transaction_id, e.position) > (${after.tx}::xid8, ${after.position})
        order by e.transaction_id, e.position limit ${options.batchSize ?? 1_000}
      )
      select w.transaction_id::text, w.position, w.stream_id, w.data ->> 'email' as email, w.metadata ->> 'tenantId' as tenant_id,
             (${LEGACY_EVENTS}) as legacy
      from w order by w.transaction_id, w.position
    `);
    const last = window.at(-1);
    if (!last) return progress;
    after = { tx: last.transaction_id, position: last.position };
    const rows = window.flatMap((r) => (r.legacy && r.email !== null ? [{ ...r, email: r.email }] : []));
    if (rows.length === 0) continue;
    const streams = new Map(rows.map((r) => [r.stream_id, r]));
    const converted: Array<{ oldId: string; newId: string }> = [];
    const dropped: Array<{ oldId: string; tenantId: string }> = [];
    const taken = new Set(
      await pool.anyFirst(sql.type(streamIdRow)`
        select distinct stream_id from es_events where stream_id = any(${sql.array(
          [...streams].map(([oldId, r]) => newIdOf(emailHash, oldId, r)),
          'text',
        )})
      `),
    );
    for (const [oldId, r] of streams) {
      const newId = newIdOf(emailHash, oldId, r);
      if (taken.has(newId)) dropped.push({ oldId, tenantId: tenantOf(oldId, r) });
      else converted.push({ oldId, newId });
    }
    // The batch in one transaction: a reservation of the new form made meanwhile for one of these
    // addresses makes the rename fail on the stream's unique revisions, and the batch is retried by a run again.
    await pool.transaction(async (tx) => {
      if (dropped.length > 0) {
        await tx.query(
          sql.type(ignoredRows)`delete from es_events where stream_id = any(${sql.array(
            dropped.map((d) => d.oldId),
            'text',
          )})`,
        );
      }
      if (converted.length > 0) {
        await tx.query(sql.type(ignoredRows)`
          update es_events e set stream_id = u.new_id, data = e.data - 'email'
          from unnest(${sql.array(
            converted.map((c) => c.oldId),
            'text',
          )}, ${sql.array(
            converted.map((c) => c.newId),
            'text',
          )}) as u(old_id, new_id)
          where e.stream_id = u.old_id
        `);
      }
    });
    progress.converted += converted.length;
    progress.dropped.push(...dropped.map((d) => `${d.tenantId}\t${d.oldId}`));
    options.onProgress?.(progress);
  }
}

const tenantOf = (oldId: string, r: { tenant_id: string | null }): string =>
  /^employee-email-([0-9a-f-]{36})-[0-9a-f]{64}$/.exec(oldId)?.[1] ?? r.tenant_id ?? '';

const newIdOf = (emailHash: EmailHash, oldId: string, r: { tenant_id: string | null; email: string }): string =>
  emailReservationStreamId(emailHash, tenantOf(oldId, r), r.email);

/** Whether reservations of the first form may still exist, so a hire must look for one (see `watchLegacyReservations`). */
export type LegacyReservationsWatch = () => Promise<boolean>;

const legacyRow = z.object({ legacy: z.boolean() });

/**
 * Tells hires whether to look for a first-form reservation of their address (one stream read
 * each). True while the PostgreSQL log holds any, asked again at most every `recheckMs`; false
 * for good once it holds none: the conversion has run, or the log never had any. An empty
 * `es_events` is "none" only when the log lives in this database (`logInDatabase`); a log kept
 * in KurrentDB leaves it empty, and there the first-form streams are never converted, so hires
 * always look. Processes of the older version, while they still run, can add one after this said
 * false: the rolling upgrade's window, where they do not see the new form either (docs/privacy.md).
 */
export function watchLegacyReservations(
  pool: DatabasePool,
  options: { readonly logInDatabase: boolean; readonly recheckMs?: number },
): LegacyReservationsWatch {
  const recheckMs = options.recheckMs ?? 30_000;
  if (!options.logInDatabase) return () => Promise.resolve(true);
  let gone = false;
  let last: { readonly at: number; readonly answer: Promise<boolean> } | undefined;
  return () => {
    if (gone) return Promise.resolve(false);
    if (!last || Date.now() - last.at >= recheckMs) {
      // The range holds exactly the first-form names (a uuid's hex digits sort below the keyed form's `h`), on the stream index.
      const answer = pool
        .one(
          sql.type(legacyRow)`
            select exists(
                     select 1 from es_events
                     where stream_id >= 'employee-email-0' and stream_id < 'employee-email-g' and ${LEGACY_EVENTS}
                   ) as legacy
          `,
        )
        .then(
          ({ legacy }) => {
            gone = !legacy;
            return legacy;
          },
          () => true,
        );
      last = { at: Date.now(), answer };
    }
    return last.answer;
  };
}
