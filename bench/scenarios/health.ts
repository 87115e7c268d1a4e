/**
 * Gateway overhead: GET /health/live on the real gateway (request ids, problem handler, metrics
 * histogram, zod serializer) ÷ a bare Fastify "hello" route, both in one child process so the
 * load generator never shares their event loop; rounds alternate so machine drift hits both.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import Fastify from 'fastify';
import { Registry } from 'prom-client';
import { createGateway } from '../../services/gateway/app.ts';

export type ScenarioResult = { name: string; ours: number; baseline: number; ratio: number; details?: Record<string, unknown> };

async function serve(): Promise<void> {
  const bare = Fastify({ logger: false });
  bare.get('/hello', async () => ({ status: 'ok' }));
  const bareAddress = await bare.listen({ host: '127.0.0.1', port: 0 });
  const gateway = await createGateway({
    config: { BODY_LIMIT_BYTES: 1_048_576, LOG_LEVEL: 'silent', NODE_ENV: 'production' },
    readiness: [],
    registry: new Registry(),
    v1: [],
  });
  const gatewayAddress = await gateway.listen({ host: '127.0.0.1', port: 0 });
  process.stdout.write(`${JSON.stringify({ bare: `${bareAddress}/hello`, ours: `${gatewayAddress}/health/live` })}\n`);
}

async function rps(url: string, seconds: number): Promise<number> {
  const result = await autocannon({ url, connections: 32, duration: seconds });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${url}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  return result.requests.average;
}

export async function healthScenario(options: { rounds?: number; seconds?: number } = {}): Promise<ScenarioResult> {
  const rounds = options.rounds ?? 3;
  const seconds = options.seconds ?? Number(process.env.BENCH_DURATION ?? 5);
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url)], {
    env: { ...process.env, HEALTH_BENCH_ROLE: 'server' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const urls = await new Promise<{ bare: string; ours: string }>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`bench server exited with ${code}`)));
      child.stdout.once('data', (chunk: Buffer) => resolve(JSON.parse(chunk.toString()) as { bare: string; ours: string }));
    });
    await rps(urls.bare, 1); // warm both up
    await rps(urls.ours, 1);
    const ours: number[] = [];
    const baseline: number[] = [];
    for (let round = 0; round < rounds; round++) {
      baseline.push(await rps(urls.bare, seconds));
      ours.push(await rps(urls.ours, seconds));
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    return {
      name: 'health-live-vs-bare-fastify',
      ours: Math.round(mean(ours)),
      baseline: Math.round(mean(baseline)),
      ratio: Number((mean(ours) / mean(baseline)).toFixed(3)),
      details: { unit: 'requests/s', connections: 32, rounds, secondsPerRound: seconds, oursPerRound: ours, baselinePerRound: baseline },
    };
  } finally {
    child.kill('SIGTERM');
  }
}

if (process.env.HEALTH_BENCH_ROLE === 'server') await serve();
