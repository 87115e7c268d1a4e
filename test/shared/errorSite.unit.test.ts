import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { errorSite } from '../../shared/errorSite.ts';

/** The service's root, as errorSite takes it: frames naming files under it are kept. */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

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
    const framed = [
      'x',
      '    at jane.doe@example.com (/people)',
      '    at /Jane Doe 1980-01-01',
      '    at f (/srv/jane.doe@example.com:1:2)',
      // Shaped like frames of the service's own files and of node's modules.
      `    at ${ROOT}jane.doe@example.com:1:2`,
      `    at f (${ROOT}Jane_Doe+1980-01-01:3:4)`,
      '    at node:1980-01-01:1:1',
    ].join('\n');
    const kept = await thrownHere(framed);
    expect(leaks(errorSite(kept))).toBe(false);
    for (const change of [(m: string) => m.split('\n')[0] ?? '', () => '', (m: string) => `prefix ${m}`, () => 'replaced']) {
      const error = await thrownHere(framed);
      void error.stack; // V8 builds the stack text here, with the message as it is now
      error.message = change(error.message);
      expect(leaks(errorSite(error))).toBe(false);
    }
  });

  it('keeps no frame after the first line that is not one (a cause appended to the stack)', async () => {
    const error = await thrownHere('plain');
    error.stack = `${error.stack}\nCaused by: Error: Jane Doe\n    at f (${ROOT}jane.doe@example.com:1:2)`;
    const site = errorSite(error);
    expect(site.stack).toMatch(/errorSite\.unit\.test\.ts/);
    expect(leaks(site)).toBe(false);
  });

  it('keeps frames of private methods, getters and symbol-named functions', () => {
    class Probe {
      #fail(): never {
        throw new Error('private');
      }
      get value(): never {
        return this.#fail();
      }
      [Symbol.iterator](): never {
        return this.value;
      }
    }
    let caught: unknown;
    try {
      new Probe()[Symbol.iterator]();
    } catch (error) {
      caught = error;
    }
    const stack = errorSite(caught).stack ?? '';
    // Three frames of the service's own file, one per kind of name, before the test's own.
    expect(stack.split('\n').slice(0, 3)).toEqual([
      expect.stringMatching(/#fail \(/),
      expect.stringMatching(/get value (?:\[as value\] )?\(/),
      expect.stringMatching(/\[Symbol\.iterator\] \(/),
    ]);
  });

  it('reads a hostile stack quickly (a long dotted name that is no frame)', () => {
    const error = new Error('x');
    error.stack = `Error: x\n    at ${'a.'.repeat(20_000)} (x`;
    const started = performance.now();
    expect(errorSite(error)).toEqual({ type: 'Error', stack: '' });
    expect(performance.now() - started).toBeLessThan(100);
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
