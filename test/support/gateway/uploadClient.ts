/**
 * Node's fetch POSTing a JSON body of BYTES bytes to URL, TRIES times one after another, in a
 * process of its own (as a real client is: in the test's own process, client and server share
 * one event loop, which hides races between the client's writes and the server's close). Prints
 * one JSON line: per try, `<status> <content-type> <problem type>` or `error <code>`.
 *
 *   URL=… BYTES=… TRIES=… HEADERS='{"authorization":"…"}' [CHUNKED=1] node test/support/gateway/uploadClient.ts
 */
const { URL: url, BYTES, TRIES, HEADERS, CHUNKED } = process.env;
if (!url || !BYTES || !TRIES) throw new Error('URL, BYTES and TRIES are required');
const headers = { 'content-type': 'application/json', ...(JSON.parse(HEADERS ?? '{}') as Record<string, string>) };
const body = Buffer.from(`{"refreshToken":"${'x'.repeat(Number(BYTES) - 20)}"}`);

/** Without a length: the body in 64 KiB pieces, sent chunked. */
const chunked = () =>
  new ReadableStream<Uint8Array>({
    start(controller) {
      for (let at = 0; at < body.length; at += 65_536) controller.enqueue(body.subarray(at, at + 65_536));
      controller.close();
    },
  });

const outcomes: string[] = [];
for (let i = 0; i < Number(TRIES); i++) {
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers,
      ...(CHUNKED ? { body: chunked(), duplex: 'half' } : { body }),
    } as RequestInit);
    const problem = (await response.json()) as { type?: string };
    outcomes.push(`${response.status} ${response.headers.get('content-type')} ${problem.type}`);
  } catch (error) {
    const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
    outcomes.push(`error ${cause instanceof Error ? ((cause as NodeJS.ErrnoException).code ?? cause.message) : String(cause)}`);
  }
}
process.stdout.write(`${JSON.stringify(outcomes)}\n`);
