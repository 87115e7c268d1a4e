import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Two levels, told apart by file name. `unit`: pure tests (`*.unit.test.ts`) that need no engine,
 * so they run without the global setup and finish in seconds (`npm run test:unit`).
 * `integration`: every other test, against real PostgreSQL, Redis and Kafka that the global setup
 * provisions. `npm test` runs both.
 */
const UNIT_TESTS = 'test/**/*.unit.test.ts';

export default defineConfig({
  test: {
    pool: 'forks',
    maxWorkers: 3,
    testTimeout: 30_000,
    teardownTimeout: 30_000,
    reporters: ['default'],
    projects: [
      { extends: true, test: { name: 'unit', include: [UNIT_TESTS] } },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, UNIT_TESTS],
          globalSetup: ['test/support/globalSetup.ts'],
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
