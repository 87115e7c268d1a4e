import pg from 'pg';
import { pgTypeParsers } from './pool.ts';

/**
 * One plain pg connection in pipeline mode (each statement is sent without waiting for the one
 * before), for the two hot paths where slonik's per-query work and its pool's round trips
 * showed in profiles: the projector's page transaction (shared/projections/pagePipeline.ts) and
 * the event store's group-commit flush (shared/event-store/postgres/flush.ts).
 *
 * It is opened on first use and again after pg reports it closed or broken; a caller that finds
 * it in a state it cannot trust drops it. Types are parsed as in the main pool
 * (`pgTypeParsers`). The connection string's own settings are kept; the statement and
 * idle-in-transaction timeouts, the application name and any `settings` are added.
 */
export type PlainConnection = {
  /** The open connection, opening one if there is none. */
  get(): Promise<pg.Client>;
  /** Closes `client`; the next `get` opens a new connection. */
  drop(client: pg.Client): void;
  /** Whether pg has reported `client` closed or broken. */
  isLost(client: pg.Client): boolean;
  /**
   * One statement, its own transaction. PostgreSQL's refusal (57P01 for a terminated backend
   * included) is passed on as it is; any other failure drops the connection and fails as a lost
   * connection (08006), as does failing to open one: whether it committed is unknown. `who`
   * names the caller in those errors.
   */
  run(config: pg.QueryConfig, who: string): Promise<pg.QueryResult>;
  end(): Promise<void>;
};

/**
 * Whether a statement's failure leaves its connection unusable: anything but PostgreSQL refusing
 * the statement (a socket closed or broken, a value pg could not send), and PostgreSQL ending the
 * session (FATAL or PANIC, e.g. 57P01 from `pg_terminate_backend`), which the statement hears
 * before pg sees the socket close.
 */
export function breaksConnection(error: unknown): boolean {
  return !(error instanceof pg.DatabaseError) || error.severity === 'FATAL' || error.severity === 'PANIC';
}

/**
 * The error of work whose connection was lost: SQLSTATE 08006, which callers treat as transient,
 * and whose outcome (did it commit?) is unknown.
 */
export function connectionLostError(message: string, cause: unknown): Error & { readonly code: '08006' } {
  return Object.assign(new Error(message, { cause }), { code: '08006' as const });
}

export type PlainConnectionOptions = {
  readonly applicationName: string;
  readonly statementTimeoutMs?: number;
  /** More session settings (`-c name=value`), e.g. `{ synchronous_commit: 'off' }`. */
  readonly settings?: Readonly<Record<string, string>>;
};

export function createPlainConnection(url: string, options: PlainConnectionOptions): PlainConnection {
  let client: pg.Client | undefined;
  let connecting: Promise<pg.Client> | undefined;
  let ended = false;
  const lost = new WeakSet<pg.Client>();
  // A URL parameter would otherwise override the client's options.
  const connectionString = (() => {
    const parsed = new URL(url);
    const settings = {
      statement_timeout: String(options.statementTimeoutMs ?? 30_000),
      idle_in_transaction_session_timeout: '60000',
      ...options.settings,
    };
    const ours = Object.entries(settings)
      .map(([name, value]) => `-c ${name}=${value}`)
      .join(' ');
    parsed.searchParams.set('options', [parsed.searchParams.get('options'), ours].filter(Boolean).join(' '));
    parsed.searchParams.set('application_name', options.applicationName);
    return parsed.toString();
  })();

  const drop = (dropped: pg.Client) => {
    if (client === dropped) client = undefined;
    dropped.end().catch(() => undefined);
  };

  const connection: PlainConnection = {
    get() {
      if (client) return Promise.resolve(client);
      connecting ??= (async () => {
        // As slonik's pool: a server that does not answer fails the connect after 5 s instead of
        // holding its caller for as long as the OS retries; keep-alive finds a half-open socket.
        const fresh = new pg.Client({
          connectionString,
          pipeline: true,
          connectionTimeoutMillis: 5_000,
          keepAlive: true,
          types: pgTypeParsers(pg.types) as pg.CustomTypesConfig,
        });
        // Lost (while idle or mid-statement): the next `get` reconnects.
        const onLost = () => {
          lost.add(fresh);
          drop(fresh);
        };
        fresh.on('error', onLost);
        fresh.on('end', onLost);
        try {
          await fresh.connect();
        } catch (error) {
          fresh.end().catch(() => undefined);
          throw error;
        }
        if (ended) {
          drop(fresh);
          throw new Error(`${options.applicationName}: connection ended`);
        }
        client = fresh;
        return fresh;
      })().finally(() => {
        connecting = undefined;
      });
      return connecting;
    },
    drop,
    isLost: (c) => lost.has(c),
    async run(config, who) {
      const open = await connection.get().catch((error: unknown) => {
        throw connectionLostError(`${who}: could not open the connection`, error);
      });
      try {
        return await open.query(config);
      } catch (error) {
        if (breaksConnection(error)) drop(open);
        if (error instanceof pg.DatabaseError) throw error;
        throw connectionLostError(`${who}: the connection was lost`, error);
      }
    },
    async end() {
      ended = true;
      const open = client ?? (await connecting?.catch(() => undefined));
      if (open) {
        client = undefined;
        await open.end().catch(() => undefined);
      }
    },
  };
  return connection;
}
