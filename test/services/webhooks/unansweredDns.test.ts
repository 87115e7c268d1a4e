import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { Resolver } from 'node:dns/promises';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashPassword } from '../../../services/auth/passwords.ts';
import { webhooksCapability } from '../../../services/webhooks/capability.ts';
import { createSecretBox } from '../../../services/webhooks/secrets.ts';
import { createTestApp } from '../../support/auth.ts';
import { expectProblem } from '../../support/harness/employees.ts';
import { useWebhooks } from '../../support/harness/webhooks.ts';
import { waitFor } from '../../support/waitFor.ts';

/** Webhook targets whose DNS server never answers: registration gives up on time, logins go on. */
const wh = useWebhooks();
// A DNS server that takes every query and never replies.
const silent = createSocket('udp4');
let queries = 0;
silent.on('message', () => queries++);

beforeAll(async () => {
  await new Promise<void>((resolve) => silent.bind(0, '127.0.0.1', resolve));
});
afterAll(() => silent.close());

describe("when a target's DNS never answers", () => {
  it('keeps password hashing prompt and refuses the registration with a DNS timeout', async () => {
    const dns = new Resolver();
    dns.setServers([`127.0.0.1:${(silent.address() as AddressInfo).port}`]);
    const app = await createTestApp(
      wh.h.auth,
      webhooksCapability({
        pool: wh.h.db.pool,
        secrets: createSecretBox(randomBytes(32)),
        targets: { allowHosts: [], dns, dnsTimeoutMs: 3_000 },
      }),
    );
    try {
      const { headers } = await wh.admin();
      // More registrations than the libuv pool has threads: with a blocking lookup, each would hold one.
      let answered = 0;
      const started = Date.now();
      const registrations = Array.from({ length: 8 }, (_, i) =>
        app
          .inject({
            method: 'POST',
            url: '/v1/webhooks',
            headers,
            payload: { url: `https://hook-${i}.never-answers.test/x`, events: ['employee.hired'] },
          })
          .finally(() => answered++),
      );
      await waitFor(() => queries >= 8, 2_000, 'every registration asking the silent DNS server');
      const hashStarted = Date.now();
      await hashPassword('correct horse battery staple');
      expect(Date.now() - hashStarted).toBeLessThan(2_000);
      expect(answered).toBe(0); // the hash did not wait for the lookups to give up
      for (const response of await Promise.all(registrations)) {
        const problem = expectProblem(response, 422);
        expect(problem.detail).toMatch(/never-answers\.test.*no DNS answer within 3000 ms/);
      }
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      await app.close();
    }
  });
});
