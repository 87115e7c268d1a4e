import { ignoredRows, sql } from '../db/pool.ts';
import type { Projection } from './projection.ts';

export type CommitMode = 'on' | 'off';

/**
 * The `synchronous_commit` a projection's writes commit with, live pages and operator retries
 * alike, whatever the database's default: durable for a projection that asks for it
 * (`durablePages`), asynchronous otherwise (a crash only sets such a model back, and the
 * projector applies the lost pages again from the log).
 */
export const pageCommitMode = (projection: Pick<Projection<string>, 'durablePages'>): CommitMode =>
  projection.durablePages ? 'on' : 'off';

/** Sets the commit mode of the transaction it runs in (and of nothing after it). */
export const setCommitMode = (mode: CommitMode) => sql.type(ignoredRows)`select set_config('synchronous_commit', ${mode}, true)`;
