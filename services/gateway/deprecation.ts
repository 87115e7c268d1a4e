import type { FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { sendProblem } from './problems.ts';

/**
 * RFC 9745 `Deprecation` and RFC 8594 `Sunset` on every response of a route declared deprecated
 * in its config (`config: { deprecation: { since, sunset, link } }`), `deprecated: true` in the
 * OpenAPI document, and `410 Gone` once the sunset has passed. See docs/versioning.md.
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
      // OpenAPI `deprecated: true` (the document reads each route's schema when it is generated).
      route.schema = { ...route.schema, deprecated: true };
      const announce = async (_request: unknown, reply: { header(name: string, value: string): unknown }) => {
        reply.header('deprecation', `@${Math.floor(deprecation.since.getTime() / 1000)}`);
        reply.header('sunset', deprecation.sunset.toUTCString());
        if (deprecation.link) reply.header('link', `<${deprecation.link}>; rel="deprecation"`);
      };
      // After the sunset the endpoint is gone (docs/versioning.md): a 410 problem, headers still set.
      const goneAfterSunset = async (request: FastifyRequest, reply: FastifyReply) => {
        if (Date.now() < deprecation.sunset.getTime()) return;
        return sendProblem(
          request,
          reply,
          410,
          `This endpoint was retired on ${deprecation.sunset.toUTCString()}${deprecation.link ? `; see ${deprecation.link}` : ''}`,
        );
      };
      const existing = route.onSend;
      route.onSend = existing ? [...[existing].flat(), announce] : [announce];
      const onRequest = route.onRequest;
      route.onRequest = onRequest ? [...[onRequest].flat(), goneAfterSunset] : [goneAfterSunset];
    });
  },
  { name: 'deprecation' },
);
