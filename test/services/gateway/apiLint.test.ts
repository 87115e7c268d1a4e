import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lintOpenApiFile, writeLiveDocument, type LintResult } from '../../../scripts/lintApi.ts';
import { useTestEventStore } from '../../support/database.ts';

/**
 * The live OpenAPI document through the linters integrators run; this test is how CI runs them
 * (`npm run lint:api` does the same by hand): Spectral (`spectral:oas` + OWASP API Top 10,
 * `.spectral.yaml`) and Redocly (`recommended`), with no error. Then the same document with a contract break, which they must catch: the rules
 * narrowed in `.spectral.yaml` still bite.
 */
const dir = join(fileURLToPath(new URL('../../../.tmp/', import.meta.url)), `api-lint-${randomBytes(4).toString('hex')}`);
afterAll(() => rm(dir, { recursive: true, force: true }));

const report = (results: LintResult[]) => results.map((r) => `${r.tool}: ${r.ok ? 'ok' : 'errors'}\n${r.output}`).join('\n');

describe('the OpenAPI document the gateway serves', () => {
  const ctx = useTestEventStore();
  let file: string;
  beforeAll(async () => {
    file = await writeLiveDocument(ctx.db.pool, dir);
  });

  it('passes Spectral (OWASP) and Redocly (recommended) with no error', async () => {
    const results = await lintOpenApiFile(file);
    expect(results.map((r) => r.tool)).toEqual(['spectral', 'redocly']);
    expect(
      results.every((r) => r.ok),
      report(results),
    ).toBe(true);
  }, 120_000);

  it('fails Spectral when an input loses its bound or a limited answer its RateLimit header, even with its own security', async () => {
    const document = JSON.parse(await readFile(file, 'utf8')) as {
      paths: Record<
        string,
        Record<
          string,
          {
            parameters?: Array<{ name: string; schema: Record<string, unknown> }>;
            security?: unknown[];
            responses: Record<string, { headers?: Record<string, unknown> }>;
          }
        >
      >;
    };
    const list = document.paths['/v1/employees']?.get;
    const department = list?.parameters?.find((p) => p.name === 'department');
    if (!list || !department) throw new Error('GET /v1/employees?department is not in the document');
    delete department.schema.maxLength;
    // Its own (non-empty) security keeps it in the authenticated scope, where the bucket's headers are due.
    list.security = [{ bearerAuth: [], tenant: [] }];
    delete list.responses['200']?.headers?.RateLimit;
    const broken = join(dir, 'broken', 'openapi.json');
    await mkdir(join(dir, 'broken'), { recursive: true });
    await writeFile(broken, JSON.stringify(document, null, 2));

    const [spectral] = await lintOpenApiFile(broken);
    expect(spectral?.ok).toBe(false);
    expect(spectral?.output).toContain('owasp:api4:2023-string-limit');
    expect(spectral?.output).toContain('owasp:api4:2023-rate-limit');
  }, 120_000);
});
