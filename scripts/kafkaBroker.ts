// Starts (or reuses) the local single-node KRaft Kafka broker managed by scripts/kafka.sh and
// returns its bootstrap address ("127.0.0.1:<port>"). Used by scripts/engines.ts.
import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO_ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '..');
const KAFKA_SCRIPT = join(REPO_ROOT, 'scripts', 'kafka.sh');

/** Cold first run resolves Kafka through Maven (~45 s) and then waits up to 90 s for readiness. */
const ENSURE_TIMEOUT_MS = 5 * 60_000;

function onPath(command: string): boolean {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    try {
      accessSync(join(dir, command), constants.X_OK);
      return true;
    } catch {
      // not in this directory
    }
  }
  return false;
}

export async function ensureKafka(): Promise<string> {
  const missing = ['java', 'mvn'].filter((c) => !onPath(c));
  if (missing.length > 0) {
    throw new Error(
      `ensureKafka: ${missing.map((c) => `'${c}'`).join(' and ')} not found on PATH. ` +
        'The local Kafka broker (scripts/kafka.sh) needs Java 17+ (java) to run and Maven (mvn) ' +
        'to fetch Kafka from Maven Central, e.g. `apt-get install openjdk-17-jdk-headless maven`.',
    );
  }

  const stdout = await new Promise<string>((resolvePromise, reject) => {
    const child = execFile(
      'bash',
      [KAFKA_SCRIPT, 'ensure'],
      { cwd: REPO_ROOT, timeout: ENSURE_TIMEOUT_MS, maxBuffer: 1024 * 1024, encoding: 'utf8' },
      (error, out) => {
        if (error) {
          reject(
            new Error(
              `ensureKafka: \`bash scripts/kafka.sh ensure\` failed (${error.message.split('\n')[0]}); ` +
                'see its output above and .kafka/kafka.log',
              { cause: error },
            ),
          );
          return;
        }
        resolvePromise(out);
      },
    );
    // execFile cannot take stdio: 'inherit', so forward the script's progress/diagnostics.
    child.stderr?.pipe(process.stderr, { end: false });
  });

  const address = stdout.trim().split('\n').pop()?.trim() ?? '';
  if (!/^127\.0\.0\.1:\d+$/.test(address)) {
    throw new Error(`ensureKafka: unexpected output from scripts/kafka.sh ensure: ${JSON.stringify(stdout)}`);
  }
  return address;
}
