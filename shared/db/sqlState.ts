/**
 * The SQLSTATE of the first error in the `cause` chain that carries one (slonik wraps the
 * driver's error, which holds the code). Used wherever an outcome depends on what PostgreSQL
 * said: the runner's transient/deterministic split, group commit's isolation, the gateway's
 * problem mapping.
 */
export function sqlStateOf(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 8 && current instanceof Error; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
    current = current.cause;
  }
  return undefined;
}
