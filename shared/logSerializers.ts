/** What a request line is given: Fastify's request (or Node's, which has no route). */
export type LoggedRequest = {
  readonly method?: string | undefined;
  readonly url?: string | undefined;
  readonly routeOptions?: { readonly url?: string | undefined } | undefined;
};

/**
 * A request as a log line carries it: method, path and route. Not the query string (a filter or
 * a search may name a person: `?email=`), nor the client's address and port, which Fastify's own
 * serializer adds; the line's bindings carry the request id.
 */
export function requestForLog(req: LoggedRequest): Record<string, string | undefined> {
  return { method: req.method, url: req.url?.split('?')[0], route: req.routeOptions?.url };
}
