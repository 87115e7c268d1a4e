import type { Schema } from './types.ts';

/** Hostile values for the fuzz test, and the encoding an attacker would use for them. */
export const TEN_K = 'x'.repeat(10_000);
export const deepArray = (depth: number): unknown => {
  let value: unknown = 'x';
  for (let i = 0; i < depth; i++) value = [value];
  return value;
};
export const deepObject = (depth: number): unknown => {
  let value: unknown = 'x';
  for (let i = 0; i < depth; i++) value = { a: value };
  return value;
};

/** A hostile value and whether the answer must be exactly a 400 (else: any documented status). */
export type Hostile = { readonly label: string; readonly value: unknown; readonly must400: boolean };

/** Strings that are invalid in every string field: 400, whatever the field means. */
export function hostileStrings(schema: Schema): Hostile[] {
  const list: Hostile[] = [
    { label: 'NUL', value: 'a\u0000b', must400: true },
    { label: 'lone high surrogate', value: 'a\uD800', must400: true },
    { label: 'lone low surrogate', value: '\uDFFFz', must400: true },
    { label: '10k characters', value: TEN_K, must400: true },
  ];
  if (schema.format === 'date-time') {
    list.push(
      { label: 'year 0', value: '0000-06-01T00:00:00Z', must400: true },
      { label: 'normalises to year 10000', value: '9999-12-31T23:00:00-05:00', must400: true },
      { label: 'year 10000', value: '+010000-01-01T00:00:00Z', must400: true },
    );
  }
  return list;
}

export const HOSTILE_ANY: readonly Hostile[] = [
  { label: 'number', value: 12_345, must400: false },
  { label: 'huge number', value: 1e308, must400: false },
  { label: 'negative huge number', value: -1e308, must400: false },
  { label: 'unsafe integer', value: 2 ** 53 + 1, must400: false },
  { label: 'boolean', value: true, must400: false },
  { label: 'null', value: null, must400: false },
  { label: 'array', value: ['a', 'b'], must400: false },
  { label: 'object', value: { a: 1 }, must400: false },
  { label: 'empty string', value: '', must400: false },
  { label: 'numeric string', value: '99999999999999999999999', must400: false },
  { label: 'deep array', value: deepArray(2_000), must400: false },
  { label: 'deep object', value: deepObject(2_000), must400: false },
  { label: 'proto key', value: JSON.parse('{"__proto__":{"polluted":1}}'), must400: false },
];

/** Text forms for the URL and headers, where every value is a string. */
export const HOSTILE_TEXT: readonly Hostile[] = [
  { label: 'NUL (%00)', value: '%00', must400: true },
  { label: 'lone surrogate (WTF-8 %ED%A0%80)', value: '%ED%A0%80', must400: false },
  { label: 'invalid UTF-8 (%C3%28)', value: '%C3%28', must400: false },
  { label: 'broken escape (%E0%A4%A)', value: '%E0%A4%A', must400: false },
  { label: '10k characters', value: TEN_K, must400: true },
  { label: 'negative', value: '-1', must400: false },
  { label: 'fraction', value: '1.5', must400: false },
  { label: 'huge', value: '1e400', must400: false },
  { label: 'empty', value: '', must400: false },
  { label: 'word', value: 'abc', must400: false },
];

/** encodeURIComponent, except that a lone surrogate goes out as its WTF-8 bytes (as an attacker would send it). */
export const encodeAny = (text: string) =>
  [...text]
    .map((ch) => {
      const code = ch.charCodeAt(0);
      if (ch.length === 1 && code >= 0xd800 && code <= 0xdfff) {
        return [0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f)]
          .map((b) => `%${b.toString(16).toUpperCase()}`)
          .join('');
      }
      return encodeURIComponent(ch);
    })
    .join('');
