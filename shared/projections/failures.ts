import {
  BackendTerminatedError,
  BackendTerminatedUnexpectedlyError,
  ConnectionError,
  IdleTransactionTimeoutError,
  StatementCancelledError,
  StatementTimeoutError,
} from 'slonik';
import { sqlStateOf } from '../db/sqlState.ts';

/**
 * Why a page failed decides what the runner does with it:
 *
 * - transient: the database, not the event, is the problem (serialization failure, deadlock,
 *   lost or refused connection, server shutting down, out of resources, cancelled statement), or
 *   another transaction must commit first (RetryLaterError).
 *   The page is retried as it is, with backoff, for as long as it takes; nothing is parked.
 * - deterministic: anything else, i.e. the event cannot be applied by this code (SQLSTATE class
 *   22 data exception, 23 integrity violation, a handler that throws). Retried a bounded number
 *   of times, then parked.
 */
export type FailureKind = 'transient' | 'deterministic';

/** Not the event's fault and soon over (another transaction must commit first): the page is tried again, read afresh. */
export class RetryLaterError extends Error {
  override readonly name = 'RetryLaterError';
}

/** SQLSTATE classes (first two characters) and codes that say "try again later". */
const TRANSIENT_CLASSES = new Set(['08', '53', '57', '58']);
const TRANSIENT_CODES = new Set(['40001', '40P01', '55P03', '25P03']);

const transientErrorClasses = [
  RetryLaterError,
  BackendTerminatedError,
  BackendTerminatedUnexpectedlyError,
  ConnectionError,
  IdleTransactionTimeoutError,
  StatementCancelledError,
  StatementTimeoutError,
];

export function classifyFailure(error: unknown): FailureKind {
  let current: unknown = error;
  for (let depth = 0; depth < 8 && current instanceof Error; depth++) {
    if (transientErrorClasses.some((type) => current instanceof type)) return 'transient';
    current = current.cause;
  }
  const state = sqlStateOf(error);
  if (state && (TRANSIENT_CODES.has(state) || TRANSIENT_CLASSES.has(state.slice(0, 2)))) return 'transient';
  // pg reports a dropped socket without a SQLSTATE.
  if (error instanceof Error && /Connection terminated|ECONNRESET|ECONNREFUSED|socket hang up/i.test(error.message)) return 'transient';
  return 'deterministic';
}

/** One line for an operator: the message and, when known, the SQLSTATE; never longer than 2,000 characters. */
export function describeFailure(error: unknown): string {
  const state = sqlStateOf(error);
  const innermost = (() => {
    let current: unknown = error;
    // slonik wraps driver errors; the driver's message names the actual problem.
    while (current instanceof Error && current.cause instanceof Error) current = current.cause;
    return current;
  })();
  const message = error instanceof Error ? error.message : String(error);
  const detail = innermost instanceof Error && innermost !== error && innermost.message !== message ? `: ${innermost.message}` : '';
  // Stored in a text column: PostgreSQL text refuses NUL.
  const text = `${state ? `[${state}] ` : ''}${message}${detail}`.replaceAll('\u0000', '\\u0000');
  return text.length > 2_000 ? `${text.slice(0, 1_997)}...` : text;
}
