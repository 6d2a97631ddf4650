/**
 * What an IAM policy that does not allow an action makes AWS answer: EC2's `UnauthorizedOperation`,
 * the Query services' `AccessDenied`, both HTTP 403 and naming the principal and the action — what
 * the controller sees when its role lacks a permission (kops' control-plane role has no
 * `ec2:DescribeLaunchTemplates` nor `autoscaling:DescribeWarmPool`).
 */
import type { AwsService } from './faults.ts';
import { AwsSimError } from './query.ts';
import type { SimPrincipal } from './world.ts';

/** Throws the service's refusal when the principal may not call `action`. */
export function authorize(principal: SimPrincipal, service: AwsService, action: string): void {
  const permission = `${service}:${action}`;
  if (!principal.deniedActions.has(permission)) return;
  const why =
    `User: ${principal.identity.arn} is not authorized to perform: ${permission} ` +
    `because no identity-based policy allows the ${permission} action`;
  if (service === 'ec2') {
    throw new AwsSimError(
      'UnauthorizedOperation',
      `You are not authorized to perform this operation. ${why}`,
      403,
    );
  }
  throw new AwsSimError('AccessDenied', why, 403);
}
