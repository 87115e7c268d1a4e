import type { DatabasePool } from '../../shared/db/pool.ts';
import { createDataKeyStore, type DataKeyStore } from '../../shared/personal-data/dataKeys.ts';
import { testKeyEncryptionKeys } from './personalData.ts';

/** A data-key store on the test database, under the test process's key-encryption keys (what an erasure destroys keys in). */
export const testDataKeys = (pool: DatabasePool): DataKeyStore => createDataKeyStore(pool, testKeyEncryptionKeys);
