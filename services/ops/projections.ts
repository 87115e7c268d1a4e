import { type Command, InvalidArgumentError } from 'commander';
import { positiveInt, progressBar } from './cliOptions.ts';
import { loadConfig } from '../../shared/config.ts';
import { comparePositions, formatPosition, type EventStore, type GlobalPosition } from '../../shared/event-store/port.ts';
import { readCheckpoint } from '../../shared/projections/checkpoints.ts';
import { replayProjection } from '../../shared/projections/replay.ts';
import {
  RebuildInProgressError,
  RebuildRaceError,
  countParkedEvents,
  countParkedEventsOfErased,
  listParkedEvents,
  resolveParkedEvents,
  retryParkedEvents,
} from '../../shared/projections/parking.ts';
import { sql } from '../../shared/db/pool.ts';
import type { Projection } from '../../shared/projections/projection.ts';
import { allProjections } from '../projectors.ts';
import { withConfiguredDatabase, withConfiguredRuntime } from './tenants.ts';
import { enqueueReplayFromCli, replayJobRow, replayJobsForStatus } from '../worker/cli.ts';

/**
 * Runs `work`; when it is refused with `refusal` (nothing changed: a retry or resolve while a
 * rebuild builds, exit code 2; a swap that raced the live projector, exit code 3), says why on
 * stderr and sets `exitCode` instead of failing with a stack trace.
 */
async function unlessRefused<T>(
  work: () => Promise<T>,
  refusal: typeof RebuildInProgressError | typeof RebuildRaceError,
  exitCode: number,
): Promise<T | undefined> {
  try {
    return await work();
  } catch (error) {
    if (!(error instanceof refusal)) throw error;
    process.stderr.write(`${error.message}\n`);
    process.exitCode = exitCode;
    return undefined;
  }
}

function findProjection(name: string): Projection {
  const projection = allProjections.find((p) => p.name === name);
  if (!projection) throw new InvalidArgumentError(`unknown projection; known: ${allProjections.map((p) => p.name).join(', ')}`);
  return projection;
}

/** How many events of the projection's types lie after `from` (counted through the port, so on any adapter). */
async function eventsBehind(
  store: EventStore,
  projection: Projection,
  from: GlobalPosition,
  cap: number,
): Promise<{ count: number; capped: boolean }> {
  let after = from;
  let count = 0;
  for (;;) {
    const page = await store.readAll({ after, eventTypes: projection.eventTypes, maxCount: 10_000 });
    count += page.events.length;
    if (comparePositions(page.checkpoint, after) === 0) return { count, capped: false };
    if (count >= cap) return { count, capped: true };
    after = page.checkpoint;
  }
}

/**
 * `projections status|replay|parked|retry|resolve`. Each runs against the configured engines (or
 * attaches to the embedded PostgreSQL of a running service; services/ops/tenants.ts). A replay
 * builds into shadow tables and swaps them in atomically, so the running service keeps answering
 * from the old model until the new one is complete, and its live projector follows on from the swap.
 */
