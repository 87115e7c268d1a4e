import { mkdir } from 'node:fs/promises';
import type { FastifyInstance } from 'fastify';
import type { Browser } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXAMPLE_TENANT_SLUG } from '../../../services/gateway/openapi.ts';
import { createTestApp, createTestAuth } from '../../support/auth.ts';
import { launchChromium } from '../../support/chromium.ts';
import { createTestDatabase, type TestDatabase } from '../../support/database.ts';

/**
 * The API reference page (/docs, Scalar) in Debian's chromium, headless: what a first reader
 * sees in the browser's console and in the X-Tenant field. The gateway has the auth routes (login
 * declares X-Tenant as a parameter) and the authenticated scope (X-Tenant as a security scheme).
 */
let db: TestDatabase | undefined;
let app: FastifyInstance | undefined;
let chromium: Awaited<ReturnType<typeof launchChromium>> | undefined;
let browser: Browser;
let base: string;

beforeAll(async () => {
  db = await createTestDatabase();
  app = await createTestApp(await createTestAuth(db.pool));
  base = await app.listen({ host: '127.0.0.1', port: 0 });
  chromium = await launchChromium();
  browser = chromium.browser;
}, 60_000);

afterAll(async () => {
  await chromium?.close();
  await app?.close();
  await db?.drop();
});

describe('GET /docs in headless chromium', () => {
  describe('when a reader opens the API reference', () => {
    it('logs no 404 and fails no request', async () => {
      const page = await browser.newPage();
      const console404: string[] = [];
      const failed: string[] = [];
      page.on('console', (message) => {
        if (/\b404\b/.test(message.text())) console404.push(`${message.text()} (${message.location().url ?? ''})`);
      });
      page.on('requestfailed', (request) => failed.push(`${request.url()} ${request.failure()?.errorText}`));
      page.on('response', (response) => response.status() >= 400 && failed.push(`${response.status()} ${response.url()}`));
      await page.goto(`${base}/docs`, { waitUntil: 'networkidle0' });
      await page.waitForFunction(`document.body.innerText.includes('Employee & Analytics Service')`, { timeout: 20_000 });
      expect(console404).toEqual([]);
      expect(failed).toEqual([]);
      await page.close();
    }, 60_000);

    it('shows an example tenant slug in the X-Tenant field and in the snippets, not the library placeholder', async () => {
      const page = await browser.newPage();
      await page.goto(`${base}/docs`, { waitUntil: 'networkidle0' });
      await page.waitForFunction(`document.body.innerText.includes('X-Tenant')`, { timeout: 20_000 });
      // The X-Tenant scheme's value field, by its label in the Authentication block (its only API key).
      const field = await page.evaluate(`(() => {
        const labels = [...document.querySelectorAll('label')].filter((l) => l.textContent.trim() === 'Value');
        const input = labels.length === 1 ? document.getElementById(labels[0].htmlFor) : null;
        const row = input?.closest('tr, [role="row"]') ?? input?.parentElement?.parentElement?.parentElement;
        const style = input ? getComputedStyle(input) : null;
        return input && {
          labels: labels.length,
          value: input.value,
          masked: style.getPropertyValue('-webkit-text-security') || 'none',
          placeholderColor: getComputedStyle(input, '::placeholder').color,
          scheme: row?.previousElementSibling?.textContent ?? '',
        };
      })()`);
      expect(field).toMatchObject({ value: EXAMPLE_TENANT_SLUG, masked: 'none' });
      expect((field as { scheme: string }).scheme).toContain('X-Tenant');
      // Cleared, the field shows no placeholder rather than the library's base64 text.
      expect((field as { placeholderColor: string }).placeholderColor).toBe('rgba(0, 0, 0, 0)');
      // Only that field is shown in clear: the bearer token's field keeps its mask.
      const bearerMask = await page.evaluate(`(() => {
        const label = [...document.querySelectorAll('label')].find((l) => l.textContent.trim() === 'Bearer Token');
        const input = label ? document.getElementById(label.htmlFor) : null;
        return input ? getComputedStyle(input).getPropertyValue('-webkit-text-security') : null;
      })()`);
      expect(bearerMask).toBe('disc');
      // The login operation declares X-Tenant as a parameter: its snippet carries the example too.
      expect(await page.evaluate(`document.body.innerText.includes("--header 'x-tenant: ${EXAMPLE_TENANT_SLUG}'")`)).toBe(true);
      await mkdir('reports', { recursive: true });
      await page.screenshot({ path: 'reports/docs.png' });
      await page.close();
    }, 60_000);
  });
});
