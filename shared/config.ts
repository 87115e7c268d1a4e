import { z } from 'zod';
import { isIP } from 'node:net';
import { isAllowHostEntry } from './allowHosts.ts';
import { parseKeyEncryptionKeys } from './personal-data/keyEncryptionKeys.ts';

/**
 * The one place that reads the environment. Every variable is validated here; a bad value
 * stops start-up with a message that names the variable (see `loadConfig`).
 */
const url = (protocols: readonly string[]) =>
  z
    .string()
    .trim()
    .min(1)
    .refine(
      (v) => {
        try {
          return protocols.includes(new URL(v).protocol.replace(/:$/, ''));
        } catch {
          return false;
        }
      },
      `must be a URL with scheme ${protocols.join(' or ')}`,
    );

const emptyAsUndefined = (v: unknown) => (typeof v === 'string' && v.trim() === '' ? undefined : v);

const optional = <T extends z.ZodType>(schema: T) => z.preprocess(emptyAsUndefined, schema.optional());

const boolish = z.enum(['true', 'false', '1', '0', 'yes', 'no']).transform((v) => v === 'true' || v === '1' || v === 'yes');

/** Names proxy-addr knows for ranges of proxy addresses. */
const PROXY_RANGES = ['loopback', 'linklocal', 'uniquelocal'];

const isProxyAddress = (entry: string) =>
  PROXY_RANGES.includes(entry) || (isIP(entry.split('/')[0] ?? '') !== 0 && isAllowHostEntry(entry));

function parseTrustProxy(value: string, ctx: z.RefinementCtx): number | string | false {
  const v = value.trim();
  if (v === 'false') return false;
  if (/^\d+$/.test(v) && Number(v) >= 1) return Number(v);
  const entries = v.split(',').map((e) => e.trim().toLowerCase());
  if (v !== 'true' && entries.every(isProxyAddress)) return entries.join(',');
  ctx.addIssue({
    code: 'custom',
    message:
      v === 'true'
        ? "true would believe any client-written X-Forwarded-For entry: set the hop count (the number of proxies in front of the service, e.g. 1) or the proxies' addresses/CIDRs"
        : 'must be a hop count (the number of proxies in front of the service, ≥ 1) or comma-separated proxy addresses/CIDRs',
  });
  return z.NEVER;
}

