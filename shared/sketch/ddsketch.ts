/**
 * A DDSketch (Masson, Rim, Lee: "DDSketch: a fast and fully-mergeable quantile sketch with
 * relative-error guarantees", VLDB 2019) for non-negative values such as request durations.
 *
 * A value x > 0 goes to bucket i = ceil(log_γ x) with γ = (1 + α) / (1 − α); every value in a
 * bucket is within relative error α of the bucket's representative 2γ^i / (γ + 1). Buckets only
 * hold counts, so two sketches with the same α merge by adding counts: the merge of per-minute
 * sketches answers exactly what one sketch over all their values would. Values below
 * `MIN_INDEXABLE` are counted in a zero bucket (their relative error does not matter at 1 µs).
 *
 * The bucket count grows with log(max / min), not with the number of values: durations from
 * 1 µs to 1 h at α = 0.5 % need at most ~2,200 buckets.
 *
 * Why not @datadog/sketches-js (the reference implementation, protobuf serialisation): with the
 * same answers, its stored form is several times larger (the rollup tables hold one sketch per
 * tenant-minute) and several times slower to decode and merge (what every KPI query does); it
 * adds values faster, but ingest is not the bottleneck (figures: docs/benchmarks.md, "Sketch
 * library"). Also:
 *   - analysts call `kpi_sketch_quantile(bytea, q)` in SQL (projections/kpi/migrations/002-sketch-quantile.sql), which
 *     reads this format (a protobuf decoder in PL/pgSQL would be slower and larger), and the
 *     library needs protobufjs at run time.
 * The format is documented in serializeSketch; the test suite holds it to the paper's guarantee.
 */
export const DEFAULT_RELATIVE_ACCURACY = 0.005;
const MIN_INDEXABLE = 1e-3;
const FORMAT_VERSION = 1;

export type DDSketch = {
  readonly relativeAccuracy: number;
  /** Number of values added. */
  count: number;
  zeroCount: number;
  sum: number;
  min: number;
  max: number;
  readonly bins: Map<number, number>;
};

export function createSketch(relativeAccuracy = DEFAULT_RELATIVE_ACCURACY): DDSketch {
  if (!(relativeAccuracy > 0 && relativeAccuracy < 1)) throw new RangeError('relativeAccuracy must be in (0, 1)');
  return { relativeAccuracy, count: 0, zeroCount: 0, sum: 0, min: Infinity, max: -Infinity, bins: new Map() };
}

const gammaOf = (alpha: number) => (1 + alpha) / (1 - alpha);
const logGammaCache = new Map<number, number>();
const logGamma = (alpha: number) => {
  let value = logGammaCache.get(alpha);
  if (value === undefined) {
    value = Math.log(gammaOf(alpha));
    logGammaCache.set(alpha, value);
  }
  return value;
};

export function bucketIndex(alpha: number, value: number): number {
  return Math.ceil(Math.log(value) / logGamma(alpha));
}

export function bucketValue(alpha: number, index: number): number {
  const gamma = gammaOf(alpha);
  return (2 * Math.pow(gamma, index)) / (gamma + 1);
}

/** Adds `value` (`weight` times). Negative and non-finite values are rejected: durations only. */
export function addValue(sketch: DDSketch, value: number, weight = 1): void {
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`sketch values must be finite and >= 0, got ${value}`);
  if (!(Number.isInteger(weight) && weight > 0)) throw new RangeError('weight must be a positive integer');
  if (value < MIN_INDEXABLE) sketch.zeroCount += weight;
  else {
    const index = bucketIndex(sketch.relativeAccuracy, value);
    sketch.bins.set(index, (sketch.bins.get(index) ?? 0) + weight);
  }
  sketch.count += weight;
  sketch.sum += value * weight;
  if (value < sketch.min) sketch.min = value;
  if (value > sketch.max) sketch.max = value;
}

