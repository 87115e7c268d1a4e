import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll } from 'vitest';
import { useTestEventStore, type TestDatabase } from './database.ts';
import type { DatabasePool } from '../../shared/db/pool.ts';
import type { EventStore } from '../../shared/event-store/port.ts';
import { createSealingEventStore } from '../../shared/event-store/sealing.ts';
import { createDataKeyStore, type DataKeyStore } from '../../shared/personal-data/dataKeys.ts';
import { createEmailHash } from '../../shared/personal-data/emailHash.ts';
import { createKeyEncryptionKeys, generateKekEntry, parseKeyEncryptionKeys } from '../../shared/personal-data/keyEncryptionKeys.ts';
import { employeePersonalData } from '../../services/employees/contract.ts';

/**
 * The keys of this test process, in the form the configuration takes them: a child process (an
 * ops command) given these variables hashes and opens exactly as the test does.
 */
export const testPersonalDataEnv = { KEY_ENCRYPTION_KEY: generateKekEntry(), EMAIL_HASH_KEY: randomBytes(32).toString('base64') };

export const testEmailHash = createEmailHash(Buffer.from(testPersonalDataEnv.EMAIL_HASH_KEY, 'base64'));

export const testKeyEncryptionKeys = createKeyEncryptionKeys(parseKeyEncryptionKeys(testPersonalDataEnv.KEY_ENCRYPTION_KEY));

/** `store`, closing the key store's own connection with it, as the composition root closes both. */
export const closingKeysToo = (store: EventStore, keys: DataKeyStore): EventStore => ({
  ...store,
  close: async () => (await store.close(), await keys.close?.()),
});

/** `inner` behind the sealing boundary the composition root puts it behind (services/runtime.ts). */
export function sealedEventStore(inner: EventStore, pool: DatabasePool): { readonly store: EventStore; readonly keys: DataKeyStore } {
  const keys = createDataKeyStore(pool, testKeyEncryptionKeys, { asynchronousCommit: true });
  return { store: closingKeysToo(createSealingEventStore(inner, { keys, policy: employeePersonalData }), keys), keys };
}

/**
 * `useTestEventStore`'s database and log, behind the sealing boundary, for the enclosing
 * `describe` (registers its own beforeAll/afterAll). Read its fields inside tests and hooks.
 */
export function useSealedTestEventStore(): { readonly db: TestDatabase; readonly store: EventStore; readonly keys: DataKeyStore } {
  const log = useTestEventStore();
  let sealed: { readonly store: EventStore; readonly keys: DataKeyStore } | undefined;
  beforeAll(() => {
    sealed = sealedEventStore(log.store, log.db.pool);
  });
  // The log closes with its own hook; the key store's connection is this one's.
  afterAll(async () => {
    await sealed?.keys.close?.();
  });
  const ready = () => {
    if (!sealed) throw new Error('useSealedTestEventStore: used before its beforeAll ran');
    return sealed;
  };
  return {
    get db() {
      return log.db;
    },
    get store() {
      return ready().store;
    },
    get keys() {
      return ready().keys;
    },
  };
}
