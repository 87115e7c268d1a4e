import { readdir, readFile } from 'node:fs/promises';
import { createServer } from 'node:net';

/** Shared by the bench scenarios: medians of alternating rounds, ports, readiness waits. */

/** Median; the mean of the two middle values for an even count, NaN for none. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  if (sorted.length === 0) return Number.NaN;
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** Nearest-rank percentile (p in 0–100) of the values, NaN for none. */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (!address || typeof address === 'string') throw new Error('no free port');
  return address.port;
}

/** Resolves once `url` answers 2xx (with `headers`), polling every `intervalMs`. */
export async function waitForHttp(
  url: string,
  timeoutMs: number,
  options: { headers?: Record<string, string>; intervalMs?: number } = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const response = await fetch(url, { headers: options.headers ?? {} }).catch(() => null);
    if (response?.ok) return;
    if (Date.now() > deadline)
      throw new Error(`${url} did not answer 2xx within ${timeoutMs} ms (last: ${response?.status ?? 'no connection'})`);
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 200));
  }
}

/**
 * CPU time (user + system, ms) used so far by the processes `pids` and by every PostgreSQL
 * process of the machine, from /proc (Linux). On a VM whose speed and steal time vary from one
 * round to the next, CPU per operation stays comparable where rates do not.
 */
export async function cpuMillis(pids: readonly number[]): Promise<{ byPid: number[]; postgres: number }> {
  const MS_PER_TICK = 10; // USER_HZ is 100 on Linux
  const millisOf = async (pid: number | string): Promise<{ comm: string; ms: number }> => {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    const close = stat.lastIndexOf(')');
    if (close < 0) return { comm: '', ms: 0 };
    const fields = stat.slice(close + 2).split(' ');
    // After the command: utime, stime (the process), cutime, cstime (its reaped children: a
    // PostgreSQL backend that exited is counted in its postmaster's).
    const ticks = [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i] ?? 0), 0);
    return { comm: stat.slice(stat.indexOf('(') + 1, close), ms: ticks * MS_PER_TICK };
  };
  const byPid = await Promise.all(pids.map(async (pid) => (await millisOf(pid)).ms));
  let postgres = 0;
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const { comm, ms } = await millisOf(entry);
    if (comm === 'postgres' || comm.startsWith('postgres:')) postgres += ms;
  }
  return { byPid, postgres };
}
