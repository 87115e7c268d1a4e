import createClient, { type Client } from 'openapi-fetch';
import type { paths } from './schema.d.ts';

export type { paths, components, operations } from './schema.d.ts';

/**
 * A typed client for the Employee & Analytics Service, generated from its OpenAPI document
 * (`schema.d.ts`, by `npm run client:generate`) on top of openapi-fetch. Every path, parameter,
 * body and response is typed; the client also keeps the session:
 *
 *   const eas = createEasClient({ baseUrl: 'http://127.0.0.1:3000', tenant: 'acme' });
 *   await eas.login('admin@acme.test', 'change-me-now');
 *   const { data, error } = await eas.api.GET('/v1/employees', { params: { query: { limit: 50 } } });
 *
 * It sends `X-Tenant` and the bearer token on every call; when the access token has expired (a
 * 401), it rotates the refresh token once and repeats the request. Only a 401 from the refresh
 * ends the session: a 429, a 503 (a gateway draining during a deploy) or a network error is
 * retried, and if it persists the refresh throws with the session kept. A call refused with 429
 * is sent again after its Retry-After (the limiter refuses before any work, so this is safe for
 * every method), up to `rateLimitRetries` times, with a little jitter; aborting the call's `signal`
 * ends that wait (the call rejects with the abort's reason). Errors come back as RFC 9457 problem
 * details in `error`.
 */
export type Session = { readonly accessToken: string; readonly refreshToken: string; readonly expiresAt: number };

export type EasClientOptions = {
  readonly baseUrl: string;
  readonly tenant: string;
  readonly fetch?: (request: Request) => Promise<Response>;
  /** Called whenever tokens change (login, refresh, logout → null), e.g. to persist them. */
  readonly onSession?: (session: Session | null) => void;
  /** How many times a call answered 429 is sent again after its Retry-After (default 2; 0: never). */
  readonly rateLimitRetries?: number;
};

export type EasClient = {
  readonly api: Client<paths>;
  login(email: string, password: string): Promise<Session>;
  refresh(): Promise<Session>;
  logout(): Promise<void>;
  /** Resume a stored session. */
  useSession(session: Session | null): void;
  session(): Session | null;
};

type TokenPair = { accessToken: string; refreshToken: string; expiresIn: number };

export class EasAuthError extends Error {
  readonly status: number;
  constructor(status: number, detail: string) {
    super(detail);
    this.name = 'EasAuthError';
    this.status = status;
  }
}

const SESSION_FREE = new Set(['/v1/auth/login', '/v1/auth/refresh']);

/** Transient failures (429, 503, no answer) one refresh waits out before it throws, keeping the session. */
const REFRESH_RETRIES = 4;
/** The longest single wait in seconds: a longer Retry-After is reported at once, not waited for. */
const MAX_RETRY_WAIT_S = 30;
const RATE_LIMIT_RETRIES = 2;

/** Retry-After in seconds (delta-seconds or an HTTP date), or null when absent or unreadable. */
function retryAfterSeconds(response: Response): number | null {
  const value = response.headers.get('retry-after')?.trim();
  if (!value) return null;
  if (/^\d+$/.test(value)) return Number(value);
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, (at - Date.now()) / 1000);
}

const delay = (seconds: number) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

/**
 * Waits `seconds`, or rejects with the signal's reason as soon as it aborts: a caller that gives
 * up (a timeout, a closed page) is not kept waiting for a retry it no longer wants.
 */
const abortableDelay = (seconds: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, seconds * 1000);
    signal.addEventListener('abort', onAbort, { once: true });
  });

/**
 * Retry-After plus up to a fifth of it (at least 250 ms) at random: clients refused at the same
 * moment, as when a tenant's bucket runs dry for all its workers, do not all come back at once.
 */
const withJitter = (seconds: number) => seconds + Math.random() * Math.max(0.25, seconds / 5);

