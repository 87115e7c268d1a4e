import { createMemoryRateLimitStore } from '../../../shared/rate-limit/memory.ts';
import { rateLimitStoreContract } from '../../support/contracts/rateLimitStore.ts';

rateLimitStoreContract('memory', async () => {
  let clock = 1_700_000_000_000;
  const store = createMemoryRateLimitStore({ now: () => clock });
  return {
    store,
    now: () => clock,
    async elapse(ms) {
      clock += ms;
    },
    teardown: () => store.close(),
  };
});
