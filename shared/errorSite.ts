import { fileURLToPath } from 'node:url';

/** The service's own files (node_modules included): the only paths a frame worth logging names. */
const ROOT = fileURLToPath(new URL('..', import.meta.url));

// One V8 frame: an identifier-like function name (with `new`, `async`, `[as x]`) and a location
// in node's own modules or under the service's root, with its line and column. Text a message
// shaped like a frame would have to name one of the service's files to pass.
const escaped = ROOT.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const FILE = `(?:node:[\\w/:.-]+|(?:file://)?${escaped}[\\w/.@+-]+):\\d+:\\d+`;
const FRAME = new RegExp(`^ {4}at (?:async )?(?:(?:new )?[\\w$.<>]+(?: \\[as [\\w$]+\\])? \\((?:${FILE}|<anonymous>|native)\\)|${FILE})$`);

/**
 * Where an error was thrown, for a log that must not hold what it says: its message may quote
 * anything, personal data included, and the stack begins with the message (every line of it).
 * The frames are read only from after the message as it is now, and only those of the shape
 * above; whatever cannot be read so gives none. Never throws.
 */
export function errorSite(error: unknown): { readonly type: string; readonly stack?: string } {
  try {
    if (!(error instanceof Error)) return { type: typeof error };
    const { name, stack, message } = error;
    const type = typeof name === 'string' && /^[\w$.]{1,64}$/.test(name) ? name : 'Error';
    if (typeof stack !== 'string' || typeof message !== 'string') return { type };
    const at = message === '' ? -1 : stack.indexOf(message);
    if (at < 0) return { type };
    const frames = stack
      .slice(at + message.length)
      .split('\n')
      .filter((line) => FRAME.test(line));
    return { type, stack: frames.join('\n') };
  } catch {
    return { type: 'unreadable' };
  }
}
