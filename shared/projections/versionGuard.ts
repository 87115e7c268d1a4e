import type { Checkpoint } from './checkpoints.ts';
import type { Projection } from './projection.ts';

/**
 * Thrown when the stored model was built by a newer version of a projection than this code's:
 * during a rolling deploy the old projector must stop, not rebuild the model back.
 */
export class ProjectionSupersededError extends Error {
  readonly projection: string;
  readonly storedVersion: number;
  readonly codeVersion: number;
  constructor(projection: string, storedVersion: number, codeVersion: number) {
    super(
      `projection ${projection} is built at version ${storedVersion}, newer than this code's version ${codeVersion}: not rebuilding it`,
    );
    this.name = 'ProjectionSupersededError';
    this.projection = projection;
    this.storedVersion = storedVersion;
    this.codeVersion = codeVersion;
  }
}

/** The version guard: never replace a model built by a newer version with an older one. */
export function assertNotSuperseded(
  checkpoint: Pick<Checkpoint, 'version'> | null,
  projection: Pick<Projection, 'name' | 'version'>,
): void {
  if (checkpoint && checkpoint.version > projection.version) {
    throw new ProjectionSupersededError(projection.name, checkpoint.version, projection.version);
  }
}