export function createEasClient(options: EasClientOptions): EasClient {
  const fetchImpl = options.fetch ?? ((request: Request) => globalThis.fetch(request));
  let current: Session | null = null;
  let refreshing: Promise<Session> | undefined;

  const setSession = (session: Session | null) => {
    current = session;
    options.onSession?.(session);
  };
  const toSession = (pair: TokenPair): Session => ({
    accessToken: pair.accessToken,
    refreshToken: pair.refreshToken,
    expiresAt: Date.now() + pair.expiresIn * 1000,
  });

  const authPost = async (path: string, body: unknown): Promise<Response> =>
    fetchImpl(
      new Request(new URL(path, options.baseUrl), {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-tenant': options.tenant,
          ...(current && path === '/v1/auth/logout' ? { authorization: `Bearer ${current.accessToken}` } : {}),
        },
        body: JSON.stringify(body),
      }),
    );
  const problemDetail = async (response: Response) => {
    const body = (await response.json().catch(() => ({}))) as { detail?: unknown };
    return typeof body.detail === 'string' ? body.detail : `HTTP ${response.status}`;
  };

  const refresh = (): Promise<Session> => {
    // One refresh at a time: a rotated refresh token presented twice revokes the whole family.
    refreshing ??= (async () => {
      try {
        for (let attempt = 0; ; attempt++) {
          if (!current) throw new EasAuthError(401, 'not signed in');
          // Backoff for a failure that names no wait: 1, 2, 4, 8 s.
          const backoffS = 2 ** attempt;
          let response: Response;
          try {
            response = await authPost('/v1/auth/refresh', { refreshToken: current.refreshToken });
          } catch (error) {
            // No answer (a restarting gateway, a dropped connection) says nothing about the session.
            if (attempt >= REFRESH_RETRIES) throw error;
            await delay(backoffS);
            continue;
          }
          if (response.ok) {
            const session = toSession((await response.json()) as TokenPair);
            setSession(session);
            return session;
          }
          // Only a 401 says the refresh token is no good (expired, revoked, reused).
          if (response.status === 401) setSession(null);
          const wait = response.status === 429 || response.status === 503 ? (retryAfterSeconds(response) ?? backoffS) : null;
          if (wait === null || wait > MAX_RETRY_WAIT_S || attempt >= REFRESH_RETRIES) {
            throw new EasAuthError(response.status, await problemDetail(response));
          }
          await response.body?.cancel();
          await delay(wait);
        }
      } finally {
        refreshing = undefined;
      }
    })();
    return refreshing;
  };

  const withAuth = (request: Request, session: Session | null): Request => {
    const headers = new Headers(request.headers);
    headers.set('x-tenant', options.tenant);
    if (session) headers.set('authorization', `Bearer ${session.accessToken}`);
    return new Request(request, { headers });
  };

  /** Sends with the session's token; after a 401, refreshes once and sends again. */
  const sendSigned = async (request: Request): Promise<Response> => {
    const retry = request.clone(); // the body can be sent once; keep a copy for the retry
    const response = await fetchImpl(withAuth(request, current));
    if (response.status !== 401 || !current) return response;
    await response.body?.cancel();
    await refresh();
    return fetchImpl(withAuth(retry, current));
  };

  const rateLimitRetries = options.rateLimitRetries ?? RATE_LIMIT_RETRIES;
  const sessionFetch = async (request: Request): Promise<Response> => {
    const path = new URL(request.url).pathname;
    if (SESSION_FREE.has(path)) return fetchImpl(withAuth(request, null));
    let pending = request;
    for (let attempt = 0; ; attempt++) {
      const next = attempt < rateLimitRetries ? pending.clone() : undefined;
      const response = await sendSigned(pending);
      const wait = response.status === 429 ? retryAfterSeconds(response) : null;
      if (!next || wait === null || wait > MAX_RETRY_WAIT_S) return response;
      await response.body?.cancel();
      await abortableDelay(withJitter(wait), request.signal);
      pending = next;
    }
  };

  const api = createClient<paths>({ baseUrl: options.baseUrl, fetch: sessionFetch });

  return {
    api,
    async login(email, password) {
      const response = await authPost('/v1/auth/login', { email, password });
      if (!response.ok) throw new EasAuthError(response.status, await problemDetail(response));
      const session = toSession((await response.json()) as TokenPair);
      setSession(session);
      return session;
    },
    refresh,
    async logout() {
      if (!current) return;
      await authPost('/v1/auth/logout', { refreshToken: current.refreshToken });
      setSession(null);
    },
    useSession: setSession,
    session: () => current,
  };
}
