/**
 * Exact decimal money as scaled BigInts (no floating point anywhere between the billing event
 * and the rounded KPI). Amounts carry at most `SCALE` decimal places.
 */
export const SCALE = 4;
const FACTOR = 10n ** BigInt(SCALE);

/** "49.99" → 499900n (units of 10^-SCALE). */
export function parseAmount(text: string): bigint {
  const match = /^(-?)(\d+)(?:\.(\d+))?$/.exec(text.trim());
  if (!match) throw new RangeError(`not a decimal amount: ${text}`);
  const [, sign, whole = '0', fraction = ''] = match;
  // PostgreSQL returns numeric with its own scale ("49.9900" or "49.99000000"): drop zero padding.
  const trimmed = fraction.replace(/0+$/, '');
  if (trimmed.length > SCALE) throw new RangeError(`more than ${SCALE} decimal places: ${text}`);
  const units = BigInt(whole) * FACTOR + BigInt(trimmed.padEnd(SCALE, '0') || '0');
  return sign === '-' ? -units : units;
}

/** Scaled units → a JSON number with at most SCALE decimals. */
export function unitsToNumber(units: bigint): number {
  return Number(formatUnits(units));
}

export function formatUnits(units: bigint): string {
  const negative = units < 0n;
  const abs = negative ? -units : units;
  const whole = abs / FACTOR;
  const fraction = (abs % FACTOR).toString().padStart(SCALE, '0').replace(/0+$/, '');
  return `${negative ? '-' : ''}${whole}${fraction ? `.${fraction}` : ''}`;
}

/** numerator / divisor rounded half away from zero to a whole unit. */
export function divideRounded(numerator: bigint, divisor: bigint): bigint {
  const negative = numerator < 0n !== divisor < 0n;
  const n = numerator < 0n ? -numerator : numerator;
  const d = divisor < 0n ? -divisor : divisor;
  const q = (n * 2n + d) / (2n * d);
  return negative ? -q : q;
}
