import { createEasClient, EasAuthError, type EasClient, type components } from '@employee-analytics/client';

/**
 * What an integrator writes against the installed package: sign in, create and list employees,
 * keep going after the access token expires, and ride out a 429. Type-checked by tsc against the
 * package's declarations, then run by Node against a live gateway (run.mjs).
 */
type Employee = components['schemas']['Employee'];

export type Config = {
  readonly baseUrl: string;
  readonly tenant: string;
  readonly email: string;
  readonly password: string;
  /** Resolves once the gateway's clock is past the access token's 15 minutes. */
  readonly expire: () => Promise<void>;
};

export type Call = {
  readonly method: string;
  readonly path: string;
  readonly status: number;
  readonly retryAfter: string | null;
  readonly at: number;
};

export async function scenario(config: Config) {
  const calls: Call[] = [];
  const eas = createEasClient({
    baseUrl: config.baseUrl,
    tenant: config.tenant,
    fetch: async (request) => {
      const response = await fetch(request);
      const { pathname } = new URL(request.url);
      calls.push({
        method: request.method,
        path: pathname,
        status: response.status,
        retryAfter: response.headers.get('retry-after'),
        at: Date.now(),
      });
      return response;
    },
  });

  const wrong = await eas.login(config.email, 'not the password').catch((error: unknown) => error);
  const wrongStatus = wrong instanceof EasAuthError ? wrong.status : null;
  const session = await eas.login(config.email, config.password);

  const created = await eas.api.POST('/v1/employees', {
    body: { email: 'grace@example.test', firstName: 'Grace', lastName: 'Hopper', department: 'eng' },
  });
  if (!created.data) throw new Error(`create failed: ${created.response.status} ${JSON.stringify(created.error)}`);
  const employee: Employee = created.data;
  const position = created.response.headers.get('x-log-position') ?? undefined;

  const listed = await eas.api.GET('/v1/employees', {
    params: { query: { limit: 10 } },
    headers: position === undefined ? {} : { 'x-min-position': position },
  });

  await config.expire();
  const afterExpiry = await eas.api.GET('/v1/employees/{id}', { params: { path: { id: employee.id } } });
  const refreshed = eas.session()?.refreshToken !== session.refreshToken;

  // Until the tenant's bucket runs dry: the refused call is sent again after its Retry-After.
  const reads: number[] = [];
  while (!calls.some((call) => call.status === 429) && reads.length < 50) {
    reads.push((await eas.api.GET('/v1/employees', { params: { query: { limit: 1 } } })).response.status);
  }

  return {
    wrongStatus,
    created: { id: employee.id, status: created.response.status, location: created.response.headers.get('location') },
    listedIds: listed.data?.data.map((e) => e.id) ?? [],
    afterExpiry: { status: afterExpiry.response.status, email: afterExpiry.data?.email ?? null },
    refreshed,
    reads,
    calls,
  };
}

export type Report = Awaited<ReturnType<typeof scenario>>;

/** The package's types are real: each line below is an error, and tsc fails if one is not. */
export function misuses(eas: EasClient) {
  // @ts-expect-error: no such path
  void eas.api.GET('/v1/nowhere');
  // @ts-expect-error: firstName is required
  void eas.api.POST('/v1/employees', { body: { email: 'a@example.test', lastName: 'A' } });
  // @ts-expect-error: status is one of active, on_leave, inactive
  void eas.api.GET('/v1/employees', { params: { query: { status: 'retired' } } });
}
