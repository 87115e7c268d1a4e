import type { Projection } from '../shared/projections/projection.ts';
import { employeesProjection } from '../projections/employees/employeesProjection.ts';
import { kpiBillingProjection } from '../projections/kpi/billingProjection.ts';
import { changesProjection } from '../projections/changes/changesProjection.ts';
import { workforceProjection } from '../projections/workforce/workforceProjection.ts';
import { roleAssignmentReactor } from './auth/roleAssignmentReactor.ts';

/**
 * Every projection the service keeps live, read models and reactors alike. The list sits in the
 * composition root because it names both sides: the read models and the auth capability's reactor.
 */
export const allProjections: readonly Projection[] = [
  employeesProjection,
  workforceProjection,
  kpiBillingProjection,
  changesProjection,
  roleAssignmentReactor,
];
