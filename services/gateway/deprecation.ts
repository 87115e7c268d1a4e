import fp from 'fastify-plugin';

/**
 * RFC 9745 `Deprecation` and RFC 8594 `Sunset` on every response of a route declared deprecated
 * in its config (`config: { deprecation: { since, sunset, link } }`). See docs/versioning.md.
 */
export type Deprecation = { readonly since: Date; readonly sunset: Date; readonly link?: string };

declare module 'fastify' {
  interface FastifyContextConfig {
    deprecation?: Deprecation;
  }
}

export const deprecationPlugin = fp(
  async (app) => {
    app.addHook('onSend', async (request, reply) => {
      const deprecation = request.routeOptions.config.deprecation;
      if (!deprecation) return;
      reply.header('deprecation', `@${Math.floor(deprecation.since.getTime() / 1000)}`);
      reply.header('sunset', deprecation.sunset.toUTCString());
      if (deprecation.link) reply.header('link', `<${deprecation.link}>; rel="deprecation"`);
    });
  },
  { name: 'deprecation' },
);
