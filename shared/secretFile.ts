import { randomBytes } from 'node:crypto';
import { link, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * The text of `DATA_DIR/<name>`, made with `generate()` on first use. Written aside, then linked
 * into place: `link` fails if another process got there first, so processes that share DATA_DIR
 * and start together all end up with the same secret, and nobody reads a half-written file.
 * Used for every secret the service makes itself (the KEKs, the email hash key, the JWT keys, the
 * webhook secrets key).
 */
export async function readOrCreateSecretFile(dataDir: string, name: string, generate: () => string | Promise<string>): Promise<string> {
  const file = join(dataDir, name);
  const existing = await readFile(file, 'utf8').catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  });
  if (existing !== undefined) return existing;
  await mkdir(dataDir, { recursive: true });
  const aside = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
  await writeFile(aside, await generate(), { mode: 0o600 });
  try {
    await link(aside, file).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
    });
  } finally {
    await rm(aside, { force: true });
  }
  return readFile(file, 'utf8');
}