/** Adds every value of `other` into `into` (same relative accuracy required). */
export function mergeInto(into: DDSketch, other: DDSketch): DDSketch {
  if (into.relativeAccuracy !== other.relativeAccuracy) {
    throw new RangeError(`cannot merge sketches of accuracy ${into.relativeAccuracy} and ${other.relativeAccuracy}`);
  }
  for (const [index, count] of other.bins) into.bins.set(index, (into.bins.get(index) ?? 0) + count);
  into.zeroCount += other.zeroCount;
  into.count += other.count;
  into.sum += other.sum;
  if (other.min < into.min) into.min = other.min;
  if (other.max > into.max) into.max = other.max;
  return into;
}

/**
 * The q-quantile (0 ≤ q ≤ 1), with the rank convention of the paper: the value of rank
 * ⌊q · (count − 1)⌋ in sorted order, within relative error α. `undefined` for an empty sketch.
 */
export function quantile(sketch: DDSketch, q: number): number | undefined {
  if (!(q >= 0 && q <= 1)) throw new RangeError('q must be in [0, 1]');
  if (sketch.count === 0) return undefined;
  const rank = Math.floor(q * (sketch.count - 1));
  if (rank < sketch.zeroCount) return 0;
  let seen = sketch.zeroCount;
  const indices = [...sketch.bins.keys()].sort((a, b) => a - b);
  for (const index of indices) {
    seen += sketch.bins.get(index) ?? 0;
    if (seen > rank) {
      // Clamp to what was really observed: never report above max or below min.
      return Math.min(sketch.max, Math.max(sketch.min, bucketValue(sketch.relativeAccuracy, index)));
    }
  }
  return sketch.max;
}

// ---------------------------------------------------------------------------------------------
// Serialization: version, α, count, zeroCount, sum, min, max, bin count, then the bins sorted by
// index as (zig-zag delta of index, count) varints. Counts may exceed 2^32, so the varints use
// arithmetic (exact up to 2^53) instead of 32-bit bit operations.
// ---------------------------------------------------------------------------------------------

class Writer {
  private buffer = Buffer.allocUnsafe(256);
  private length = 0;
  private ensure(extra: number) {
    if (this.length + extra <= this.buffer.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buffer.length * 2, this.length + extra));
    this.buffer.copy(next, 0, 0, this.length);
    this.buffer = next;
  }
  byte(value: number) {
    this.ensure(1);
    this.buffer[this.length++] = value;
  }
  double(value: number) {
    this.ensure(8);
    this.buffer.writeDoubleLE(value, this.length);
    this.length += 8;
  }
  varint(value: number) {
    let rest = value;
    while (rest >= 0x80) {
      this.byte((rest % 0x80) | 0x80);
      rest = Math.floor(rest / 0x80);
    }
    this.byte(rest);
  }
  bytes(): Buffer {
    return this.buffer.subarray(0, this.length);
  }
}

class Reader {
  private offset = 0;
  private readonly buffer: Uint8Array;
  private readonly view: DataView;
  constructor(buffer: Uint8Array) {
    this.buffer = buffer;
    this.view = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  }
  byte(): number {
    const value = this.buffer[this.offset++];
    if (value === undefined) throw new RangeError('truncated sketch');
    return value;
  }
  double(): number {
    if (this.offset + 8 > this.buffer.length) throw new RangeError('truncated sketch');
    const value = this.view.getFloat64(this.offset, true);
    this.offset += 8;
    return value;
  }
  varint(): number {
    const buffer = this.buffer;
    let offset = this.offset;
    let value = 0;
    let scale = 1;
    for (;;) {
      if (offset >= buffer.length) throw new RangeError('truncated sketch');
      const b = buffer[offset++]!;
      value += (b & 0x7f) * scale;
      if (b < 0x80) {
        this.offset = offset;
        return value;
      }
      scale *= 0x80;
      if (scale > 2 ** 56) throw new RangeError('varint too long');
    }
  }
  done(): boolean {
    return this.offset === this.buffer.length;
  }
}

/** Reads everything before the bins; the reader is then positioned on the first bin. */
function readHeader(reader: Reader) {
  const version = reader.byte();
  if (version !== FORMAT_VERSION) throw new RangeError(`unknown sketch format ${version}`);
  return {
    relativeAccuracy: reader.double(),
    count: reader.varint(),
    zeroCount: reader.varint(),
    sum: reader.double(),
    min: reader.double(),
    max: reader.double(),
    bins: reader.varint(),
  };
}

