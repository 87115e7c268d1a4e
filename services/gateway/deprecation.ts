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
    // Attached per route at registration, so routes that are not deprecated pay nothing.
    app.addHook('onRoute', (route) => {
      const deprecation = route.config?.deprecation;
      if (!deprecation) return;
      const announce = async (_request: unknown, reply: { header(name: string, value: string): unknown }) => {
        reply.header('deprecation', `@${Math.floor(deprecation.since.getTime() / 1000)}`);
        reply.header('sunset', deprecation.sunset.toUTCString());
        if (deprecation.link) reply.header('link', `<${deprecation.link}>; rel="deprecation"`);
      };
      const existing = route.onSend;
      route.onSend = existing ? [...[existing].flat(), announce] : [announce];
    });
  },
  { name: 'deprecation' },
);
