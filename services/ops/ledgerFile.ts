import { InvalidArgumentError } from 'commander';
import { z } from 'zod';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { listErasures, type ErasureEntry } from '../employees/erasureLedger.ts';
import { employeeIdSchema } from '../employees/schemas.ts';
import { listOffboardings, type OffboardingEntry } from '../tenants/offboardingLedger.ts';

/**
 * The copy of the ledgers an operator keeps outside the database backups: what
 * `ops employees erasures` prints and `ops employees reapply-erasures --ledger` reads back. Ids
 * and times only, nothing personal.
 */
export type LedgerCopy = { readonly employees: readonly ErasureEntry[]; readonly tenants: readonly OffboardingEntry[] };

const erasure = z.object({ tenantId: z.uuid(), employeeId: employeeIdSchema, erasedAt: z.iso.datetime() });
const offboarding = z.object({ tenantId: z.uuid(), offboardedAt: z.iso.datetime() });

const ledgerCopy = z.union([
  z.object({ employees: z.array(erasure), tenants: z.array(offboarding) }),
  // A copy from before tenants' offboardings were recorded: the employees' erasures alone.
  z.array(erasure).transform((employees) => ({ employees, tenants: [] })),
]);

/** Both ledgers, as the copy holds them. */
export async function readLedgers(pool: DatabasePool): Promise<LedgerCopy> {
  const [employees, tenants] = await Promise.all([listErasures(pool), listOffboardings(pool)]);
  return { employees, tenants };
}

/** A ledger copy as `employees erasures` printed it, now or before it held offboardings. */
export function parseLedgerCopy(text: string): LedgerCopy {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new InvalidArgumentError('--ledger is not JSON (expected what `employees erasures` prints)');
  }
  const parsed = ledgerCopy.safeParse(json);
  if (!parsed.success) throw new InvalidArgumentError(`--ledger is not a ledger copy: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
  return parsed.data;
}
