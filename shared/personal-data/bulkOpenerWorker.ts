import { createSecretKey } from 'node:crypto';
import { parentPort, workerData } from 'node:worker_threads';
import { openValue, type DataKey } from './fieldCipher.ts';
import { keyEncryptionKeysOf } from './keyEncryptionKeys.ts';
import type { OpenJob } from './bulkOpener.ts';

// The thread of bulkOpener.ts: the KEKs arrive once, as key objects; each job opens its data
// keys, then its values. A failure answers the job with the error, as opening in-thread throws.
const keks = keyEncryptionKeysOf((workerData as { keks: DataKey[] }).keks);

parentPort?.on('message', (job: OpenJob & { id: number }) => {
  try {
    const keys = job.keys.map((k): DataKey => ({ keyId: k.keyId, key: createSecretKey(keks.unwrap(k.kekId, k.sealed, k.context)) }));
    const opened = job.values.map((value, i) => {
      const key = keys[job.keyOf[i] ?? -1];
      if (!key) throw new Error(`value ${i} names no key of its job`);
      return openValue(key, value, job.places[i]);
    });
    parentPort?.postMessage({ id: job.id, opened });
  } catch (error) {
    parentPort?.postMessage({ id: job.id, error: error instanceof Error ? error.message : String(error) });
  }
});
