/**
 * The one e-mail normalisation of the service (issue 10, defect 8): Unicode NFKC, trimmed,
 * lower-cased by JavaScript's locale-independent `toLowerCase`. Uniqueness (employees'
 * reservation streams, `users.email_key`), login lookups and the login throttle's keys all use
 * this value, so no two of them can disagree about which account an address names. (The old
 * lookup used PostgreSQL `lower()`, which maps `İ` to `i` while JavaScript maps it to `i̇`: an
 * `admİn@…` reached the admin account under a throttle key of its own.)
 */
export const normaliseEmail = (email: string): string => email.normalize('NFKC').trim().toLowerCase();
