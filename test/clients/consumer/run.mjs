// Runs consumer.ts with Node (types stripped) against the gateway in argv[2] (JSON config); prints
// EXPIRE and waits for a line on stdin while the test moves the gateway's clock, then the report.
import { createInterface } from 'node:readline';
import { scenario } from './consumer.ts';

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const report = await scenario({
  ...JSON.parse(process.argv[2]),
  expire: async () => {
    process.stdout.write('EXPIRE\n');
    await lines.next();
  },
});
process.stdout.write(`${JSON.stringify(report)}\n`);
process.exit(0);
