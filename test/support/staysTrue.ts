/**
 * Whether `probe` holds for the whole of `windowMs`, checked every 20 ms: false as soon as it does
 * not. For "nothing more arrives", which no signal can announce; the window is the test's bound on
 * how late a stray arrival could come.
 */
export async function staysTrue(probe: () => Promise<boolean> | boolean, windowMs: number): Promise<boolean> {
  const until = Date.now() + windowMs;
  for (;;) {
    if (!(await probe())) return false;
    if (Date.now() >= until) return true;
    await new Promise((r) => setTimeout(r, Math.min(20, Math.max(0, until - Date.now()))));
  }
}
