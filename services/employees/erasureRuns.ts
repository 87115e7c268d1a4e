import { setTimeout as sleep } from 'node:timers/promises';
import { NotFoundError } from '../../shared/errors.ts';
import { comparePositions, START, type EventStore } from '../../shared/event-store/port.ts';
import { earliestEach } from '../../shared/earliest.ts';
import { employeeKey, parseEmployeeStreamId, type EmployeeErased } from './contract.ts';
import { eraseEmployee, type ErasurePorts } from './erasure.ts';
import { listErasures, recordErasure, type ErasureEntry } from './erasureLedger.ts';

/**
 * Erasures of many employees at once, for the operator: a whole tenant (offboarding), and the
 * erasures a restored backup undid. Each erasure is the one the API makes, idempotent, so a run
 * that stops half-way is resumed by running it again.
 */

/**
 * What the log says about a tenant's (or every tenant's) employees: who was hired, who was erased
 * and when. Only stream ids and `EmployeeErased` (nothing personal) are needed, so `log` is the
 * store without the sealing boundary: a hire whose key is missing cannot stop the scan.
 */
export async function scanEmployees(
  log: EventStore,
  tenantId?: string,
): Promise<{ readonly hired: ReadonlyArray<{ tenantId: string; employeeId: string }>; readonly erased: readonly ErasureEntry[] }> {
  const hired: Array<{ tenantId: string; employeeId: string }> = [];
  const erased: ErasureEntry[] = [];
  // Up to the head as it is when the scan starts, not until a page moves nothing: while other
  // tenants write, every page moves, and such a scan would never end. Whatever committed before
  // this point is at or before it; what commits later is the next scan's (eraseTenantEmployees
  // scans again until it finds nobody new).
  let head = await log.headPosition();
  let after = START;
  while (comparePositions(after, head) < 0) {
    const page = await log.readAll({ after, maxCount: 10_000, eventTypes: ['EmployeeHired', 'EmployeeErased'] });
    for (const event of page.events) {
      const stream = parseEmployeeStreamId(event.streamId);
      if (!stream || (tenantId !== undefined && stream.tenantId !== tenantId)) continue;
      if (event.type === 'EmployeeHired') hired.push(stream);
      else erased.push({ ...stream, erasedAt: (event.data as EmployeeErased['data']).erasedAt });
    }
    // Nothing readable yet past `after`, short of the head: an append below the head has not
    // committed, and the log holds back what follows it until it does (a moment). Or the head's
    // own row is gone (rewritten away by the reservations' conversion): the head is taken again,
    // never later than before, so the scan still ends.
    if (comparePositions(page.checkpoint, after) === 0) {
      const now = await log.headPosition();
      if (comparePositions(now, head) < 0) head = now;
      await sleep(IN_FLIGHT_POLL_MS);
    }
    after = page.checkpoint;
  }
  return { hired, erased };
}

/** How long a scan waits before reading again past an append still in flight. */
const IN_FLIGHT_POLL_MS = 20;

export type ErasureOutcome = 'erased' | 'already' | 'absent';

export type RunProgress = (done: number, total: number) => void;

/**
 * Erases each of `targets` in turn (at `erasedAt` when given: the time a ledger recorded). `erased`
 * is a new erasure, `already` one that was erased before (its key destroyed and login forgotten
 * again), `absent` an employee the log does not have (a backup older than the hire): one with an
 * `erasedAt` goes into the ledger all the same.
 */
