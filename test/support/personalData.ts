import { randomBytes } from 'node:crypto';
import type { DatabasePool } from '../../shared/db/pool.ts';
import type { EventStore } from '../../shared/event-store/port.ts';
import { createSealingEventStore } from '../../shared/event-store/sealing.ts';
import { createDataKeyStore, type DataKeyStore } from '../../shared/personal-data/dataKeys.ts';
import { createEmailHash } from '../../shared/personal-data/emailHash.ts';
import { createKeyEncryptionKeys, generateKekEntry, parseKeyEncryptionKeys } from '../../shared/personal-data/keyEncryptionKeys.ts';
import { employeePersonalData } from '../../services/employees/contract.ts';

/** The e-mail hash of the test processes (one key for the whole run, as one deployment has). */
export const testEmailHash = createEmailHash(randomBytes(32));

/** The key-encryption keys of this test process. */
export const testKeyEncryptionKeys = createKeyEncryptionKeys(parseKeyEncryptionKeys(generateKekEntry()));

/** `inner` behind the sealing boundary the composition root puts it behind (services/runtime.ts). */
export function sealedEventStore(inner: EventStore, pool: DatabasePool): { readonly store: EventStore; readonly keys: DataKeyStore } {
  const keys = createDataKeyStore(pool, testKeyEncryptionKeys, { asynchronousCommit: true });
  return { store: createSealingEventStore(inner, { keys, policy: employeePersonalData }), keys };
}
