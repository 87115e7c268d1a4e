import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateSigningSecret, loadSecretBox } from '../../../services/webhooks/secrets.ts';

describe('when processes sharing DATA_DIR seal webhook secrets', () => {
  it('they agree on one generated key, and a sealed secret opens only with it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'eas-whsec-'));
    try {
      const boxes = await Promise.all(Array.from({ length: 8 }, () => loadSecretBox({ DATA_DIR: dir })));
      const secret = generateSigningSecret();
      const sealed = boxes[0]?.seal(secret) ?? '';
      expect(sealed).not.toContain(secret.slice(6));
      for (const box of boxes) expect(box.open(sealed)).toBe(secret);
      const other = await loadSecretBox({ DATA_DIR: dir, WEBHOOK_SECRETS_KEY: Buffer.alloc(32, 9).toString('base64') });
      expect(() => other.open(sealed)).toThrow();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
