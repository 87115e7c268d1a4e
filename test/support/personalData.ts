import { randomBytes } from 'node:crypto';
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
