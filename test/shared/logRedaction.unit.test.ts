import { Writable } from 'node:stream';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { LOG_REDACT_PATHS } from '../../shared/logger.ts';

/** A logger with the service's redaction, and the lines it wrote. */
function redactingLogger() {
  const written: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      written.push(chunk.toString());
      done();
    },
  });
  return { logger: pino({ redact: LOG_REDACT_PATHS }, sink), written };
}

describe('when a log line carries an employee or a login', () => {
  it('writes none of their personal fields', () => {
    const { logger, written } = redactingLogger();
    logger.info(
      {
        employee: { id: '01JNGZ0000000000000000000A', email: 'ada@example.com', firstName: 'Ada', lastName: 'Lovelace' },
        change: { email: 'new@example.com', previousEmail: 'old@example.com' },
        user: { email: 'ada@example.com', password: 'hunter22' },
      },
      'something happened',
    );
    const line = written.join('');
    for (const value of ['ada@example.com', 'Ada', 'Lovelace', 'new@example.com', 'old@example.com', 'hunter22']) {
      expect(line).not.toContain(value);
    }
    expect(line).toContain('01JNGZ0000000000000000000A');
  });

  it('writes none of them at the top of the line or nested deeper', () => {
    const { logger, written } = redactingLogger();
    logger.info({ email: 'top@example.com', firstName: 'Topfirst', lastName: 'Toplast' }, 'top level');
    logger.info({ event: { data: { email: 'two@example.com', previousEmail: 'twoold@example.com' } } }, 'two down');
    logger.info({ page: { event: { data: { firstName: 'Deepfirst', lastName: 'Deeplast' } } } }, 'three down');
    const lines = written.join('');
    for (const value of ['top@example.com', 'Topfirst', 'Toplast', 'two@example.com', 'twoold@example.com', 'Deepfirst', 'Deeplast']) {
      expect(lines).not.toContain(value);
    }
    expect(lines).toContain('three down');
  });

  it('writes none of them under their column names either (a row logged as read)', () => {
    const { logger, written } = redactingLogger();
    logger.info({ first_name: 'Rowfirst', last_name: 'Rowlast' }, 'top level');
    logger.info(
      { row: { id: '01JNGZ0000000000000000000B', email: 'row@example.com', first_name: 'Nestfirst', last_name: 'Nestlast' } },
      'a row',
    );
    const lines = written.join('');
    for (const value of ['Rowfirst', 'Rowlast', 'row@example.com', 'Nestfirst', 'Nestlast']) expect(lines).not.toContain(value);
    expect(lines).toContain('01JNGZ0000000000000000000B');
  });
});
