/**
 * One entry per key, the one with the earliest instant (ISO 8601): what several copies of a
 * ledger say, said once. An erasure or an offboarding is repeated, never moved, so the first
 * record of it is the one that stands.
 */
export function earliestEach<T>(entries: Iterable<T>, keyOf: (entry: T) => string, instantOf: (entry: T) => string): Map<string, T> {
  const first = new Map<string, T>();
  for (const entry of entries) {
    const key = keyOf(entry);
    const seen = first.get(key);
    if (seen === undefined || Date.parse(instantOf(entry)) < Date.parse(instantOf(seen))) first.set(key, entry);
  }
  return first;
}
