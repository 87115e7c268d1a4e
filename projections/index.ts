import type { Projection } from './runner/projection.ts';

/** Every projection the service keeps live. */
export const allProjections: readonly Projection[] = [];
