/** Resolves with the first truthy value `probe` gives, polling every 20 ms; throws after `timeoutMs`. */
export async function waitFor<T>(probe: () => Promise<T | undefined | null | false> | T | undefined | null | false, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error('condition not met before the deadline');
    await new Promise((r) => setTimeout(r, 20));
  }
}
