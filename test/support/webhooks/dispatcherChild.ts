/**
 * A webhook worker in a process of its own, for the lease-takeover test: a dispatcher on the
 * test's database and Redis, with a 60-s delivery timeout (so a 90-s lease), printing `ready`
 * once it runs. The parent kills it with SIGKILL while a delivery is in flight.
 *
 *   DATABASE_URL=… REDIS_URL=… QUEUE_PREFIX=… SECRETS_KEY=<hex> node test/support/webhooks/dispatcherChild.ts
 */
import { createDatabasePool } from '../../../shared/db/pool.ts';
import { startWebhookDispatcher } from '../../../services/webhooks/dispatcher.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';

const { DATABASE_URL: databaseUrl, REDIS_URL: redisUrl, QUEUE_PREFIX: prefix, SECRETS_KEY: key } = process.env;
if (!databaseUrl || !redisUrl || !prefix || !key) throw new Error('DATABASE_URL, REDIS_URL, QUEUE_PREFIX and SECRETS_KEY are required');
const pool = await createDatabasePool(databaseUrl, { maximumPoolSize: 4 });
await startWebhookDispatcher({
  pool,
  databaseUrl,
  redisUrl,
  prefix,
  secrets: createSecretBox(Buffer.from(key, 'hex')),
  targets: { allowHosts: ['127.0.0.1'] },
  timeoutMs: 60_000,
  sweepEveryMs: 200,
});
process.stdout.write('ready\n');