const zigzag = (n: number) => (n >= 0 ? n * 2 : -n * 2 - 1);
const unzigzag = (n: number) => (n % 2 === 0 ? n / 2 : -(n + 1) / 2);

export function serializeSketch(sketch: DDSketch): Buffer {
  const writer = new Writer();
  writer.byte(FORMAT_VERSION);
  writer.double(sketch.relativeAccuracy);
  writer.varint(sketch.count);
  writer.varint(sketch.zeroCount);
  writer.double(sketch.sum);
  writer.double(sketch.min);
  writer.double(sketch.max);
  const indices = [...sketch.bins.keys()].sort((a, b) => a - b);
  writer.varint(indices.length);
  let previous = 0;
  for (const index of indices) {
    writer.varint(zigzag(index - previous));
    writer.varint(sketch.bins.get(index) ?? 0);
    previous = index;
  }
  return Buffer.from(writer.bytes());
}

export function deserializeSketch(bytes: Uint8Array): DDSketch {
  const reader = new Reader(bytes);
  const header = readHeader(reader);
  const sketch = createSketch(header.relativeAccuracy);
  sketch.count = header.count;
  sketch.zeroCount = header.zeroCount;
  sketch.sum = header.sum;
  sketch.min = header.min;
  sketch.max = header.max;
  let index = 0;
  let binned = 0;
  for (let i = 0; i < header.bins; i++) {
    index += unzigzag(reader.varint());
    const count = reader.varint();
    sketch.bins.set(index, count);
    binned += count;
  }
  if (!reader.done() || binned + sketch.zeroCount !== sketch.count) throw new RangeError('corrupt sketch');
  return sketch;
}

/**
 * Adds a serialised sketch into `into` without building an intermediate sketch: the KPI query
 * merges up to 142 stored sketches per call, and at high traffic each holds hundreds of bins, so
 * decoding straight into the target (one map update per bin, no per-row objects) is what keeps
 * the query's cost flat as traffic grows. Same checks as `deserializeSketch`.
 */
export function mergeSerializedInto(into: DDSketch, bytes: Uint8Array): DDSketch {
  const reader = new Reader(bytes);
  const { relativeAccuracy, count, zeroCount, sum, min, max, bins } = readHeader(reader);
  if (relativeAccuracy !== into.relativeAccuracy) throw new RangeError('cannot merge sketches of different accuracy');
  const target = into.bins;
  let index = 0;
  let binned = 0;
  for (let i = 0; i < bins; i++) {
    index += unzigzag(reader.varint());
    const c = reader.varint();
    target.set(index, (target.get(index) ?? 0) + c);
    binned += c;
  }
  if (!reader.done() || binned + zeroCount !== count) throw new RangeError('corrupt sketch');
  into.count += count;
  into.zeroCount += zeroCount;
  into.sum += sum;
  if (min < into.min) into.min = min;
  if (max > into.max) into.max = max;
  return into;
}

/**
 * `quantile(deserializeSketch(bytes), q)` without building the sketch: stored bins are already
 * sorted by index, so one pass over the bytes finds the rank (no map, no sort). The KPI series
 * uses it for windows that are exactly one stored row (p95 at daily points).
 */
export function quantileSerialized(bytes: Uint8Array, q: number): number | undefined {
  if (!(q >= 0 && q <= 1)) throw new RangeError('q must be in [0, 1]');
  const reader = new Reader(bytes);
  const { relativeAccuracy, count, zeroCount, min, max, bins } = readHeader(reader);
  if (count === 0) return undefined;
  const rank = Math.floor(q * (count - 1));
  if (rank < zeroCount) return 0;
  let seen = zeroCount;
  let index = 0;
  for (let i = 0; i < bins; i++) {
    index += unzigzag(reader.varint());
    seen += reader.varint();
    if (seen > rank) return Math.min(max, Math.max(min, bucketValue(relativeAccuracy, index)));
  }
  return max;
}
