import { fastifyHelmet as helmet } from '@fastify/helmet';
import fp from 'fastify-plugin';

/**
 * One year: a browser that comes back within it stays on HTTPS without ever trying plain HTTP.
 * No `includeSubDomains`: the service cannot know which other hosts share its domain (on a bare
 * domain, every subdomain would be forced to HTTPS); a proxy in front may add it for its hosts.
 */
const HSTS = 'max-age=31536000';

/**
 * Headers that keep a browser from misusing an answer, on every response:
 * `X-Content-Type-Options: nosniff` (a JSON body is never sniffed into HTML or script),
 * `Content-Security-Policy: frame-ancestors 'none'` and `X-Frame-Options: DENY` (no page may
 * frame an answer, so none can be clickjacked), plus helmet's other defaults.
 *
 * The policy is only `frame-ancestors`: JSON needs nothing else, and the two HTML pages keep their
 * own. The dashboard sends its stricter policy from its route (a header set by the handler
 * replaces this one); the /docs page runs the API reference's inline scripts and styles, which a
 * `default-src` here would block.
 *
 * `Strict-Transport-Security` only on a request that arrived over HTTPS: TLS on the socket, or
 * `X-Forwarded-Proto: https` from a proxy that TRUST_PROXY trusts (Fastify's `request.protocol`
 * believes the header from those peers only). Over plain HTTP the header is meaningless to a
 * browser, and a client that could set X-Forwarded-Proto itself must not turn it on.
 */
export const securityHeadersPlugin = fp(
  async (app) => {
    await app.register(helmet, {
      global: true,
      contentSecurityPolicy: {
        useDefaults: false,
        directives: { 'default-src': helmet.contentSecurityPolicy.dangerouslyDisableDefaultSrc, 'frame-ancestors': ["'none'"] },
      },
      frameguard: { action: 'deny' },
      strictTransportSecurity: false,
    });
    app.addHook('onRequest', (request, reply, done) => {
      if (request.protocol === 'https') reply.header('strict-transport-security', HSTS);
      done();
    });
  },
  { name: 'security-headers' },
);
