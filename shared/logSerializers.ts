import pino from 'pino';
import { sqlStateOf } from './db/sqlState.ts';

/** What a request line is given: Fastify's request (or Node's, which has no route). */
export type LoggedRequest = {
  readonly method?: string | undefined;
  readonly url?: string | undefined;
  readonly routeOptions?: { readonly url?: string | undefined } | undefined;
};

/**
 * A request as a log line carries it: method, path and route. Not the query string (a filter or
 * a search may name a person: `?email=`), nor the client's address and port, which Fastify's own
 * serializer adds; the line's bindings carry the request id.
 */
export function requestForLog(req: LoggedRequest): Record<string, string | undefined> {
  return { method: req.method, url: req.url?.split('?')[0], route: req.routeOptions?.url };
}

/**
 * The fields of an error a log line leaves out, because they quote data: the row and bound values
 * that slonik's errors carry, and PostgreSQL's `detail` and `where` where they quote it (below).
 * Type, message, stack, SQLSTATE `code`, and the constraint, table and column names stay: they
 * say what failed without saying whose.
 */
const WITHHELD_ERROR_FIELDS = ['row', 'values'] as const;

/**
 * A `detail` quotes values for data exceptions and integrity violations (SQLSTATE classes 22 and
 * 23: `Key (email)=(…) already exists`), and may for an error that gives no SQLSTATE; otherwise
 * it says which processes deadlocked or what blocked, which operators need.
 */
const detailQuotesData = (sqlState: string | undefined): boolean => sqlState === undefined || /^2[23]/.test(sqlState);

/** A `where` is kept (the PL/pgSQL function and line) unless it is a COPY's, which quotes the failing line. */
const whereQuotesData = (where: unknown): boolean => typeof where !== 'string' || /\bCOPY\b/.test(where);

type SerializedError = pino.SerializedError;

/** What pino's standard serializer treats as an error (it does not ask for `instanceof Error`). */
const isErrorLike = (value: unknown): value is Error =>
  typeof value === 'object' && value !== null && typeof (value as { message?: unknown }).message === 'string';

/** `err` as pino's standard serializer writes it (type, message and stack with their causes', own fields), less WITHHELD_ERROR_FIELDS. */
export function errorForLog(err: unknown): unknown {
  if (!isErrorLike(err)) return err;
  const line = withheld(pino.stdSerializers.err(err), err);
  // slonik's errors hold PostgreSQL's SQLSTATE only on their cause, which the line folds into its message and stack.
  const sqlState = sqlStateOf(err);
  if (sqlState !== undefined && line.code === undefined) line.sqlState = sqlState;
  return line;
}

/**
 * Strips `line`, the standard serialization of `err`, and the errors serialized inside it (an
 * AggregateError's, an error held in a field). Those are objects the serializer made, never the
 * error's own, so deleting from them changes nothing the program holds.
 */
function withheld(line: SerializedError, err: Error): SerializedError {
  for (const field of WITHHELD_ERROR_FIELDS) delete line[field];
  if ('detail' in line && detailQuotesData(sqlStateOf(err))) delete line.detail;
  if ('where' in line && whereQuotesData(line.where)) delete line.where;
  const held = err as unknown as Record<string, unknown>;
  for (const [field, value] of Object.entries(line)) stripNested(value, held[field]);
  const errors = held.errors;
  if (Array.isArray(line.aggregateErrors) && Array.isArray(errors)) line.aggregateErrors.forEach((one, i) => stripNested(one, errors[i]));
  return line;
}

/** `serialized` is the serializer's copy of `original` when `original` is an error (it keeps anything else as it is). */
const stripNested = (serialized: unknown, original: unknown): void => {
  if (isErrorLike(original) && serialized !== original) withheld(serialized as SerializedError, original);
};
