import type { Projection } from '../shared/projections/projection.ts';
import { employeesProjection } from './employees/employeesProjection.ts';
import { kpiBillingProjection } from './kpi/billingProjection.ts';
import { changesProjection } from './changes/changesProjection.ts';
import { roleAssignmentReactor } from '../services/auth/roleAssignmentReactor.ts';

/** Every projection the service keeps live. */
export const allProjections: readonly Projection[] = [employeesProjection, kpiBillingProjection, changesProjection, roleAssignmentReactor];
