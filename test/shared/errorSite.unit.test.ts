import { describe, expect, it } from 'vitest';
import { errorSite } from '../../shared/errorSite.ts';

const PERSONAL = ['jane.doe@example.com', 'Jane Doe', '1980-01-01'];
const leaks = (site: object) => PERSONAL.some((text) => JSON.stringify(site).includes(text));

async function thrownHere(message: string): Promise<Error> {
  try {
    await Promise.reject(new TypeError(message));
  } catch (error) {
    return error as Error;
  }
  throw new Error('unreachable');
}

describe('errorSite: where an error was thrown, never what it says', () => {
  it("keeps the frames of the service's own files and node's, under the error's type", async () => {
    const site = errorSite(await thrownHere('no secret for jane.doe@example.com'));
    expect(site.type).toBe('TypeError');
    expect(site.stack).toMatch(/^ {4}at .*errorSite\.unit\.test\.ts:\d+:\d+\)?$/m);
    expect(leaks(site)).toBe(false);
  });

  it('drops message lines shaped like frames, however the message changed after its stack was made', async () => {
    const framed = 'x\n    at jane.doe@example.com (/people)\n    at /Jane Doe 1980-01-01\n    at f (/srv/jane.doe@example.com:1:2)';
    const kept = await thrownHere(framed);
    expect(leaks(errorSite(kept))).toBe(false);
    for (const change of [(m: string) => m.split('\n')[0] ?? '', () => '', (m: string) => `prefix ${m}`, () => 'replaced']) {
      const error = await thrownHere(framed);
      void error.stack; // V8 builds the stack text here, with the message as it is now
      error.message = change(error.message);
      expect(leaks(errorSite(error))).toBe(false);
    }
  });

  it('gives a type alone for what it cannot read, and never throws', () => {
    expect(errorSite('jane.doe@example.com')).toEqual({ type: 'string' });
    const odd = new Error('Jane Doe');
    Object.defineProperty(odd, 'name', { get: () => 'jane.doe@example.com' });
    expect(leaks(errorSite(odd))).toBe(false);
    const hostile = new Error('x');
    Object.defineProperty(hostile, 'stack', {
      get: () => {
        throw new Error('Jane Doe');
      },
    });
    expect(errorSite(hostile)).toEqual({ type: 'unreadable' });
  });
});
