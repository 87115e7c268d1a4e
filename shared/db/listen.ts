import { Socket } from 'node:net';
import pg from 'pg';

export type ListenConnection = {
  /** Whether a connection is open and LISTENing now. */
  readonly listening: boolean;
  /** Opens the connection unless it is open or opening; resolves whether it is listening. */
  open(): Promise<boolean>;
  /** Ends the connection on purpose (`onLost` does not fire); a later `open()` opens a new one. */
  release(): Promise<void>;
};

/**
 * One dedicated LISTEN connection (outside any pool: a pooled connection would hand its
 * notifications to whoever holds it next), opened on demand. When it fails or the server ends
 * it, `onLost` fires once and the next `open()` connects again: what was NOTIFYed meanwhile is
 * unknown, so callers treat a loss as "re-read".
 */
export function createListenConnection(options: {
  readonly url: string;
  readonly channel: string;
  readonly onNotification: (payload: string | undefined) => void;
  readonly onLost: () => void;
  /** An unref'd socket: a process with nothing else to do is not kept alive by its listener. */
  readonly unref?: boolean;
}): ListenConnection {
  let client: pg.Client | undefined;
  let opening: Promise<boolean> | undefined;

  const lose = (c: pg.Client) => {
    void c.end().catch(() => undefined);
    if (client !== c) return;
    client = undefined;
    options.onLost();
  };

  const connect = async (): Promise<boolean> => {
    const c = new pg.Client({
      connectionString: options.url,
      ...(options.unref
        ? {
            stream: () => {
              const socket = new Socket();
              socket.unref();
              return socket;
            },
          }
        : {}),
    });
    c.on('notification', (message) => options.onNotification(message.payload ?? undefined));
    c.on('error', () => lose(c));
    c.on('end', () => lose(c));
    try {
      await c.connect();
      await c.query(`listen ${options.channel}`);
      client = c;
      return true;
    } catch {
      await c.end().catch(() => undefined);
      return false;
    }
  };

  return {
    get listening() {
      return client !== undefined;
    },
    open() {
      if (client) return Promise.resolve(true);
      opening ??= connect().finally(() => (opening = undefined));
      return opening;
    },
    async release() {
      const c = client;
      client = undefined;
      await c?.end().catch(() => undefined);
    },
  };
}
