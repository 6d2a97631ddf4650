import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { authorize } from './permissions.ts';
import { AwsSimError } from './query.ts';
import { AwsWorld } from './world.ts';

describe('simulated IAM refusals', () => {
  const world = new AwsWorld('111122223333', 'us-east-1');
  const key = world.addUser('control-plane', {
    deniedActions: ['ec2:DescribeLaunchTemplates', 'autoscaling:DescribeWarmPool'],
  }).accessKeyId;
  const principal = world.principal(key);
  assert.ok(principal);
  const refusal = (service: 'ec2' | 'autoscaling', action: string) => {
    try {
      authorize(principal, service, action);
    } catch (err) {
      assert.ok(err instanceof AwsSimError);
      return [err.code, err.status, err.message];
    }
    return undefined;
  };

  it('EC2 answers UnauthorizedOperation, the Query services AccessDenied, both 403 naming the action', () => {
    const [code, status, message] = refusal('ec2', 'DescribeLaunchTemplates') ?? [];
    assert.deepEqual([code, status], ['UnauthorizedOperation', 403]);
    assert.match(
      String(message),
      /^You are not authorized to perform this operation\. User: arn:aws:iam::111122223333:user\/control-plane is not authorized to perform: ec2:DescribeLaunchTemplates /,
    );
    assert.deepEqual(refusal('autoscaling', 'DescribeWarmPool')?.slice(0, 2), ['AccessDenied', 403]);
  });

  it('allows every action not denied', () => {
    assert.equal(refusal('ec2', 'DescribeInstances'), undefined);
    assert.equal(refusal('autoscaling', 'DescribeAutoScalingGroups'), undefined);
  });
});
