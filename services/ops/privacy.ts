import type { Command } from 'commander';
import { positiveInt, progressBar } from './cliOptions.ts';
import { ConflictError } from '../../shared/errors.ts';
import { countClearPersonalEvents, sealExistingEvents } from '../../shared/event-store/postgres/sealExisting.ts';
import { loadKeyEncryptionKeys } from '../../shared/personal-data/keyEncryptionKeys.ts';
import { keysUnderOlderKeks, rewrapDataKeys } from '../../shared/personal-data/rewrap.ts';
import { employeePersonalData } from '../employees/contract.ts';
import { convertLegacyReservations, countLegacyReservations } from '../employees/legacyReservations.ts';
import { opsAction, withConfiguredRuntime } from './tenants.ts';

/**
 * `ops privacy …`: the personal-data keys and the one-time migration to sealed events
 * (docs/privacy.md).
 *
 * `seal-existing` rewrites, once, the stored payloads of a PostgreSQL log written before personal
 * fields were sealed: the email reservations of the first form are renamed to their keyed hash
 * and lose the address, then every event whose personal fields are still clear gets them
 * sealed (null for an employee erased meanwhile). Run again after an interruption: it goes on
 * with what is left, and finds nothing once done. Exits non-zero while clear data is left
 * (events without a data subject, which it skips and names, or an older version still writing).
 *
 * `rewrap-keys` is the last step of a key-encryption-key rotation; it exits non-zero while any
 * data key is still sealed under an older KEK.
 */
const bar = (label: string) => progressBar(`${label} |{bar}| {percentage}% | {value}/{total} | ETA {eta_formatted}`);

export function registerPrivacyCommands(program: Command): void {
  const privacy = program.command('privacy').description('personal data: sealing migration and key rotation');
  privacy
    .command('seal-existing')
    .description('one-time rewrite of events stored before sealing: seal personal fields in place, key email reservations by hash')
    .option('--batch-size <n>', 'events per transaction', positiveInt, 1_000)
    .action(
      opsAction(async (options: { batchSize: number }) => {
        await withConfiguredRuntime(async ({ config, pool, dataKeys, emailHash }) => {
          if (config.EVENTSTORE_URL) {
            throw new ConflictError('seal-existing rewrites the PostgreSQL event tables; a KurrentDB log cannot be rewritten in place');
          }
          const reservations = bar('reservations');
          reservations.start(0, 0);
          // Stopped however the work ends: a running bar's timer would hold a failed command open.
          const converted = await convertLegacyReservations(pool, emailHash, {
            onProgress: (p) => {
              reservations.setTotal(p.total);
              reservations.update(p.converted + p.dropped.length);
            },
          }).finally(() => reservations.stop());
          const events = bar('events');
          events.start(0, 0);
          const sealed = await sealExistingEvents(pool, dataKeys, employeePersonalData, {
            batchSize: options.batchSize,
            onProgress: (p) => {
              events.setTotal(p.total);
              events.update(p.sealed + p.redacted);
            },
          }).finally(() => events.stop());
          for (const dropped of converted.dropped) process.stdout.write(`dropped\t${dropped}\n`);
          for (const position of sealed.skipped) process.stdout.write(`skipped\t${position}\n`);
          process.stdout.write(
            `reservations: ${converted.converted} converted, ${converted.dropped.length} dropped; ` +
              `events: ${sealed.sealed} sealed, ${sealed.redacted} redacted (erased employees), ${sealed.skipped.length} skipped\n`,
          );
          if (converted.dropped.length > 0) {
            process.stdout.write(
              'an address reserved under both forms: run `npm run ops -- employees check-emails` to find any now shared\n',
            );
          }
          // Counted again at the end: a writer still running the older version may have added clear data meanwhile.
          const [clearLeft, legacyLeft] = await Promise.all([
            countClearPersonalEvents(pool, employeePersonalData),
            countLegacyReservations(pool),
          ]);
          if (clearLeft > 0 || legacyLeft > 0) {
            process.stderr.write(
              `error: ${clearLeft} events still hold personal data in the clear and ${legacyLeft} reservations keep the address ` +
                '(events skipped above have no data subject, or values sealed with a data key the key table no longer has; ' +
                'otherwise an older version still writing: run again once none runs)\n',
            );
            process.exitCode = 1;
          }
        });
      }),
    );

  privacy
    .command('rewrap-keys')
    .description('seal every data key under the first key-encryption key (the second step of a KEK rotation)')
    .action(
      opsAction(async () => {
        await withConfiguredRuntime(async ({ config, pool }) => {
          const keks = await loadKeyEncryptionKeys(config);
          const before = await keysUnderOlderKeks(pool, keks);
          const progress = bar('data keys');
          progress.start(
            [...before.values()].reduce((a, b) => a + b, 0),
            0,
          );
          const rewrapped = await rewrapDataKeys(pool, keks, { onProgress: (n) => progress.update(n) }).finally(() => progress.stop());
          process.stdout.write(`${rewrapped} data keys now sealed under ${keks.currentId}\n`);
          // Counted again: keys made meanwhile by a process still sealing under an older KEK, or skipped while locked.
          const left = await keysUnderOlderKeks(pool, keks);
          for (const [kekId, n] of left) process.stdout.write(`still sealed under ${kekId}\t${n}\n`);
          if (left.size > 0) {
            process.stderr.write(
              'error: data keys are still sealed under older key-encryption keys: make the new key first everywhere, then run again\n',
            );
            process.exitCode = 1;
          }
        });
      }),
    );
}
