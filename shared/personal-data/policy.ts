import type { DataSubject } from './dataKeys.ts';

/**
 * What is personal in a capability's events, as its contract publishes it: the composition root
 * hands it to the sealing boundary of the event store (shared/event-store/sealing.ts).
 */
export type PersonalDataPolicy = {
  /** For each event type that carries personal data, its personal top-level `data` fields (string values). */
  readonly fields: Readonly<Record<string, readonly string[]>>;
  /** Whose key seals the personal fields of a stream's events; undefined for a stream without a subject. */
  subjectOf(streamId: string): DataSubject | undefined;
};

/** Several capabilities' policies as one (each event type and stream belongs to one of them). */
export function combinePolicies(policies: readonly PersonalDataPolicy[]): PersonalDataPolicy {
  const fields: Record<string, readonly string[]> = {};
  for (const policy of policies) Object.assign(fields, policy.fields);
  return {
    fields,
    subjectOf: (streamId) => {
      for (const policy of policies) {
        const subject = policy.subjectOf(streamId);
        if (subject) return subject;
      }
      return undefined;
    },
  };
}

/**
 * `data` with each of `fields` it holds set to null (the redacted form of an erased person's
 * event); data that is not an object is returned as it is.
 */
export function withFieldsNull(data: unknown, fields: readonly string[]): unknown {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return data;
  const blanked: Record<string, unknown> = { ...data };
  for (const field of fields) if (field in blanked) blanked[field] = null;
  return blanked;
}
