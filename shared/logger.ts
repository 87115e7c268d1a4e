import pino, { type Logger } from 'pino';
import type { Config } from './config.ts';

export type { Logger };

/** Pretty, coloured lines for a person at a terminal; JSON lines for log shippers. */
export function wantsPrettyLogs(format: Config['LOG_FORMAT'], isTty = Boolean(process.stdout.isTTY)): boolean {
  return format === 'pretty' || (format === 'auto' && isTty);
}

/** One structured logger per process; request logs add `reqId`, `tenant` and `userId` as children. */
export function createLogger(config: Partial<Pick<Config, 'LOG_LEVEL' | 'LOG_FORMAT'>> & Pick<Config, 'LOG_LEVEL'>, name = 'eas'): Logger {
  const pretty = wantsPrettyLogs(config.LOG_FORMAT ?? 'auto');
  return pino({
    name,
    level: config.LOG_LEVEL,
    redact: ['req.headers.authorization', 'req.headers.cookie', '*.password', '*.refreshToken'],
    // pino-pretty runs in pino's transport thread, so formatting never blocks a request; it is
    // loaded only on a terminal.
    ...(pretty
      ? { transport: { target: 'pino-pretty', options: { colorize: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname', singleLine: true } } }
      : {}),
  });
}
