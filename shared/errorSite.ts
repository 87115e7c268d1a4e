import { fileURLToPath, pathToFileURL } from 'node:url';

/** The service's own files (node_modules included), as a path and as the URL ESM frames name. */
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ROOT_URL = pathToFileURL(ROOT).href;
const NODE_MODULE = /^node:[a-z_][a-z0-9_]*(?:\/[\w/.-]+)?$/;
const MAX_FRAMES = 50;

type CallSite = NodeJS.CallSite;

// Errors of another realm (a vm context) are errors too; `instanceof` would not see them.
const isError = (Error as { isError?: (value: unknown) => boolean }).isError ?? ((value: unknown) => value instanceof Error);

/**
 * Where an error was thrown, for a log that must not hold what it says: its message may quote
 * anything, personal data included, and the stack text begins with the message (every line of
 * it), so the text is never read. V8 writes an error's stack when it is first asked for; asked for
 * here first, it hands the call sites to a hook in place for that one synchronous read, which
 * writes the stack as it would have been written anyway. The frames are the call sites' files,
 * lines and columns alone (function names can be made of data), for the service's files and
 * node's modules. An error whose stack was already written, or anything that cannot be read so,
 * gives its type alone. Never throws.
 */
export function errorSite(error: unknown): { readonly type: string; readonly stack?: string } {
  let type = 'Error';
  try {
    if (!isError(error)) return { type: typeof error };
    const e = error as Error;
    const name: unknown = e.name;
    if (typeof name === 'string' && /^[A-Za-z][\w$]{0,63}$/.test(name)) type = name;
    const sites = callSitesOf(e);
    return sites ? { type, stack: sites.flatMap(frameOf).slice(0, MAX_FRAMES).join('\n') } : { type };
  } catch {
    return { type };
  }
}

/** The error's call sites, when its stack is first read here; undefined when it was read before. */
function callSitesOf(error: Error): readonly CallSite[] | undefined {
  const saved = Error.prepareStackTrace;
  // Without a hook to chain to, the stack could not be written as others would have had it.
  if (typeof saved !== 'function') return undefined;
  let sites: CallSite[] | undefined;
  const hook: typeof Error.prepareStackTrace = (thrown, callSites) => {
    sites = callSites;
    return saved(thrown, callSites);
  };
  try {
    Error.prepareStackTrace = hook;
    void error.stack;
  } finally {
    try {
      Error.prepareStackTrace = saved;
    } catch {
      // Frozen intrinsics: the assignment above failed too, and nothing changed.
    }
  }
  return sites;
}

function frameOf(site: CallSite): string[] {
  const file = site.getFileName();
  if (typeof file !== 'string') return [];
  if (!(NODE_MODULE.test(file) || file.startsWith(ROOT) || file.startsWith(ROOT_URL))) return [];
  return [`    at ${file}:${site.getLineNumber() ?? 0}:${site.getColumnNumber() ?? 0}`];
}
