import { fileURLToPath } from 'node:url';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { errorSite } from '../../shared/errorSite.ts';

/** The service's root, as errorSite takes it: frames naming files under it are kept. */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PERSONAL = ['jane.doe@example.com', 'Jane_Doe', '1980-01-01'];
const leaks = (site: object) => PERSONAL.some((text) => JSON.stringify(site).includes(text));
/** A message whose lines look like frames of the service's files and of node's modules. */
const FRAMED = [
  'no secret for jane.doe@example.com',
  `    at ${ROOT}jane.doe@example.com:1:2`,
  `    at f (${ROOT}Jane_Doe+1980-01-01:3:4)`,
  '    at node:fs/jane.doe:1:1',
].join('\n');

function thrownHere(message: string): Error {
  try {
    throw new TypeError(message);
  } catch (error) {
    return error as Error;
  }
}

describe('errorSite: where an error was thrown, never what it says', () => {
  it("gives the frames of the service's own files and node's, under the error's type", () => {
    const site = errorSite(thrownHere(FRAMED));
    expect(site.type).toBe('TypeError');
    expect(site.stack?.split('\n')[0]).toMatch(/^ {4}at .*errorSite\.unit\.test\.ts:\d+:\d+$/);
    expect(leaks(site)).toBe(false);
  });

  it('leaves the stack as every other reader would have had it', () => {
    const error = thrownHere(FRAMED);
    errorSite(error);
    expect(error.stack).toMatch(/^TypeError: no secret for jane\.doe@example\.com\n/);
    expect(error.stack).toMatch(/errorSite\.unit\.test\.ts/);
  });

  it('gives the type alone for an error whose stack text was already written (it holds the message)', () => {
    const error = thrownHere(FRAMED);
    void error.stack;
    error.message = 'no secret';
    expect(errorSite(error)).toEqual({ type: 'TypeError' });
  });

  it("names no function (a name can be made of data), and keeps frames of node's coded errors", () => {
    const named = {
      ['Jane_Doe 1980-01-01'](): never {
        throw new Error('named');
      },
    };
    let caught: unknown;
    try {
      named['Jane_Doe 1980-01-01']();
    } catch (error) {
      caught = error;
    }
    const site = errorSite(caught);
    expect(site.stack).toMatch(/errorSite\.unit\.test\.ts/);
    expect(leaks(site)).toBe(false);
    let coded: unknown;
    try {
      Buffer.alloc(-1);
    } catch (error) {
      coded = error;
    }
    expect(errorSite(coded)).toMatchObject({ type: 'RangeError', stack: expect.stringMatching(/errorSite\.unit\.test\.ts/) });
    // An error of another realm is an error too.
    expect(errorSite(runInNewContext('new TypeError("Jane_Doe")'))).toMatchObject({ type: 'TypeError' });
  });

  it('gives at most 50 frames', () => {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 200;
    try {
      const deep = (n: number): Error => (n === 0 ? new Error('deep') : deep(n - 1));
      expect(errorSite(deep(120)).stack?.split('\n')).toHaveLength(50);
    } finally {
      Error.stackTraceLimit = limit;
    }
  });

  it('gives a type alone for what it cannot read, never throws, and leaves the stack hook as it was', () => {
    const hook = Error.prepareStackTrace;
    expect(errorSite('jane.doe@example.com')).toEqual({ type: 'string' });
    const named = thrownHere('Jane_Doe');
    Object.defineProperty(named, 'name', { get: () => 'jane.doe@example.com' });
    expect(leaks(errorSite(named))).toBe(false);
    const hostile = new Error('x');
    Object.defineProperty(hostile, 'stack', {
      get: () => {
        throw new Error('Jane_Doe');
      },
    });
    expect(errorSite(hostile)).toEqual({ type: 'Error' });
    const { proxy, revoke } = Proxy.revocable(new Error('Jane_Doe'), {});
    revoke();
    expect(errorSite(proxy)).toEqual({ type: 'object' });
    expect(Error.prepareStackTrace).toBe(hook);
  });
});
