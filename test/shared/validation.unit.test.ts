import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { dateOrInstant, ifMatchHeader, instant, isStorableText, printableText, safeText, storableText } from '../../shared/validation.ts';

const hasNul = (s: string) => s.includes('\u0000');
const hasLoneSurrogate = (s: string) => {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
      else return true;
    } else if (c >= 0xdc00 && c <= 0xdfff) return true;
  }
  return false;
};

describe('safeText', () => {
  it('accepts exactly the strings without NUL or lone surrogates, up to the maximum length', () => {
    const schema = safeText(20);
    fc.assert(
      // Full code-point range, plus strings built from the interesting pieces so NUL and
      // unpaired halves come up often.
      fc.property(
        fc.oneof(
          fc.string({ unit: 'binary', maxLength: 30 }),
          fc.array(fc.constantFrom('\u0000', '\uD83D', '\uDE00', '😀', 'a', ' '), { maxLength: 25 }).map((parts) => parts.join('')),
        ),
        (s) => {
          const expected = !hasNul(s) && !hasLoneSurrogate(s) && s.length <= 20;
          expect(schema.safeParse(s).success).toBe(expected);
          expect(isStorableText(s)).toBe(!hasNul(s) && !hasLoneSurrogate(s));
        },
      ),
      { seed: 9, numRuns: 2_000 },
    );
  });

  it('keeps valid surrogate pairs (emoji) and trims before counting when asked', () => {
    expect(safeText(4).safeParse('😀😀').success).toBe(true);
    expect(safeText(3, { trim: true, min: 1 }).parse('  abc  ')).toBe('abc');
    expect(safeText(3, { trim: true, min: 1 }).safeParse('   ').success).toBe(false);
  });
});

describe('printableText', () => {
  it('accepts provider ids and refuses control characters', () => {
    expect(printableText(255).safeParse('evt_1NG8Du2eZvKYlo2CKhYsGfmN').success).toBe(true);
    for (const bad of ['', 'a\u0007b', 'a\u007f', 'a\u0085', 'x'.repeat(256), 'a\u0000'])
      expect(printableText(255).safeParse(bad).success).toBe(false);
  });
});

describe('instant', () => {
  it('accepts the edges of 1970–9999 and refuses what normalises outside', () => {
    const schema = instant();
    expect(schema.parse('1970-01-01T00:00:00Z')).toBe('1970-01-01T00:00:00.000Z');
    expect(schema.parse('9999-12-31T23:59:59.999Z')).toBe('9999-12-31T23:59:59.999Z');
    expect(schema.parse('1970-01-01T05:30:00+05:30')).toBe('1970-01-01T00:00:00.000Z');
    for (const bad of [
      '1969-12-31T23:59:59.999Z',
      '9999-12-31T23:00:00-05:00',
      '0000-06-01T00:00:00Z',
      '1970-01-01T00:00:00+00:01',
      '2024-02-30T00:00:00Z',
      '2024-05-01T00:00:00',
      `2024-05-01T00:00:00.${'1'.repeat(40)}Z`,
    ]) {
      expect(schema.safeParse(bad).success, bad).toBe(false);
    }
  });

  it('answers every accepted instant as the same UTC millisecond, in range', () => {
    const schema = instant({ minYear: 1900 });
    const offset = fc.oneof(
      fc.constant('Z'),
      fc
        .tuple(fc.constantFrom('+', '-'), fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 }))
        .map(([sign, h, m]) => `${sign}${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}`),
    );
    fc.assert(
      fc.property(
        fc.date({ min: new Date('1899-12-30T00:00:00Z'), max: new Date('9999-12-31T23:59:59.999Z'), noInvalidDate: true }),
        offset,
        (date, off) => {
          const text = `${date.toISOString().slice(0, 23)}${off}`;
          const result = schema.safeParse(text);
          const ms = Date.parse(text);
          const year = new Date(ms).getUTCFullYear();
          expect(result.success).toBe(year >= 1900 && year <= 9999);
          if (result.success) expect(Date.parse(result.data)).toBe(ms);
        },
      ),
      { seed: 45, numRuns: 2_000 },
    );
  });
});

describe('dateOrInstant', () => {
  it('takes dates and date-times in range, refuses impossible dates and other years', () => {
    const schema = dateOrInstant({ minYear: 1900 });
    expect(schema.parse('1900-01-01')).toEqual({ at: '1900-01-01T00:00:00.000Z', dateOnly: true });
    expect(schema.parse('2024-05-01T09:00:00+02:00')).toEqual({ at: '2024-05-01T07:00:00.000Z', dateOnly: false });
    for (const bad of ['1899-12-31', '2023-02-29', '0045-03-01', '10000-01-01', '2024-5-1', ''])
      expect(schema.safeParse(bad).success, bad).toBe(false);
  });
});

describe('ifMatchHeader', () => {
  it('takes * and entity tags, refuses anything else', () => {
    for (const good of ['*', '"3"', 'W/"3"', '"1", "2"', ' "0" ']) expect(ifMatchHeader().safeParse(good).success, good).toBe(true);
    for (const bad of ['3', '"3', 'W/3', '"a"b"', '"\u0000"', `"${'9'.repeat(300)}"`])
      expect(ifMatchHeader().safeParse(bad).success, bad).toBe(false);
  });
});

const MAX = 500;

describe('storableText, for text the service records but does not control', () => {
  it('never splits a surrogate pair: the cut drops the half that would be left alone', () => {
    const text = `${'x'.repeat(MAX - 1)}😀 and more`; // the emoji's high half is the 500th code unit
    const cut = storableText(text, MAX);
    expect(cut).toBe('x'.repeat(MAX - 1));
    expect(isStorableText(cut)).toBe(true);
    expect(storableText(`${'x'.repeat(MAX - 2)}😀 and more`, MAX)).toBe(`${'x'.repeat(MAX - 2)}😀`);
  });

  it('replaces what PostgreSQL text and jsonb refuse (lone surrogates, NUL) and keeps the rest as it is', () => {
    expect(storableText('a\uD800b\uDC00c\u0000d', MAX)).toBe('a\uFFFDb\uFFFDc\uFFFDd');
    expect(storableText('short, with 😀 in it', MAX)).toBe('short, with 😀 in it');
    for (const text of ['\uD83D'.repeat(MAX + 3), `${'y'.repeat(MAX)}\uDE00`, '\u0000'.repeat(9)]) {
      const cut = storableText(text, MAX);
      expect(isStorableText(cut)).toBe(true);
      expect(cut.length).toBeLessThanOrEqual(MAX);
    }
  });
});
