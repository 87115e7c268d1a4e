import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';

export type Received = {
  readonly id: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  readonly status: number;
  readonly at: number;
};
export type Answer = { status: number; headers?: Record<string, string> };

/**
 * A real HTTP receiver on loopback. `answer` decides each response from the request number
 * (0-based) and the webhook id; every request is recorded with the status it got. `delayMs`
 * holds each answer back, by request number when a function. `maxInFlight()` is the most requests
 * it has had open at once.
 */
export async function startReceiver(
  answer: (n: number, id: string) => Answer = () => ({ status: 204 }),
  options: { delayMs?: number | ((n: number) => number) } = {},
) {
  const requests: Received[] = [];
  let respond = answer;
  let delayMs = options.delayMs ?? 0;
  let inFlight = 0;
  let maxInFlight = 0;
  const server = createServer((req, res) => {
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    res.on('close', () => inFlight--);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const id = String(req.headers['webhook-id'] ?? '');
      const n = requests.length;
      const { status, headers } = respond(n, id);
      requests.push({ id, headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), status, at: Date.now() });
      const send = () => res.writeHead(status, headers).end();
      const delay = typeof delayMs === 'function' ? delayMs(n) : delayMs;
      // A slow receiver, when asked for: the delay is what the dispatcher is tested against.
      if (delay > 0) setTimeout(send, delay);
      else send();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    requests,
    /** Ids acknowledged with a 2xx, in arrival order. */
    acknowledged: () => requests.filter((r) => r.status >= 200 && r.status < 300).map((r) => r.id),
    maxInFlight: () => maxInFlight,
    setAnswer(next: (n: number, id: string) => Answer) {
      respond = next;
    },
    setDelay(ms: number) {
      delayMs = ms;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** At least once, in order: the distinct ids in first-arrival order, and whether any id came back after a later one. */
export function firstArrivals(ids: readonly string[]): { order: string[]; regressions: number } {
  const seen = new Map<string, number>();
  let regressions = 0;
  let last = -1;
  for (const id of ids) {
    const index = seen.get(id);
    if (index === undefined) {
      seen.set(id, seen.size);
      last = seen.size - 1;
    } else if (index < last) {
      regressions++;
    }
  }
  return { order: [...seen.keys()], regressions };
}
