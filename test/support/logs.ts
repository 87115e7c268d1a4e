import { Writable } from 'node:stream';
import pino from 'pino';

/** One JSON log line as pino writes it. */
export type LogLine = Record<string, unknown> & { msg?: string };

/** A pino logger at `level` whose lines are parsed into `lines` as they are written. */
export function createMemoryLogger(level: pino.LevelWithSilent): { logger: pino.Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const text of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(text) as LogLine);
      done();
    },
  });
  return { logger: pino({ level }, sink), lines };
}
