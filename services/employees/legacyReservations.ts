import { z } from 'zod';
import { sql, type DatabasePool } from '../../shared/db/pool.ts';
import type { EmailHash } from '../../shared/personal-data/emailHash.ts';
import { emailReservationStreamId } from './emailReservation.ts';

/**
 * The one-time conversion of the first form of email reservations (PostgreSQL log only): streams
 * named by a plain SHA-256 of the address, whose `EmployeeEmailReserved` events carried the
 * address. Each such stream is renamed in place to its keyed-hash name and its events lose the
 * address; revisions, positions and holders stay, so uniqueness holds across the conversion.
 *
 * Found by their events (an `EmployeeEmailReserved` that still has an `email`), so a stopped run
 * is run again and goes on with what is left. If the keyed-hash stream already exists (an address
 * reserved by the new form before the conversion ran), the old stream is dropped and reported:
 * its holder may now share the address, which `ops employees check-emails` names.
 */
export type LegacyReservationsProgress = { readonly converted: number; readonly dropped: readonly string[]; readonly total: number };

const legacyEvent = z.object({ position: z.number(), stream_id: z.string(), email: z.string(), tenant_id: z.string() });

const LEGACY_EVENTS = sql.fragment`type = 'EmployeeEmailReserved' and data ? 'email' and stream_id like 'employee-email-%'`;

export async function convertLegacyReservations(
  pool: DatabasePool,
  emailHash: EmailHash,
  options: { readonly onProgress?: (progress: LegacyReservationsProgress) => void } = {},
): Promise<LegacyReservationsProgress> {
  const total = await pool.oneFirst(sql.type(z.object({ n: z.number() }))`
    select count(distinct stream_id)::int8 as n from es_events where ${LEGACY_EVENTS}
  `);
  const progress = { converted: 0, dropped: [] as string[], total };
  let after = 0;
  for (;;) {
    const rows = await pool.any(sql.type(legacyEvent)`
      select position, stream_id, data ->> 'email' as email, metadata ->> 'tenantId' as tenant_id from es_events
      where position > ${after} and ${LEGACY_EVENTS}
      order by position limit 500
    `);
    const last = rows.at(-1);
    if (!last) return progress;
    after = last.position;
    const streams = new Map(rows.map((r) => [r.stream_id, r]));
    for (const [oldId, r] of streams) {
      const tenantId = /^employee-email-([0-9a-f-]{36})-[0-9a-f]{64}$/.exec(oldId)?.[1] ?? r.tenant_id;
      const newId = emailReservationStreamId(emailHash, tenantId, r.email);
      const outcome = await pool.transaction(async (tx) => {
        const taken = await tx.exists(sql.type(z.object({}))`select 1 from es_events where stream_id = ${newId}`);
        if (taken) {
          await tx.query(sql.type(z.object({}))`delete from es_events where stream_id = ${oldId}`);
          return 'dropped' as const;
        }
        await tx.query(sql.type(z.object({}))`update es_events set stream_id = ${newId}, data = data - 'email' where stream_id = ${oldId}`);
        return 'converted' as const;
      });
      if (outcome === 'dropped') progress.dropped.push(`${tenantId}\t${oldId}`);
      else progress.converted++;
      options.onProgress?.(progress);
    }
  }
}
