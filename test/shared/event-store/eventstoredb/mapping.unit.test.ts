import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ANY, NO_STREAM, START as ESDB_START, STREAM_EXISTS, WrongExpectedVersionError } from '@kurrent/kurrentdb-client';
import { WrongExpectedRevisionError } from '../../../../shared/errors.ts';
import {
  eventTypesRegex,
  toReadPosition,
  toStreamState,
  toWrongExpectedRevision,
} from '../../../../shared/event-store/eventstoredb/mapping.ts';
import { START } from '../../../../shared/event-store/port.ts';

describe('EventStoreDB adapter mappings', () => {
  describe('when mapping an expected revision', () => {
    it('maps each keyword to the client constant and a number to the exact BigInt revision', () => {
      expect(toStreamState('any')).toBe(ANY);
      expect(toStreamState('no_stream')).toBe(NO_STREAM);
      expect(toStreamState('stream_exists')).toBe(STREAM_EXISTS);
      fc.assert(fc.property(fc.nat(), (n) => toStreamState(n) === BigInt(n)));
    });

    it('refuses a revision that is not a non-negative safe integer', () => {
      for (const bad of [-1, 1.5, Number.MAX_SAFE_INTEGER + 1]) expect(() => toStreamState(bad)).toThrow(RangeError);
    });
  });

  describe('when the server refuses an append', () => {
    const refusal = (current: bigint | typeof NO_STREAM) =>
      new WrongExpectedVersionError(undefined, { streamName: 's-1', expected: 3n, current });

    it('becomes our WrongExpectedRevisionError with the actual revision', () => {
      const error = toWrongExpectedRevision(refusal(7n), 's-1', 3);
      expect(error).toBeInstanceOf(WrongExpectedRevisionError);
      expect(error).toMatchObject({ streamId: 's-1', expected: '3', actual: 7 });
    });

    it('reports a missing or deleted stream as no_stream', () => {
      expect(toWrongExpectedRevision(refusal(NO_STREAM), 's-1', 'stream_exists').actual).toBe('no_stream');
      expect(toWrongExpectedRevision(refusal(-5n), 's-1', 0).actual).toBe('no_stream');
    });
  });

  describe('when filtering by event type', () => {
    it('matches exactly the listed types, whatever characters they hold', () => {
      fc.assert(
        fc.property(
          fc.uniqueArray(fc.string({ minLength: 1, maxLength: 12 }), { minLength: 1, maxLength: 5 }),
          fc.string({ maxLength: 12 }),
          (types, other) => {
            const regex = new RegExp(eventTypesRegex(types));
            for (const type of types) expect(regex.test(type)).toBe(true);
            expect(regex.test(other)).toBe(types.includes(other));
            expect(regex.test(`${types[0]}x`)).toBe(types.includes(`${types[0]}x`));
          },
        ),
      );
    });
  });

  describe('when mapping a position', () => {
    it('reads from the start for START and from the same commit/prepare pair otherwise', () => {
      expect(toReadPosition(START)).toBe(ESDB_START);
      expect(toReadPosition({ commit: 42n, prepare: 40n })).toEqual({ commit: 42n, prepare: 40n });
    });
  });
});
