import {
  eventTypeFilter,
  excludeSystemEvents,
  type AllStreamResolvedEvent,
  type AllStreamSubscription,
  type Filter,
  type KurrentDBClient,
  type Position,
} from '@kurrent/kurrentdb-client';
import type { GlobalPosition, RecordedEvent } from '../port.ts';
import { eventTypesRegex, maxPosition, toReadPosition, toRecorded } from './mapping.ts';

type Item = { kind: 'event'; event: RecordedEvent } | { kind: 'checkpoint'; position: GlobalPosition };
type Batch = { events: RecordedEvent[]; checkpoint?: GlobalPosition };

const HIGH_WATER = 2_000;

/**
 * One server-side catch-up subscription as a pull queue: events and checkpoints in arrival
 * order, paused above a high-water mark so a slow projector holds the server back.
 */
export function openFeed(client: KurrentDBClient, after: GlobalPosition, eventTypes: readonly string[] | undefined) {
  const queue: Item[] = [];
  let ended = false;
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const checkpointReached = (_: AllStreamSubscription, position: Position) => {
    queue.push({ kind: 'checkpoint', position: { commit: position.commit, prepare: position.prepare } });
    notify();
  };
  const filter: Filter = eventTypes
    ? eventTypeFilter({ regex: eventTypesRegex(eventTypes), checkpointInterval: 1, checkpointReached })
    : excludeSystemEvents({ checkpointInterval: 1, checkpointReached });
  const subscription = client.subscribeToAll({ fromPosition: toReadPosition(after), filter, resolveLinkTos: false });
  subscription.on('data', (resolved: AllStreamResolvedEvent) => {
    const recorded = resolved.event && toRecorded(resolved.event);
    if (!recorded) return;
    queue.push({ kind: 'event', event: recorded });
    if (queue.length >= HIGH_WATER) subscription.pause();
    notify();
  });
  const finish = () => {
    ended = true;
    notify();
  };
  subscription.on('error', finish);
  subscription.on('end', finish);
  subscription.on('close', finish);

  return {
    /** Up to `maxCount` queued events and the furthest checkpoint among them, once any arrive. */
    async take(maxCount: number, signal: AbortSignal | undefined): Promise<Batch | 'ended' | 'aborted'> {
      while (queue.length === 0) {
        if (signal?.aborted) return 'aborted';
        if (ended) return 'ended';
        await new Promise<void>((resolve) => {
          const done = () => {
            signal?.removeEventListener('abort', done);
            resolve();
          };
          wake = done;
          signal?.addEventListener('abort', done, { once: true });
        });
      }
      const batch: Batch = { events: [] };
      while (queue.length > 0 && batch.events.length < maxCount) {
        const item = queue.shift();
        if (!item) break;
        if (item.kind === 'event') batch.events.push(item.event);
        else batch.checkpoint = batch.checkpoint ? maxPosition(batch.checkpoint, item.position) : item.position;
      }
      if (subscription.isPaused() && queue.length < HIGH_WATER / 2) subscription.resume();
      return batch;
    },
    close() {
      subscription.removeAllListeners('data');
      subscription.on('error', () => undefined); // a late error after unsubscribing is expected
      void subscription.unsubscribe().catch(() => undefined);
    },
  };
}
