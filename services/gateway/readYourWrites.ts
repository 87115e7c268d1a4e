import type { FastifyReply, FastifyRequest } from 'fastify';
import type { DatabasePool } from '../../shared/db/pool.ts';
import { BadRequestError } from '../../shared/errors.ts';
import { parsePosition, type GlobalPosition } from '../../shared/event-store/port.ts';
import { waitForCheckpoint } from '../../shared/projections/readYourWrites.ts';
import { waitOnPurpose } from './requestContext.ts';

export type ReadYourWritesDeps = { readonly pool: DatabasePool; readonly readWaitMs: number };

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
