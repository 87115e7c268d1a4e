import { Writable } from 'node:stream';
import type pino from 'pino';
import type { Config } from '../../shared/config.ts';
import { createLogger } from '../../shared/logger.ts';

/** One JSON log line as pino writes it. */
export type LogLine = Record<string, unknown> & { msg?: string };

/** The service's logger (its redaction and serializers) at `level`, its lines parsed into `lines` as they are written. */
export function createMemoryLogger(level: Config['LOG_LEVEL']): { logger: pino.Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const text of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(text) as LogLine);
      done();
    },
  });
  return { logger: createLogger({ LOG_LEVEL: level }, 'test', sink), lines };
}
