import { z } from 'zod';
import { sql, type DatabasePool } from '../../db/pool.ts';
import { subjectRef, type DataKeyStore, type DataSubject, type StoredKey } from '../../personal-data/dataKeys.ts';
import { SEALED_PREFIX, sealValue } from '../../personal-data/fieldCipher.ts';
import type { PersonalDataPolicy } from '../../personal-data/policy.ts';

/**
 * The one-time rewrite of a PostgreSQL log written before personal fields were sealed: every
 * stored event whose personal fields are still in the clear gets them sealed in place with its
 * subject's key (made when the subject has none), or set to null when the subject was erased
 * meanwhile (its key destroyed). Only `data` changes: ids, positions, transaction ids and
 * revisions stay, so checkpoints and cursors stay valid and projections rebuild the same.
 *
 * Resumable without state of its own: a row is picked only while one of its personal fields is
 * still clear, so a run that stopped is simply run again. Each batch commits on its own and
 * briefly holds back live readers (the rows' writer counts as one, like an append).
 */
export type SealExistingProgress = { readonly sealed: number; readonly redacted: number; readonly total: number };

const row = z.object({ position: z.number(), stream_id: z.string(), type: z.string(), data: z.string() });

export async function countClearPersonalEvents(pool: DatabasePool, policy: PersonalDataPolicy): Promise<number> {
  return pool.oneFirst(sql.type(z.object({ n: z.number() }))`
    select count(*)::int8 as n from es_events where ${clearCondition(policy)}
  `);
}

export async function sealExistingEvents(
  pool: DatabasePool,
  keys: DataKeyStore,
  policy: PersonalDataPolicy,
  options: { readonly batchSize?: number; readonly onProgress?: (progress: SealExistingProgress) => void } = {},
): Promise<SealExistingProgress> {
  const batchSize = options.batchSize ?? 1_000;
  const total = await countClearPersonalEvents(pool, policy);
  const progress = { sealed: 0, redacted: 0, total };
  let after = 0;
  for (;;) {
    const rows = await pool.any(sql.type(row)`
      select position, stream_id, type, data::text as data from es_events
      where position > ${after} and ${clearCondition(policy)}
      order by position limit ${batchSize}
    `);
    const last = rows.at(-1);
    if (!last) return progress;
    after = last.position;
    const subjects = new Map<string, DataSubject>();
    for (const r of rows) {
      const subject = policy.subjectOf(r.stream_id);
      if (!subject)
        throw new Error(`event at position ${r.position} (${r.type}) holds personal data on ${r.stream_id}, which has no subject`);
      subjects.set(subjectRef(subject), subject);
    }
    const stored = await keys.load([...subjects.values()]);
    const missing = [...subjects.entries()].filter(([ref]) => !stored.has(ref));
    const made = await Promise.all(missing.map(([, s]) => keys.forSealing(s)));
    missing.forEach(([ref], i) => stored.set(ref, made[i] as StoredKey));

    const rewritten = rows.map((r) => {
      const subject = policy.subjectOf(r.stream_id) as DataSubject;
      const key = stored.get(subjectRef(subject));
      const data = JSON.parse(r.data) as Record<string, unknown>;
      for (const field of policy.fields[r.type] ?? []) {
        const value = data[field];
        if (typeof value !== 'string' || value.startsWith(SEALED_PREFIX)) continue;
        data[field] = key === 'destroyed' || key === undefined ? null : sealValue(key, value);
      }
      if (key === 'destroyed') progress.redacted++;
      else progress.sealed++;
      return { position: r.position, data: JSON.stringify(data) };
    });
    await pool.query(sql.type(z.object({}))`
      update es_events e set data = u.data::jsonb
      from unnest(${sql.array(
        rewritten.map((r) => r.position),
        'int8',
      )}, ${sql.array(
        rewritten.map((r) => r.data),
        'text',
      )}) as u(position, data)
      where e.position = u.position
    `);
    options.onProgress?.(progress);
  }
}

/** Rows of a personal event type with at least one personal field still a clear string. */
function clearCondition(policy: PersonalDataPolicy) {
  const byType = Object.entries(policy.fields).map(
    ([type, fields]) =>
      sql.fragment`(type = ${type} and (${sql.join(
        fields.map(
          (f) => sql.fragment`(jsonb_typeof(data -> ${f}) = 'string' and left(data ->> ${f}, ${SEALED_PREFIX.length}) <> ${SEALED_PREFIX})`,
        ),
        sql.fragment` or `,
      )}))`,
  );
  return byType.length === 0 ? sql.fragment`false` : sql.fragment`(${sql.join(byType, sql.fragment` or `)})`;
}
