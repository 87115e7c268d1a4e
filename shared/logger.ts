import pino, { type Logger } from 'pino';
import type { Config } from './config.ts';
import { errorForLog, requestForLog } from './logSerializers.ts';

export type { Logger };

/** Pretty, coloured lines for a person at a terminal; JSON lines for log shippers. */
export function wantsPrettyLogs(format: Config['LOG_FORMAT'], isTty = Boolean(process.stdout.isTTY)): boolean {
  return format === 'pretty' || (format === 'auto' && isTty);
}

/**
 * The personal fields of an employee or a login, wherever a logged object carries them: as the
 * API and events name them, and as their table columns do (a row logged as read).
 */
const PERSONAL_LOG_FIELDS = ['email', 'previousEmail', 'firstName', 'lastName', 'first_name', 'last_name'];

/** Nesting levels below the line's own fields that redaction reaches (`{ a: { b: { c: { email } } } }`). */
const REDACT_DEPTH = 3;

/**
 * Paths pino replaces with `[Redacted]`: credentials, and the personal fields of an employee or a
 * login at the top of a line (`log.info({ email })`) and up to REDACT_DEPTH objects down
 * (`{ employee: { email } }`, `{ event: { data: { email } } }`), so that a line written with such
 * an object in it still names nobody. Paths rather than a serializer: pino compiles them once and
 * redacts without walking objects that hold none. Request logs carry no bodies in the first place.
 */
export const LOG_REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  '*.password',
  '*.refreshToken',
  ...PERSONAL_LOG_FIELDS.flatMap((field) =>
    Array.from({ length: REDACT_DEPTH + 1 }, (_, depth) => [...Array<string>(depth).fill('*'), field].join('.')),
  ),
];

/**
 * How a line writes a request (`req`: Fastify's `incoming request`) and an error (`err`): neither
 * with what a client or a database said of a person (logSerializers.ts). They take precedence
 * over Fastify's own.
 */
const LOG_SERIALIZERS = { req: requestForLog, err: errorForLog };

/**
 * One structured logger per process; request logs add `reqId`, `tenant` and `userId` as children.
 * `destination`: where JSON lines go instead of stdout (a test reading them).
 */
export function createLogger(
  config: Partial<Pick<Config, 'LOG_LEVEL' | 'LOG_FORMAT'>> & Pick<Config, 'LOG_LEVEL'>,
  name = 'eas',
  destination?: pino.DestinationStream,
): Logger {
  const options: pino.LoggerOptions = { name, level: config.LOG_LEVEL, redact: LOG_REDACT_PATHS, serializers: LOG_SERIALIZERS };
  if (destination) return pino(options, destination);
  // pino-pretty runs in pino's transport thread, so formatting never blocks a request; it is
  // loaded only on a terminal.
  if (!wantsPrettyLogs(config.LOG_FORMAT ?? 'auto')) return pino(options);
  return pino({
    ...options,
    transport: {
      target: 'pino-pretty',
      options: { colorize: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname', singleLine: true },
    },
  });
}

type Bindings = Record<string, unknown>;
type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/** What a request's logger must offer (Fastify's FastifyBaseLogger, in pino's terms). */
export type ChildLogger = Pick<Logger, 'level' | LogLevel | 'silent' | 'isLevelEnabled'> & {
  child(bindings: Bindings, options?: pino.ChildLoggerOptions): ChildLogger;
};

/**
 * `parent.child(bindings)`, made on the first line that is actually written. pino serialises a
 * child's bindings when the child is made; the gateway makes two per request (the request id,
 * then tenant and user), a cost that shows in its CPU profile under load even at a level that
 * writes nothing. Lines that are written are the child's own, bindings and all.
 * Children of this one merge their bindings and stay lazy; options (a level, serializers) make
 * a real child at once.
 */
export function lazyChild(parent: Logger, bindings: Bindings): ChildLogger {
  return new LazyChild(parent, bindings) as unknown as ChildLogger;
}

/**
 * One object per request, its methods on the prototype (closures per request would give back much of what the laziness saves);
 * `fatal` … `trace` are added to the prototype below.
 */
class LazyChild {
  readonly #parent: Logger;
  readonly #bindings: Bindings;
  #real: Logger | undefined;

  constructor(parent: Logger, bindings: Bindings) {
    this.#parent = parent;
    this.#bindings = bindings;
  }

  #materialized(): Logger {
    return (this.#real ??= this.#parent.child(this.#bindings));
  }

  /** A line at `level` (the level methods below call it). */
  write(level: LogLevel, args: unknown[]): void {
    if (!this.#real && !this.#parent.isLevelEnabled(level)) return;
    (this.#materialized()[level] as (...written: unknown[]) => void)(...args);
  }

  get level(): string {
    return (this.#real ?? this.#parent).level;
  }

  set level(level: string) {
    this.#materialized().level = level;
  }

  silent() {}

  isLevelEnabled(level: string): boolean {
    return (this.#real ?? this.#parent).isLevelEnabled(level);
  }

  child(more: Bindings, options?: pino.ChildLoggerOptions): ChildLogger {
    if (this.#real || options) return this.#materialized().child(more, options);
    return lazyChild(this.#parent, { ...this.#bindings, ...more });
  }
}

for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const) {
  Object.defineProperty(LazyChild.prototype, level, {
    value(this: LazyChild, ...args: unknown[]) {
      this.write(level, args);
    },
  });
}
