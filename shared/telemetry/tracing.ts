import { context, propagation, SpanStatusCode, trace, type Context, type Link, type Span, type Tracer } from '@opentelemetry/api';
import type { FastifyPluginCallback } from 'fastify';
import type { EventStore, NewEvent, RecordedEvent } from '../event-store/port.ts';
import type { Projection } from '../projections/projection.ts';

/**
 * Trace context across the log. The command side writes the W3C `traceparent` (and
 * `tracestate`) of the request that caused an event into the event's metadata; a projector's
 * span for a batch continues the trace of its first traced event and links to the others, so
 * "this request → this append → this read-model write" is one trace even though the projector
 * runs later, maybe in another process.
 *
 * Everything here is API-only (@opentelemetry/api): with no SDK registered (tracing off, the
 * default) the tracer is a no-op and nothing is written into metadata.
 */
export const TRACER_NAME = 'employee-analytics-service';

/** What the SDK (sdk.ts, loaded only when tracing is on) hands the rest of the process. */
export type Tracing = {
  /** Register first on the gateway: a span per request (Fastify 5's official instrumentation). */
  readonly fastifyPlugin: FastifyPluginCallback;
  /** Flushes spans still buffered and stops the SDK. */
  shutdown(): Promise<void>;
};

let running: Tracing | undefined;
/** The SDK of this process when tracing is on; undefined otherwise (the default). */
export const activeTracing = (): Tracing | undefined => running;
export const setActiveTracing = (tracing: Tracing | undefined): void => {
  running = tracing;
};
const MAX_LINKS = 32;

type Carrier = { traceparent?: string; tracestate?: string };

function traceCarrier(active: Context): Carrier {
  const carrier: Carrier = {};
  propagation.inject(active, carrier);
  return carrier;
}

const withTraceContext = (events: readonly NewEvent[], carrier: Carrier): NewEvent[] =>
  carrier.traceparent ? events.map((event) => ({ ...event, metadata: { ...event.metadata, ...carrier } })) : [...events];

/** Runs `work` inside `span`: records a failure on it, and always ends it. */
async function ended<T>(span: Span, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    span.recordException(error as Error);
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw error;
  } finally {
    span.end();
  }
}

const eventAttributes = (events: readonly NewEvent[]) => ({
  'eas.events.count': events.length,
  'eas.events.types': [...new Set(events.map((e) => e.type))],
});

/** The store, with a span per append and the caller's trace context stamped on each event. */
export function traceEventStore(store: EventStore, tracer: Tracer = trace.getTracer(TRACER_NAME)): EventStore {
  return {
    ...store,
    append: (streamId, events, options) =>
      tracer.startActiveSpan('eventstore.append', { attributes: eventAttributes(events) }, (span) =>
        ended(span, () => store.append(streamId, withTraceContext(events, traceCarrier(context.active())), options)),
      ),
    // A create is one appendMany (reservation + employee): the same span as an append, over several streams.
    appendMany: (requests) => {
      const events = requests.flatMap((r) => r.events);
      const attributes = { 'eas.streams.count': requests.length, ...eventAttributes(events) };
      return tracer.startActiveSpan('eventstore.append', { attributes }, (span) =>
        ended(span, () => {
          const carrier = traceCarrier(context.active());
          return store.appendMany(requests.map((r) => ({ ...r, events: withTraceContext(r.events, carrier) })));
        }),
      );
    },
  };
}

/** The span context an event's metadata carries, if it was appended while tracing. */
function eventContext(event: RecordedEvent): Context | undefined {
  const { traceparent, tracestate } = event.metadata;
  if (typeof traceparent !== 'string') return undefined;
  const carrier: Carrier = { traceparent, ...(typeof tracestate === 'string' ? { tracestate } : {}) };
  const extracted = propagation.extract(context.active(), carrier);
  return trace.getSpanContext(extracted) ? extracted : undefined;
}

/** The projection, with a span per applied batch that continues/links the events' traces. */
export function traceProjection<T extends string>(projection: Projection<T>, tracer: Tracer = trace.getTracer(TRACER_NAME)): Projection<T> {
  return {
    ...projection,
    handle(tx, events, tables) {
      const traced = events.map(eventContext).filter((c): c is Context => c !== undefined);
      const parent = traced[0] ?? context.active();
      const links: Link[] = traced
        .slice(1, MAX_LINKS + 1)
        .map((c) => trace.getSpanContext(c))
        .filter((sc) => sc !== undefined)
        .map((sc) => ({ context: sc }));
      return tracer.startActiveSpan(
        `projection.apply ${projection.name}`,
        { links, attributes: { 'eas.projection': projection.name, 'eas.events.count': events.length } },
        parent,
        (span) => ended(span, () => projection.handle(tx, events, tables)),
      );
    },
  };
}
