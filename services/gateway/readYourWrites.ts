import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { BadRequestError } from '../../shared/errors.ts';
import { parsePosition, type GlobalPosition } from '../../shared/event-store/port.ts';
import { logPositionText } from '../../shared/validation.ts';
import { waitForCheckpoint } from '../../shared/projections/readYourWrites.ts';
import { waitOnPurpose } from './requestContext.ts';

/** The request header of every read that waits for a client's own writes. */
export const readYourWritesHeaders = z.object({
  'x-min-position': logPositionText().optional().describe('Read-your-writes: wait (≤ 2 s) for this position'),
});

export type ReadYourWritesDeps = { readonly pool: DatabasePool; readonly readWaitMs: number };

/** Built once per set of routes; a read waits 2 s at most unless told otherwise. */
export const readYourWritesDeps = (pool: DatabasePool, readWaitMs = 2_000): ReadYourWritesDeps => ({ pool, readWaitMs });

/**
 * A read's answer to `X-Min-Position` (or its query form): when the client gave a log position,
 * waits, at most `readWaitMs`, for `projection` to reach it and says in `X-Consistency` whether
 * it did (`stale`: the read answers with what the read model has). Without a position it neither
 * waits nor sends the header. Every read that takes the position answers it this one way.
 */
export async function awaitMinPosition(
  request: FastifyRequest,
  reply: FastifyReply,
  deps: ReadYourWritesDeps,
  projection: string,
  asked: string | GlobalPosition | undefined,
): Promise<void> {
  if (asked === undefined) return;
  const position = typeof asked === 'string' ? parsePosition(asked) : asked;
  if (!position) throw new BadRequestError('X-Min-Position must be a log position as returned by a write');
  const reached = await waitOnPurpose(request, () => waitForCheckpoint(deps.pool, projection, position, deps.readWaitMs));
  reply.header('x-consistency', reached ? 'consistent' : 'stale');
}
