/**
 * The one e-mail normalisation of the service: Unicode NFKC, trimmed,
 * lower-cased by JavaScript's locale-independent `toLowerCase`. Uniqueness (employees'
 * reservation streams, `users.email_key`), login lookups and the login throttle's keys all use
 * this value, so no two of them can disagree about which account an address names. Not
 * PostgreSQL `lower()`: it maps `İ` to `i` while JavaScript maps it to `i̇`, so a lookup by
 * `lower()` would let `admİn@…` reach the admin account under a throttle key of its own.
 */
export const normaliseEmail = (email: string): string => email.normalize('NFKC').trim().toLowerCase();