export const configSchema = z.object({
  NODE_ENV: z.enum(['development', 'test', 'production']).default('development'),
  PORT: z.coerce.number().int().min(0).max(65535).default(3000),
  HOST: z.string().min(1).default('127.0.0.1'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** auto: coloured one-line logs when stdout is a terminal, JSON lines otherwise. */
  LOG_FORMAT: z.enum(['auto', 'pretty', 'json']).default('auto'),
  /** Where the embedded PostgreSQL keeps its data and where generated keys live. */
  DATA_DIR: z.string().min(1).default('./.data'),
  DATABASE_URL: optional(url(['postgres', 'postgresql'])),
  /** Port the embedded PostgreSQL listens on (only without DATABASE_URL). */
  EMBEDDED_PG_PORT: z.coerce.number().int().min(1).max(65535).default(54329),
  EVENTSTORE_URL: optional(url(['esdb', 'esdb+discover', 'kurrentdb', 'kurrentdb+discover', 'kurrent', 'kurrent+discover'])),
  KAFKA_BROKERS: optional(
    z
      .string()
      .transform((v) =>
        v
          .split(',')
          .map((b) => b.trim())
          .filter(Boolean),
      )
      .pipe(z.array(z.string().regex(/^[^:\s]+:\d+$/, 'each broker must be host:port')).min(1)),
  ),
  KAFKA_METRICS_TOPIC: z.string().min(1).default('usage-samples'),
  REDIS_URL: optional(url(['redis', 'rediss'])),
  /** Key prefix of the BullMQ queues (replays, KPI rollups); one per deployment sharing a Redis. */
  QUEUE_PREFIX: z
    .string()
    .min(1)
    .regex(/^[A-Za-z0-9_.-]+$/)
    .default('eas'),
  /**
   * Which proxies to believe about the client address (Fastify `trustProxy`): the number of
   * proxies in front of the service (hops), or their comma-separated addresses/CIDRs. Set it
   * behind a load balancer: login and refresh bounds are per client address, and without it
   * every client looks like the balancer. `true` is refused: it believes the leftmost
   * X-Forwarded-For entry, which the client writes, so a client could pick its own address.
   */
  TRUST_PROXY: optional(z.string().transform(parseTrustProxy)),
  /** Largest accepted request body in bytes. */
  BODY_LIMIT_BYTES: z.coerce.number().int().min(1024).default(1_048_576),
  /** How long graceful shutdown may take before the process exits anyway. */
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(0).default(10_000),
  RATE_LIMIT_FAIL_OPEN: z.preprocess(emptyAsUndefined, boolish.optional()).transform((v) => v ?? true),
  JWT_ISSUER: z.string().min(1).default('employee-analytics-service'),
  JWT_AUDIENCE: z.string().min(1).default('employee-analytics-api'),
  /** JSON array of private JWKs (Ed25519, with `kid`); first signs, all verify. Generated under DATA_DIR when unset. */
  JWT_PRIVATE_JWKS: optional(z.string()),
  /**
   * Webhook targets the SSRF guard lets through (comma-separated host names, IP addresses or CIDR
   * ranges): plain http and loopback/private addresses are allowed for what it names.
   */
  WEBHOOK_ALLOW_HOSTS: z
    .string()
    .default('')
    .transform((v) =>
      v
        .split(',')
        .map((h) => h.trim().toLowerCase())
        .filter(Boolean),
    )
    .pipe(z.array(z.string().refine(isAllowHostEntry, 'each entry must be a host name, an IP address or a CIDR range'))),
  /** Base64 of 32 random bytes sealing webhook signing secrets; unset: generated under DATA_DIR. */
  WEBHOOK_SECRETS_KEY: optional(z.base64().refine((v) => Buffer.from(v, 'base64').length === 32, 'must be base64 of 32 bytes')),
  /** Earlier WEBHOOK_SECRETS_KEY values, comma-separated: secrets sealed under them still open (a key rotation). */
  WEBHOOK_SECRETS_OLD_KEYS: z
    .string()
    .default('')
    .transform((v) =>
      v
        .split(',')
        .map((k) => k.trim())
        .filter(Boolean),
    )
    .pipe(z.array(z.base64().refine((v) => Buffer.from(v, 'base64').length === 32, 'each must be base64 of 32 bytes'))),
  /**
   * Key-encryption keys sealing the per-employee data keys: `<id>:<base64 of 32 bytes>`, comma-
   * separated, the first sealing, all opening (a lone base64 value is one key); unset: generated
   * under DATA_DIR. Every process must share them (docs/privacy.md, rotation).
   */
  KEY_ENCRYPTION_KEY: optional(
    z.string().refine((v) => {
      try {
        parseKeyEncryptionKeys(v);
        return true;
      } catch {
        return false;
      }
    }, 'must be <id>:<base64 of 32 bytes> entries, comma-separated, distinct ids'),
  ),
  /** Base64 of 32 random bytes keying the e-mail uniqueness hash; unset: generated under DATA_DIR. Never changed once used. */
  EMAIL_HASH_KEY: optional(z.base64().refine((v) => Buffer.from(v, 'base64').length === 32, 'must be base64 of 32 bytes')),
  /** Retry delays in ms, comma-separated (default ≈ 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 1 d, 1 d). */
  WEBHOOK_RETRY_SCHEDULE_MS: optional(
    z
      .string()
      .transform((v) => v.split(',').map((d) => (/^\s*\d+\s*$/.test(d) ? Number(d) : Number.NaN)))
      .pipe(
        z
          .array(
            z
              .number()
              .int()
              .min(0)
              .max(7 * 86_400_000),
          )
          .min(1)
          .max(50),
      ),
  ),
  /** How long the delivery log (`GET /v1/webhooks/{id}/deliveries`) keeps an entry after its last attempt. */
  WEBHOOK_DELIVERY_RETENTION_DAYS: z.coerce.number().int().min(1).max(3650).default(30),
  /** Per delivery attempt. */
  WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(100).max(60_000).default(15_000),
  /** Webhook deliveries in flight at once for one tenant, across every worker: its share of the delivery slots. */
  WEBHOOK_TENANT_CONCURRENCY: z.coerce.number().int().min(1).max(1_000).default(4),
  BOOTSTRAP_TENANT: optional(z.string().regex(/^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/)),
  BOOTSTRAP_PLAN: z.preprocess(emptyAsUndefined, z.enum(['starter', 'pro', 'enterprise']).default('starter')),
  BOOTSTRAP_ADMIN_EMAIL: optional(z.email()),
  BOOTSTRAP_ADMIN_PASSWORD: optional(z.string().min(8)),
});

export type Config = z.infer<typeof configSchema>;

export class ConfigError extends Error {
  readonly issues: readonly string[];
  constructor(issues: readonly string[]) {
    super(`Invalid configuration:\n${issues.map((i) => `  - ${i}`).join('\n')}`);
    this.name = 'ConfigError';
    this.issues = issues;
  }
}

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const parsed = configSchema.safeParse(env);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((issue) => `${issue.path.join('.') || '(env)'}: ${issue.message}`));
  }
  const config = parsed.data;
  const bootstrap = [config.BOOTSTRAP_TENANT, config.BOOTSTRAP_ADMIN_EMAIL, config.BOOTSTRAP_ADMIN_PASSWORD];
  if (bootstrap.some((v) => v !== undefined) && bootstrap.some((v) => v === undefined)) {
    throw new ConfigError(['BOOTSTRAP_TENANT, BOOTSTRAP_ADMIN_EMAIL and BOOTSTRAP_ADMIN_PASSWORD must be set together']);
  }
  return config;
}
