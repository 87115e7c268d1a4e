import { FastifyOtelInstrumentation } from '@fastify/otel';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';
import { KafkaJsInstrumentation } from '@opentelemetry/instrumentation-kafkajs';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider, SimpleSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import { activeTracing, setActiveTracing, type Tracing } from './tracing.ts';
import { recordingServerErrorsOnly, requestSpanOptions } from './requestSpans.ts';

/**
 * The OpenTelemetry SDK, started only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (services/main.ts
 * loads this module before anything else so the pg, ioredis and kafkajs instrumentations can
 * wrap those clients as they load) or by a test with its own exporter. Exports OTLP over
 * HTTP/protobuf; the standard OTEL_* variables (service name, headers, sampler) apply.
 */
export function startTracing(options: { serviceName?: string; exporter?: SpanExporter } = {}): Tracing {
  const already = activeTracing();
  if (already) return already;
  const exporter = options.exporter ?? new OTLPTraceExporter();
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({
      [ATTR_SERVICE_NAME]: process.env.OTEL_SERVICE_NAME ?? options.serviceName ?? 'employee-analytics-service',
    }),
    // A test's in-memory exporter wants every span at once; production batches.
    spanProcessors: [options.exporter ? new SimpleSpanProcessor(exporter) : new BatchSpanProcessor(exporter)],
  });
  provider.register(); // global provider, AsyncLocalStorage context, W3C trace-context propagator
  const fastify = new FastifyOtelInstrumentation({ registerOnInitialization: false, ...requestSpanOptions });
  fastify.setTracerProvider(provider);
  registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [
      new PgInstrumentation({ requireParentSpan: true }),
      new IORedisInstrumentation({ requireParentSpan: true }),
      new KafkaJsInstrumentation(),
    ],
  });
  const tracing: Tracing = {
    fastifyPlugin: recordingServerErrorsOnly(fastify.plugin()),
    async shutdown() {
      setActiveTracing(undefined);
      await provider.shutdown();
    },
  };
  setActiveTracing(tracing);
  return tracing;
}
