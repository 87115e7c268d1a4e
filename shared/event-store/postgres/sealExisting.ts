import { z } from 'zod';
import { ignoredRows, sql, type DatabasePool } from '../../db/pool.ts';
import {
  KEY_ID_FORM,
  SubjectErasedError,
  subjectRef,
  type DataKeyStore,
  type DataSubject,
  type StoredKey,
} from '../../personal-data/dataKeys.ts';
import {
  fieldPlace,
  isSealed,
  openValue,
  SEALED_FORM,
  sealedFormNaming,
  sealValue,
  type DataKey,
} from '../../personal-data/fieldCipher.ts';
import type { PersonalDataPolicy } from '../../personal-data/policy.ts';

/**
 * The one-time rewrite of a PostgreSQL log written before personal fields were sealed: every
 * stored event whose personal fields are still in the clear gets them sealed in place with its
 * subject's key (made when the subject has none), or set to null when the subject was erased
 * meanwhile (its key destroyed; then every personal string is set to null, sealed or not). Only `data` changes: ids, positions, transaction ids and
 * revisions stay, so checkpoints and cursors stay valid and projections rebuild the same.
 *
 * A value counts as sealed only when it has the full sealed form, names the subject's key and
 * opens in its place; anything else (a name typed as `enc:…`) is a clear value and gets sealed.
 *
 * One pass in the log's order `(transaction_id, position)`, paged on its unique index, so each
 * batch goes on where the last one stopped instead of scanning from the start. Resumable
 * without state of its own: a run again passes over what is sealed and seals what is left.
 * Each batch commits on its own. An event with personal fields on a stream without a data
 * subject cannot be sealed (no key is its): it is left as it is and reported by position. So are
 * the events of a subject whose stream holds values sealed with a data key while the subject has
 * no key row (a key table restored older than the log): a new key would seal those values again
 * as if they were names, and split the stream between two keys.
 */
export type SealExistingProgress = {
  readonly sealed: number;
  readonly redacted: number;
  /** Positions (`transaction_id/position`) of events left as they were: no subject, or the subject's key lost. */
  readonly skipped: readonly string[];
  readonly total: number;
};

const row = z.object({
  transaction_id: z.string(),
  position: z.number(),
  stream_id: z.string(),
  type: z.string(),
  /** Null for an event without a personal string (not to rewrite). */
  data: z.string().nullable(),
});

const countRow = z.object({ n: z.number() });

/** Events of a personal type with at least one personal field a string without the sealed form. */
export async function countClearPersonalEvents(pool: DatabasePool, policy: PersonalDataPolicy): Promise<number> {
  return pool.oneFirst(sql.type(countRow)`
    select count(*)::int8 as n from es_events where ${personalStrings(policy, 'clear')}
  `);
}

export async function sealExistingEvents(
  pool: DatabasePool,
  keys: DataKeyStore,
  policy: PersonalDataPolicy,
  options: {
    /** Events of the log looked at per batch (personal or not). */
    readonly batchSize?: number;
    readonly onProgress?: (progress: SealExistingProgress) => void;
  } = {},
): Promise<SealExistingProgress> {
  const batchSize = options.batchSize ?? 1_000;
  const total = await countClearPersonalEvents(pool, policy);
  const progress = { sealed: 0, redacted: 0, skipped: [] as string[], total };
  let after = { tx: '0', position: 0 };
  for (;;) {
    // The window is taken on the index alone, then filtered: a filter in the same query would let
    // the planner, expecting it to keep few rows, scan and sort the whole table for every batch.
    const window = await pool.any(sql.type(row)`
      with w as (
        select e.transaction_id, e.position, e.stream_id, e.type, e.data from es_events e
        where (e.transaction_id, e.position) > (${after.tx}::xid8, ${after.position})
        order by e.transaction_id, e.position limit ${batchSize}
      )
      select w.transaction_id::text, w.position, w.stream_id, w.type,
             case when ${personalStrings(policy, 'any')} then w.data::text end as data
      from w order by w.transaction_id, w.position
    `);
    const last = window.at(-1);
    if (!last) return progress;
    after = { tx: last.transaction_id, position: last.position };
    const rows = window.flatMap((r) => (r.data === null ? [] : [{ ...r, data: r.data }]));
    const { stored, lost } = await keysOf(pool, keys, policy, rows);

    const rewritten: Array<{ tx: string; position: number; data: string }> = [];
    for (const r of rows) {
      const subject = policy.subjectOf(r.stream_id);
      if (!subject || lost.has(subjectRef(subject))) {
        progress.skipped.push(`${r.transaction_id}/${r.position}`);
        continue;
      }
      const key = stored.get(subjectRef(subject));
      const data = JSON.parse(r.data) as Record<string, unknown>;
      let changed = false;
      for (const field of policy.fields[r.type] ?? []) {
        const value = data[field];
        const place = fieldPlace(subject.tenantId, r.stream_id, r.type, field);
        if (typeof value !== 'string' || (key !== 'destroyed' && opensWith(key, value, place))) continue;
        // A destroyed key: every value becomes null. One that merely looks sealed may be a clear
        // name typed so, and a truly sealed one opens nothing any more: nothing is lost.
        data[field] = key === 'destroyed' || key === undefined ? null : sealValue(key, value, place);
        changed = true;
      }
      if (!changed) continue;
      if (key === 'destroyed') progress.redacted++;
      else progress.sealed++;
      rewritten.push({ tx: r.transaction_id, position: r.position, data: JSON.stringify(data) });
    }
    if (rewritten.length > 0) {
      // By the same unique index, one row each.
      await pool.query(sql.type(ignoredRows)`
        update es_events e set data = u.data::jsonb
        from unnest(${sql.array(
          rewritten.map((r) => r.tx),
          'text',
        )}, ${sql.array(
          rewritten.map((r) => r.position),
          'int8',
        )}, ${sql.array(
          rewritten.map((r) => r.data),
          'text',
        )}) as u(tx, position, data)
        where (e.transaction_id, e.position) = (u.tx::xid8, u.position)
      `);
    }
    options.onProgress?.(progress);
  }
}