export async function eraseAll(
  ports: ErasurePorts,
  targets: ReadonlyArray<{ readonly tenantId: string; readonly employeeId: string; readonly erasedAt?: string }>,
  actor: string,
  onProgress: RunProgress = () => undefined,
): Promise<Record<ErasureOutcome, number>> {
  const counts: Record<ErasureOutcome, number> = { erased: 0, already: 0, absent: 0 };
  const now = new Date().toISOString();
  for (const [i, target] of targets.entries()) {
    const metadata = { tenantId: target.tenantId, actor, now: target.erasedAt ?? now };
    try {
      const result = await eraseEmployee(ports, target.employeeId, metadata);
      counts[result.fresh ? 'erased' : 'already']++;
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
      // Recorded all the same (ids and a time, nothing personal): the copy kept outside the
      // backups is refreshed from this table, and a later restore that has the hire needs it.
      if (target.erasedAt !== undefined) await recordErasure(ports.pool, { ...target, erasedAt: target.erasedAt });
      counts.absent++;
    }
    onProgress(i + 1, targets.length);
  }
  return counts;
}

/**
 * Every erasure recorded (of one tenant, when given), each once, at its first `erasedAt`: in a
 * copy of the ledger kept outside the backups (`kept`: a restore rolls the ledger table back with
 * everything else), in the ledger table, and in the log (on KurrentDB the log is newer than a
 * restored PostgreSQL backup and its keys). Then everyone else the log has of an `offboarded`
 * tenant, to be erased now: an offboarding stopped before it erased them all, or a hire that
 * slipped in after its last scan, is finished here rather than brought back.
 */
export async function erasuresToReapply(
  ports: Pick<ErasurePorts, 'log' | 'pool'>,
  tenantId?: string,
  kept: readonly ErasureEntry[] = [],
  offboarded: ReadonlySet<string> = new Set(),
): Promise<Array<{ readonly tenantId: string; readonly employeeId: string; readonly erasedAt?: string }>> {
  const [ledger, log] = await Promise.all([listErasures(ports.pool, tenantId), scanEmployees(ports.log, tenantId)]);
  const fromCopy = kept.filter((e) => tenantId === undefined || e.tenantId === tenantId);
  const first = earliestEach(
    [...fromCopy, ...ledger, ...log.erased],
    (e) => employeeKey(e.tenantId, e.employeeId),
    (e) => e.erasedAt,
  );
  const rest = log.hired.filter((h) => offboarded.has(h.tenantId) && !first.has(employeeKey(h.tenantId, h.employeeId)));
  return [...first.values(), ...rest];
}

/**
 * A tenant's employees, erased: the log scanned and everyone in it erased, the scan repeated until
 * it finds nobody new (a hire that committed while the run went on is erased too). A person the
 * ledger records as erased and whose key is destroyed was finished by an earlier run and is
 * skipped, so a run resumed after a stop goes on where it left off. The caller disables the
 * tenant's logins first, so that nobody can hire meanwhile with a session it could renew.
 */
export async function eraseTenantEmployees(
  ports: ErasurePorts & { readonly isDestroyed: (tenantId: string, employeeId: string) => Promise<boolean> },
  tenantId: string,
  actor: string,
  onProgress: RunProgress = () => undefined,
): Promise<Record<ErasureOutcome | 'skipped', number> & { readonly employees: number }> {
  const counts = { erased: 0, already: 0, absent: 0, skipped: 0 };
  const seen = new Set<string>();
  const ledger = new Set((await listErasures(ports.pool, tenantId)).map((e) => e.employeeId));
  let done = 0;
  for (;;) {
    const { hired } = await scanEmployees(ports.log, tenantId);
    const fresh = hired.filter((h) => !seen.has(h.employeeId));
    if (fresh.length === 0) return { ...counts, employees: seen.size };
    for (const h of fresh) seen.add(h.employeeId);
    const targets: typeof fresh = [];
    for (const h of fresh) {
      if (ledger.has(h.employeeId) && (await ports.isDestroyed(tenantId, h.employeeId))) counts.skipped++;
      else targets.push(h);
    }
    // The skipped are in the total, so they count as done too, or a resumed run ends short.
    const base = done + fresh.length - targets.length;
    const run = await eraseAll(ports, targets, actor, (i) => onProgress(base + i, seen.size));
    done += fresh.length;
    onProgress(done, seen.size);
    for (const outcome of ['erased', 'already', 'absent'] as const) counts[outcome] += run[outcome];
  }
}
