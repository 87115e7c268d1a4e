import { describe, expect, it } from 'vitest';
import { ServiceUnavailableError, TooManyRequestsError } from '../../../shared/errors.ts';
import { createVerificationGate } from '../../../services/auth/verificationGate.ts';

/** The gate in front of argon2 (so junk logins cannot starve real ones), with work the test finishes by hand. */
function manualWork() {
  const started: string[] = [];
  const finishers = new Map<string, () => void>();
  const work = (name: string) => () =>
    new Promise<string>((resolve) => {
      started.push(name);
      finishers.set(name, () => resolve(name));
    });
  const finish = async (name: string) => {
    const done = finishers.get(name);
    if (!done) throw new Error(`${name} has not started`);
    done();
    await new Promise((r) => setImmediate(r));
  };
  return { started, work, finish };
}

const settle = () => new Promise((r) => setImmediate(r));

describe('when the gate is full', () => {
  it('gives a freed slot to a waiting address with nothing running before a busy address queued earlier', async () => {
    const gate = createVerificationGate({ concurrency: 1, maxPendingPerKey: 4 });
    const { started, work, finish } = manualWork();
    const runs = [gate.run('attacker', work('a1')), gate.run('attacker', work('a2')), gate.run('attacker', work('a3'))];
    await settle();
    runs.push(gate.run('user', work('u1')));
    await settle();
    expect(started).toEqual(['a1']);
    await finish('a1');
    expect(started).toEqual(['a1', 'u1']);
    await finish('u1');
    await finish('a2');
    await finish('a3');
    await expect(Promise.all(runs)).resolves.toEqual(['a1', 'a2', 'a3', 'u1']);
    expect(gate.load()).toEqual({ active: 0, queued: 0 });
  });

  it('never lets one address hold every slot: another address starts at once', async () => {
    const gate = createVerificationGate({ concurrency: 2, maxPendingPerKey: 4 });
    const { started, work, finish } = manualWork();
    const runs = [gate.run('attacker', work('a1')), gate.run('attacker', work('a2'))];
    await settle();
    expect(started).toEqual(['a1']);
    runs.push(gate.run('user', work('u1')));
    await settle();
    expect(started).toEqual(['a1', 'u1']);
    await finish('u1');
    expect(started).toEqual(['a1', 'u1']);
    await finish('a1');
    expect(started).toEqual(['a1', 'u1', 'a2']);
    await finish('a2');
    await expect(Promise.all(runs)).resolves.toEqual(['a1', 'a2', 'u1']);
  });

  it('refuses an address with too many pending verifications with 429, at once', async () => {
    const gate = createVerificationGate({ concurrency: 1, maxPendingPerKey: 2 });
    const { work, finish } = manualWork();
    const first = gate.run('a', work('1'));
    const second = gate.run('a', work('2'));
    await expect(gate.run('a', work('3'))).rejects.toBeInstanceOf(TooManyRequestsError);
    await settle();
    await finish('1');
    await finish('2');
    await Promise.all([first, second]);
  });

  it('answers 503 when the queue is full, and when a wait outlasts maxWaitMs', async () => {
    const gate = createVerificationGate({ concurrency: 1, maxQueued: 1, maxWaitMs: 50 });
    const { work, finish } = manualWork();
    const running = gate.run('a', work('1'));
    const waiting = gate.run('b', work('2'));
    const refused = await gate.run('c', work('3')).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ServiceUnavailableError);
    expect((refused as ServiceUnavailableError).headers['retry-after']).toBe('1');
    await expect(waiting).rejects.toBeInstanceOf(ServiceUnavailableError); // nothing freed the slot within 50 ms
    expect(gate.load()).toEqual({ active: 1, queued: 0 });
    await settle();
    await finish('1');
    await running;
    expect(gate.load()).toEqual({ active: 0, queued: 0 });
  });
});
