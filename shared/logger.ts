import pino, { type Logger } from 'pino';
import type { Config } from './config.ts';

export type { Logger };

/** One structured logger per process; request logs add `requestId` and `tenant` as children. */
export function createLogger(config: Pick<Config, 'LOG_LEVEL'>, name = 'eas'): Logger {
  return pino({
    name,
    level: config.LOG_LEVEL,
    redact: ['req.headers.authorization', 'req.headers.cookie', '*.password', '*.refreshToken'],
  });
}
