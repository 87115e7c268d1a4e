/**
 * The CPU cost of sealing per event, without any engine: for `events` hired employees, each with
 * its own data key as in the service, the time to make and seal the key (a hire's first seal),
 * to seal its `EmployeeHired` personal fields, to unseal its key (a rebuild's per-employee key
 * load) and to open the fields again. Medians of `rounds` rounds, in µs per event.
 */
import { EMPLOYEE_PERSONAL_FIELDS } from '../../services/employees/contract.ts';
import { makeDataKey, wrapContext } from '../../shared/personal-data/dataKeys.ts';
import { fieldPlace, openValue, sealValue, type DataKey } from '../../shared/personal-data/fieldCipher.ts';
import { createKeyEncryptionKeys, generateKekEntry, parseKeyEncryptionKeys } from '../../shared/personal-data/keyEncryptionKeys.ts';
import { createSecretKey } from 'node:crypto';
import { median } from './measure.ts';

export function measureSealingCost(options: { events?: number; rounds?: number } = {}) {
  const events = options.events ?? 20_000;
  const rounds = options.rounds ?? 5;
  const fields = EMPLOYEE_PERSONAL_FIELDS.EmployeeHired ?? [];
  const keks = createKeyEncryptionKeys(parseKeyEncryptionKeys(generateKekEntry()));
  const tenantId = '00000000-0000-4000-8000-000000000000';
  const data = (i: number): Record<string, string> => ({
    email: `employee-${i}-01jd8x9k2m3n4p5q6r7s8t9v0w@bench.example`,
    firstName: 'Bench',
    lastName: `Person ${i}`,
  });
  // Each value is bound to its place in the log, as the sealing boundary does.
  const place = (i: number, field: string) =>
    fieldPlace(tenantId, `employee-${tenantId}-${String(i).padStart(26, '0')}`, 'EmployeeHired', field);
  const perEvent = (ms: number) => Number(((ms * 1000) / events).toFixed(2));
  const results: Array<{ keyAndSeal: number; sealFields: number; unsealKey: number; openFields: number }> = [];
  for (let round = 0; round < rounds; round++) {
    const made: Array<ReturnType<typeof makeDataKey>> = [];
    let t = performance.now();
    for (let i = 0; i < events; i++) made.push(makeDataKey(keks, { tenantId, subjectId: String(i) }));
    const keyAndSeal = performance.now() - t;

    const sealed: Array<Record<string, string>> = [];
    t = performance.now();
    for (let i = 0; i < events; i++) {
      const key = made[i]?.key as DataKey;
      const plain = data(i);
      const out: Record<string, string> = { ...plain };
      for (const f of fields) out[f] = sealValue(key, plain[f] ?? '', place(i, f));
      sealed.push(out);
    }
    const sealFields = performance.now() - t;

    const keys: DataKey[] = [];
    t = performance.now();
    for (let i = 0; i < events; i++) {
      const m = made[i] as ReturnType<typeof makeDataKey>;
      const raw = keks.unwrap(m.kekId, m.sealed, wrapContext({ tenantId, subjectId: String(i) }, m.key.keyId));
      keys.push({ keyId: m.key.keyId, key: createSecretKey(raw) });
    }
    const unsealKey = performance.now() - t;

    t = performance.now();
    let length = 0;
    for (let i = 0; i < events; i++) {
      const key = keys[i] as DataKey;
      const row = sealed[i] as Record<string, string>;
      for (const f of fields) length += openValue(key, row[f] ?? '', place(i, f)).length;
    }
    const openFields = performance.now() - t;
    if (length === 0) throw new Error('nothing opened');
    results.push({ keyAndSeal, sealFields, unsealKey, openFields });
  }
  const med = (pick: (r: (typeof results)[number]) => number) => perEvent(median(results.map(pick)));
  return {
    scenario: 'sealing.cost',
    events,
    rounds,
    fieldsPerEvent: fields.length,
    microsPerEvent: {
      newKey: med((r) => r.keyAndSeal),
      sealFields: med((r) => r.sealFields),
      unsealKey: med((r) => r.unsealKey),
      openFields: med((r) => r.openFields),
    },
    note: 'a hire pays newKey + sealFields; a rebuild pays unsealKey + openFields per hired employee',
  };
}
