import { fileURLToPath, pathToFileURL } from 'node:url';

/** The service's own files (node_modules included), as a path and as the URL ESM frames name. */
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ROOT_URL = pathToFileURL(ROOT).href;
const MAX_FRAMES = 50;

type CallSite = {
  getFileName(): string | null | undefined;
  getFunctionName(): string | null;
  getLineNumber(): number | null;
  getColumnNumber(): number | null;
};

/**
 * Where an error was thrown, for a log that must not hold what it says: its message may quote
 * anything, personal data included, and the stack text begins with the message (every line of
 * it), so the text is never read. V8 writes an error's stack when it is first asked for; asked for
 * here first, it hands over the call sites themselves, and the frames are built from their files,
 * lines and function names alone (files of the service and of node's modules only). An error
 * whose stack was already written, or anything else that cannot be read so, gives its type alone.
 * Never throws.
 */
export function errorSite(error: unknown): { readonly type: string; readonly stack?: string } {
  if (!(error instanceof Error)) return { type: typeof error };
  let type = 'Error';
  const saved = Error.prepareStackTrace;
  try {
    const name: unknown = error.name;
    if (typeof name === 'string' && /^[\w$.]{1,64}$/.test(name)) type = name;
    let sites: readonly CallSite[] | undefined;
    // Synchronous, so nothing else formats a stack while this hook is in place.
    Error.prepareStackTrace = (_error, callSites) => {
      sites = callSites;
      return type;
    };
    void error.stack;
    if (!sites) return { type };
    return { type, stack: sites.flatMap(frameOf).slice(0, MAX_FRAMES).join('\n') };
  } catch {
    return { type };
  } finally {
    Error.prepareStackTrace = saved;
  }
}

function frameOf(site: CallSite): string[] {
  const file = site.getFileName();
  if (typeof file !== 'string' || !(file.startsWith('node:') || file.startsWith(ROOT) || file.startsWith(ROOT_URL))) return [];
  const name = site.getFunctionName();
  const shown = typeof name === 'string' && /^[\w$.#<>[\] ]{1,200}$/.test(name) ? name : '<anonymous>';
  return [`    at ${shown} (${file}:${site.getLineNumber() ?? 0}:${site.getColumnNumber() ?? 0})`];
}
