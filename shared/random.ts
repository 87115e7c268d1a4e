import { randomFillSync } from 'node:crypto';

/**
 * A PRNG for `ulid` (a float in [0, 1), one random byte each call, as ulid's own), drawn from
 * the system CSPRNG in blocks. ulid's default asks `crypto.getRandomValues` for ONE byte per
 * character, sixteen calls per new id, which shows in the gateway's CPU profile under the
 * create load. The bytes are the same CSPRNG's; only the calls are fewer.
 */
export function bufferedRandom(blockSize = 4_096): () => number {
  const block = new Uint8Array(blockSize);
  let next = blockSize;
  return () => {
    if (next === blockSize) {
      randomFillSync(block);
      next = 0;
    }
    return (block[next++] ?? 0) / 256;
  };
}

/**
 * Fresh random bytes from the system CSPRNG, drawn in blocks: one `randomBytes` call costs more
 * than the cipher it feeds (nonces, data keys and their ids on every hire). Each call gets its
 * own copy, and the block's copy is wiped (a data key is not left behind in it): bytes are
 * never handed out twice.
 */
export function bufferedBytes(blockSize = 4_096): (length: number) => Buffer {
  const block = Buffer.alloc(blockSize);
  let next = blockSize;
  return (length) => {
    if (length > blockSize) throw new RangeError(`at most ${blockSize} bytes at a time`);
    if (next + length > blockSize) {
      randomFillSync(block);
      next = 0;
    }
    // Its own memory (Buffer.from of a small view would share Node's pool), and wiped in the block.
    const bytes = Buffer.alloc(length);
    block.copy(bytes, 0, next, next + length);
    block.fill(0, next, next + length);
    next += length;
    return bytes;
  };
}
