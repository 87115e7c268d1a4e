/**
 * The permission matrix: the ONE place that says which role may do what (docs/rbac.md shows
 * the same table). Routes name the permission they need in `config.permission`; the
 * authenticated scope refuses to register a route that names none.
 */
export const PERMISSIONS = [
  'employees:read',
  'employees:write',
  /** Erasing a person (their right to erasure): irreversible, so admin only. */
  'employees:erase',
  'analytics:read',
  /** Billing-event ingestion and other analytics inputs. */
  'analytics:write',
  'roles:read',
  /** Ending one's own session (logout); every role has it. */
  'session:end',
  /** Giving a person a role (`roleId` on POST /v1/employees): admin only, or an hr_manager could make anyone admin. */
  'roles:assign',
  /** Registering, listing, deleting and replaying webhook endpoints: admin only. */
  'webhooks:manage',
] as const;

export type Permission = (typeof PERMISSIONS)[number];

export const BUILT_IN_ROLES = ['admin', 'hr_manager', 'analyst', 'employee'] as const;

export type RoleName = (typeof BUILT_IN_ROLES)[number];

export const ROLE_PERMISSIONS: Readonly<Record<RoleName, readonly Permission[]>> = {
  admin: PERMISSIONS,
  hr_manager: ['employees:read', 'employees:write', 'roles:read', 'session:end'],
  analyst: ['employees:read', 'analytics:read', 'roles:read', 'session:end'],
  employee: ['employees:read', 'roles:read', 'session:end'],
};

const isRoleName = (name: string): name is RoleName => (BUILT_IN_ROLES as readonly string[]).includes(name);

export const isPermission = (value: unknown): value is Permission =>
  typeof value === 'string' && (PERMISSIONS as readonly string[]).includes(value);

/** Whether any of `roles` grants `permission`. Unknown role names grant nothing. */
export function rolesAllow(roles: readonly string[], permission: Permission): boolean {
  return roles.some((role) => isRoleName(role) && ROLE_PERMISSIONS[role].includes(permission));
}

export function permissionsOf(role: string): readonly Permission[] {
  return isRoleName(role) ? ROLE_PERMISSIONS[role] : [];
}