/**
 * The keys of the rows' subjects, made for those that have none yet, except the subjects whose
 * key is `lost`: without a key row, yet with values in their stream sealed by a data key.
 */
async function keysOf(pool: DatabasePool, keys: DataKeyStore, policy: PersonalDataPolicy, rows: ReadonlyArray<{ stream_id: string }>) {
  const subjects = new Map<string, { subject: DataSubject; streamId: string }>();
  for (const r of rows) {
    const subject = policy.subjectOf(r.stream_id);
    if (subject) subjects.set(subjectRef(subject), { subject, streamId: r.stream_id });
  }
  const stored = await keys.load([...subjects.values()].map((s) => s.subject));
  const missing = [...subjects.entries()].filter(([ref]) => !stored.has(ref));
  const sealedStreams = new Set(
    missing.length === 0
      ? []
      : await pool.anyFirst(sql.type(streamRow)`
          select distinct stream_id from es_events
          where stream_id = any(${sql.array(
            missing.map(([, s]) => s.streamId),
            'text',
          )}) and ${personalStrings(policy, 'sealed')}
        `),
  );
  const flagged = missing.filter(([, s]) => sealedStreams.has(s.streamId));
  // Looked up again: a process still writing may have made the key, then sealed with it, between
  // the first lookup and the probe. Only a key still missing after the sealed values is lost.
  const late = flagged.length === 0 ? new Map<string, StoredKey>() : await keys.load(flagged.map(([, s]) => s.subject));
  for (const [ref, key] of late) stored.set(ref, key);
  const lost = new Set(flagged.flatMap(([ref]) => (late.has(ref) ? [] : [ref])));
  const toMake = missing.filter(([ref]) => !lost.has(ref) && !late.has(ref));
  const made = await Promise.all(
    toMake.map(([, s]) =>
      keys.forSealing(s.subject).catch((error: unknown) => {
        // Erased since the look-up (the erasure leaves a destroyed key row): nulled as any erased person's.
        if (error instanceof SubjectErasedError) return 'destroyed' as const;
        throw error;
      }),
    ),
  );
  toMake.forEach(([ref], i) => stored.set(ref, made[i] as StoredKey));
  return { stored, lost };
}

const streamRow = z.object({ stream_id: z.string() });

function opensWith(key: DataKey | undefined, value: string, place: string): boolean {
  if (key === undefined || !isSealed(value)) return false;
  try {
    openValue(key, value, place);
    return true;
  } catch {
    return false;
  }
}

/**
 * Rows of a personal event type with a personal field that is a string (`any`); without the
 * sealed form (`clear`: what surely still needs sealing, for the count and the final check); or
 * in the sealed form naming a data key's id (`sealed`).
 */
function personalStrings(policy: PersonalDataPolicy, which: 'any' | 'clear' | 'sealed') {
  const field = (f: string) => {
    if (which === 'clear') return sql.fragment`(jsonb_typeof(data -> ${f}) = 'string' and data ->> ${f} !~ ${SEALED_FORM})`;
    if (which === 'sealed')
      return sql.fragment`(jsonb_typeof(data -> ${f}) = 'string' and data ->> ${f} ~ ${sealedFormNaming(KEY_ID_FORM)})`;
    return sql.fragment`jsonb_typeof(data -> ${f}) = 'string'`;
  };
  const byType = Object.entries(policy.fields).map(
    ([type, fields]) => sql.fragment`(type = ${type} and (${sql.join(fields.map(field), sql.fragment` or `)}))`,
  );
  return byType.length === 0 ? sql.fragment`false` : sql.fragment`(${sql.join(byType, sql.fragment` or `)})`;
}