export function registerProjectionCommands(program: Command): void {
  const projections = program.command('projections').description('projection status and replays');

  projections
    .command('status')
    .description("each projection's version, position and lag (events behind the head of the log)")
    .option('--json', 'machine-readable output')
    .action(async (options: { json?: boolean }) => {
      await withConfiguredRuntime(async ({ config, pool, eventStore }) => {
        const head = await eventStore.headPosition();
        const parked = await countParkedEvents(pool);
        const ofErased = await countParkedEventsOfErased(pool);
        const rows = [];
        for (const projection of allProjections) {
          const checkpoint = await readCheckpoint(pool, projection.name);
          const behind = checkpoint ? await eventsBehind(eventStore, projection, checkpoint.position, 1_000_000) : null;
          rows.push({
            name: projection.name,
            version: projection.version,
            builtVersion: checkpoint?.version ?? null,
            position: checkpoint ? formatPosition(checkpoint.position) : null,
            head: formatPosition(head),
            lag: behind ? `${behind.count}${behind.capped ? '+' : ''}` : 'not built',
            eventsApplied: checkpoint?.eventsApplied ?? 0,
            // Events this version could not apply (dead-letter); see `projections parked <name>`.
            parked: parked.get(projection.name) ?? 0,
            // Of them, events of erased people: erasures this model does not show until they are retried or resolved.
            parkedOfErased: ofErased.get(projection.name) ?? 0,
            updatedAt: checkpoint?.updatedAt ?? null,
          });
        }
        const jobs = await replayJobsForStatus(config);
        if (options.json) {
          process.stdout.write(`${JSON.stringify({ head: formatPosition(head), projections: rows, replayJobs: jobs }, null, 2)}\n`);
          return;
        }
        process.stdout.write(`head of the log: ${formatPosition(head)}\n`);
        console.table(rows);
        const withParked = rows.filter((r) => r.parked > 0);
        if (withParked.length > 0) {
          process.stdout.write(
            `parked events: ${withParked.map((r) => `${r.name} ${r.parked}`).join(', ')} ` +
              '(inspect: projections parked <name>; after a fix: projections retry <name>)\n',
          );
        }
        const withErased = rows.filter((r) => r.parkedOfErased > 0);
        if (withErased.length > 0) {
          process.stdout.write(
            `parked events of erased people: ${withErased.map((r) => `${r.name} ${r.parkedOfErased}`).join(', ')} ` +
              '(their erasure is not in that model yet: projections retry <name>; resolve what still blocks them)\n',
          );
        }
        if (jobs.length > 0) {
          process.stdout.write('queued replays (newest first):\n');
          console.table(jobs.map(replayJobRow));
        }
      });
    });

  projections
    .command('replay')
    .description('rebuild a projection from the first event into shadow tables, then swap them in atomically')
    .argument('<name>', `one of: ${allProjections.map((p) => p.name).join(', ')}`, findProjection)
    .option('--batch-size <n>', 'events per transaction', positiveInt, 5_000)
    .option('--allow-downgrade', 'replace a model built by a newer version of the projection (deliberate rollback)')
    .option('--queue', 'enqueue the replay for the worker process (BullMQ) instead of running it here')
    .option('--wait', 'with --queue: follow the job until it completes')
    .action(async (projection: Projection, options: { batchSize: number; allowDowngrade?: boolean; queue?: boolean; wait?: boolean }) => {
      if (options.queue) {
        await enqueueReplayFromCli(loadConfig(), projection.name, { wait: options.wait });
        return;
      }
      await withConfiguredRuntime(async ({ pool, eventStore }) => {
        const bar = progressBar(`${projection.name} |{bar}| {percentage}% | {events} events | {rate} events/s | ETA {eta_formatted}`, {
          etaBuffer: 50,
        });
        // Progress is measured along the log (global positions): the only total known up front.
        let barStarted = false;
        const started = Date.now();
        const payload = (processed: number) => ({
          events: processed.toLocaleString('en-US'),
          rate: Math.round(processed / Math.max(0.001, (Date.now() - started) / 1000)).toLocaleString('en-US'),
        });
        const result = await unlessRefused(
          () =>
            replayProjection(pool, eventStore, projection, {
              batchSize: options.batchSize,
              allowDowngrade: options.allowDowngrade,
              onProgress: ({ processed, position, head }) => {
                const total = Math.max(1, Number(head.prepare), Number(position.prepare));
                if (!barStarted) bar.start(total, 0, payload(0));
                barStarted = true;
                bar.setTotal(total);
                bar.update(Number(position.prepare), payload(processed));
              },
            }),
          RebuildRaceError,
          3,
        );
        if (result) bar.update(bar.getTotal(), payload(result.processed));
        bar.stop();
        // Refused: nothing was swapped; the next build defers what the live projector parked.
        if (!result) return;
        const seconds = (Date.now() - started) / 1000;
        process.stdout.write(
          `replayed ${projection.name}: ${result.processed} events in ${seconds.toFixed(1)} s ` +
            `(${Math.round(result.processed / Math.max(seconds, 0.001))} events/s), now at ${formatPosition(result.position)}` +
            `${result.parked > 0 ? `; ${result.parked} parked (npm run ops -- projections parked ${projection.name})` : ''}\n`,
        );
      });
    });

  projections
    .command('parked')
    .description("a projection's parked (dead-letter) events, in log order")
    .argument('<name>', `one of: ${allProjections.map((p) => p.name).join(', ')}`, findProjection)
    .option('--all', 'also events already retried or resolved')
    .option('--json', 'machine-readable output')
    .action(async (projection: Projection, options: { all?: boolean; json?: boolean }) => {
      await withConfiguredDatabase(async (pool) => {
        const parked = await listParkedEvents(pool, projection.name, options.all ? {} : { status: 'parked' });
        const rows = parked.map((p) => ({
          position: formatPosition(p.event.position),
          eventId: p.event.id,
          streamId: p.event.streamId,
          type: p.event.type,
          tenant: p.tenantId,
          status: p.status,
          // Their person was erased: the erasure shows in the model once the stream's parked events are retried or resolved.
          erased: p.erased,
          attempts: p.attempts,
          firstFailedAt: p.firstFailedAt,
          lastFailedAt: p.lastFailedAt,
          error: p.error,
        }));
        if (options.json) process.stdout.write(`${JSON.stringify({ projection: projection.name, parked: rows }, null, 2)}\n`);
        else if (rows.length === 0) process.stdout.write(`${projection.name}: no parked events\n`);
        else console.table(rows);
      });
    });

  projections
    .command('retry')
    .description('re-apply the parked events of a projection (after a fix), in log order, in one transaction with the live model')
    .argument('<name>', `one of: ${allProjections.map((p) => p.name).join(', ')}`, findProjection)
    .action(async (projection: Projection) => {
      await withConfiguredDatabase(async (pool) => {
        const live = Object.fromEntries(Object.keys(projection.tables).map((t) => [t, sql.identifier([t])]));
        const result = await unlessRefused(() => retryParkedEvents(pool, projection, live), RebuildInProgressError, 2);
        if (!result) return;
        process.stdout.write(`${projection.name}: ${result.retried} parked events applied, ${result.stillParked} still parked\n`);
        if (result.stillParked > 0) process.exitCode = 1;
        const ofErased = (await countParkedEventsOfErased(pool)).get(projection.name) ?? 0;
        if (ofErased > 0) {
          process.stdout.write(
            `${projection.name}: ${ofErased} of them of erased people, whose erasure this model does not show yet: ` +
              `fix or resolve the first parked event of each such stream (projections parked ${projection.name}), then retry again\n`,
          );
        }
      });
    });

  projections
    .command('resolve')
    .description('mark parked events as resolved WITHOUT applying them (all of the projection, or the given event ids)')
    .argument('<name>', `one of: ${allProjections.map((p) => p.name).join(', ')}`, findProjection)
    .argument('[eventIds...]', 'only these events')
    .action(async (projection: Projection, eventIds: string[]) => {
      await withConfiguredDatabase(async (pool) => {
        const resolved = await unlessRefused(
          () => resolveParkedEvents(pool, projection.name, eventIds.length > 0 ? eventIds : undefined),
          RebuildInProgressError,
          2,
        );
        if (resolved === undefined) return;
        process.stdout.write(`${projection.name}: ${resolved} parked events marked resolved\n`);
      });
    });
}
