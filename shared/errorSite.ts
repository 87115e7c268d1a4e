import { fileURLToPath, pathToFileURL } from 'node:url';

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** The service's own files (node_modules included), as a path and as the URL ESM frames print. */
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ROOT_FORMS = [ROOT, pathToFileURL(ROOT).href].map(escape).join('|');

// One V8 frame: a function name without spaces (`new`, `get`, `async`, `#private`, `[Symbol.x]`,
// `[as x]` allowed) and a location in one of node's own modules or under the service's root, with
// its line and column.
const FILE = `(?:node:[a-z_]+(?:/[\\w/.-]+)?|(?:${ROOT_FORMS})[\\w/.@+%-]+):\\d+:\\d+`;
const NAME = `(?:new )?(?:[\\w$.<>#\\[\\]]+\\.)?(?:get |set )?[\\w$.<>#\\[\\]]+(?: \\[as [\\w$]+\\])?`;
const MAX_FRAME_LENGTH = 1_000;
const FRAME = new RegExp(`^ {4}at (?:async )?(?:${NAME} \\((?:${FILE}|<anonymous>|native)\\)|${FILE})$`);

/**
 * Where an error was thrown, for a log that must not hold what it says: its message may quote
 * anything, personal data included, and the stack begins with the message (every line of it).
 * Frames are taken only from a stack that begins with the error's own header as it is now (V8
 * writes the stack text when it is first read: one read before the message changed holds the old
 * message), only the unbroken run of frames right after it, and only of the shape above, so a
 * message line would have to name one of the service's files to pass. Whatever cannot be read
 * so gives the type alone. Never throws.
 */
export function errorSite(error: unknown): { readonly type: string; readonly stack?: string } {
  try {
    if (!(error instanceof Error)) return { type: typeof error };
    const { name, stack, message } = error;
    if (typeof name !== 'string' || typeof stack !== 'string' || typeof message !== 'string') return { type: 'Error' };
    const type = /^[\w$.]{1,64}$/.test(name) ? name : 'Error';
    const header = name === '' ? message : message === '' ? name : `${name}: ${message}`;
    if (!stack.startsWith(`${header}\n`)) return { type };
    const frames: string[] = [];
    for (const line of stack.slice(header.length + 1).split('\n')) {
      // A failing match may try every split of a long name: no frame V8 writes is this long.
      if (line.length > MAX_FRAME_LENGTH || !FRAME.test(line)) break;
      frames.push(line);
    }
    return { type, stack: frames.join('\n') };
  } catch {
    return { type: 'unreadable' };
  }
}
