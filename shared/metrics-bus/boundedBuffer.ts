/**
 * FIFO with a fixed capacity that drops the OLDEST entries when full: under back-pressure the
 * freshest samples are the valuable ones. O(1) push and shift (array with a moving head).
 */
export class BoundedBuffer<T> {
  private items: (T | undefined)[] = [];
  private head = 0;

  readonly capacity: number;
  constructor(capacity: number) {
    this.capacity = capacity;
    if (!(Number.isInteger(capacity) && capacity > 0)) throw new RangeError('capacity must be a positive integer');
  }

  get size(): number {
    return this.items.length - this.head;
  }

  /** The smallest `key` over the entries held (O(n); for rare watermark reads), or undefined when empty. */
  peekMin(key: (item: T) => number): number | undefined {
    let min: number | undefined;
    for (let i = this.head; i < this.items.length; i++) {
      const value = key(this.items[i] as T);
      if (min === undefined || value < min) min = value;
    }
    return min;
  }

  /** Appends; returns how many old entries were dropped to make room (0 or 1). */
  push(item: T): number {
    this.items.push(item);
    return this.trim();
  }

  /** Takes up to `max` entries from the front. */
  take(max: number): T[] {
    const end = Math.min(this.items.length, this.head + max);
    const taken = this.items.slice(this.head, end) as T[];
    this.items.fill(undefined, this.head, end);
    this.head = end;
    if (this.head > 1_024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return taken;
  }

  /** Puts entries back at the front (a failed send); returns how many oldest entries were dropped. */
  requeue(items: readonly T[]): number {
    this.items = [...items, ...this.items.slice(this.head)];
    this.head = 0;
    return this.trim();
  }

  private trim(): number {
    const excess = this.size - this.capacity;
    if (excess <= 0) return 0;
    this.take(excess);
    return excess;
  }
}
