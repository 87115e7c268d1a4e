import cliProgress from 'cli-progress';
import { InvalidArgumentError } from 'commander';

/** What the ops commands share on the command line: option parsers and the progress bar. */

/** A commander option parser for a count (`--batch-size`). */
export const positiveInt = (value: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a positive integer');
  return n;
};

/**
 * A progress bar on stderr (stdout stays the command's result). `format` is cli-progress's
 * (`{bar}`, `{value}`, `{total}`, `{eta_formatted}`, and the payload's own fields).
 */
export const progressBar = (format: string, options: { readonly etaBuffer?: number } = {}): cliProgress.SingleBar =>
  new cliProgress.SingleBar(
    {
      format,
      hideCursor: true,
      stream: process.stderr,
      // Redrawn every 2 s when stderr is not a terminal (CI logs, `2> file`).
      noTTYOutput: true,
      notTTYSchedule: 2_000,
      ...(options.etaBuffer !== undefined && { etaBuffer: options.etaBuffer }),
    },
    cliProgress.Presets.shades_classic,
  );
