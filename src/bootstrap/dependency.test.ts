import assert from 'node:assert/strict';
import { test } from 'node:test';
import { withDeadline } from '../deadline.ts';
import {
  ConfigError,
  ForbiddenError,
  InvalidInputError,
  NotFoundError,
  RateLimitedError,
  TimeoutError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import {
  defaultRetryAfterSeconds,
  dependencyFault,
  dependencyOf,
  faultDetail,
  faultOfPolicy,
  isCloudVerdict,
  isDependencyFault,
  isTransientFailure,
  policyOf,
} from './dependency.ts';

test('a fault names its dependency to the node, keeps its cause for the operator, and asks for 2 to 5 s', () => {
  const fault = dependencyFault('sts', new Error('connect ECONNREFUSED 10.0.0.1:443'));
  assert.ok(isDependencyFault(fault));
  assert.equal(fault.kind, 'unavailable');
  assert.equal(dependencyOf(fault), 'sts');
  assert.match(
    fault.message,
    /^AWS STS is unavailable, so the request cannot be decided now; retry in [2-5] s$/,
  );
  assert.doesNotMatch(fault.message, /10\.0\.0\.1/, 'the cause is not told to the node');
  assert.match(faultDetail(fault), /ECONNREFUSED/);
  const seconds = new Set(Array.from({ length: 200 }, () => defaultRetryAfterSeconds()));
  assert.deepEqual([...seconds].sort(), [2, 3, 4, 5], 'spread over 2..5 s');
  assert.equal(dependencyFault('ec2', fault), fault, 'a fault is not wrapped twice');
});

test("never sooner than the dependency's own Retry-After, and at most 60 s", () => {
  const asked = (seconds: number) =>
    dependencyFault(
      'kubernetes-api',
      new RateLimitedError('HTTP 429', { details: { retryAfterSeconds: seconds } }),
    ).details?.['retryAfterSeconds'];
  assert.equal(asked(30), 30);
  assert.equal(asked(3600), 60);
  assert.ok((asked(1) as number) >= 2, 'a 1 s hint is still spread');
});

test('a fault met by a policy says which policy; a policy that names nothing is the dependency', () => {
  const named = faultOfPolicy('aws', dependencyFault('sts', new Error('x')));
  assert.equal(policyOf(named), 'aws');
  assert.equal(dependencyOf(named), 'sts');
  const unnamed = faultOfPolicy('bootstrap-token', new UnavailableError('HTTP 503'));
  assert.equal(dependencyOf(unnamed), 'policy:bootstrap-token');
  assert.match(unnamed.message, /^a dependency of policy bootstrap-token is unavailable/);
  assert.equal(policyOf(dependencyFault('sts', new Error('x'))), undefined);
});

test('transient failures are unavailable, throttled or timed out; nothing else', () => {
  for (const err of [new UnavailableError('x'), new RateLimitedError('x'), new TimeoutError('x')])
    assert.ok(isTransientFailure(err), err.name);
  for (const err of [new ForbiddenError('x'), new ConfigError('x'), new Error('x')])
    assert.ok(!isTransientFailure(err), err.name);
});

test("a cloud's verdict on the instance versus the cloud refusing the controller itself", () => {
  assert.ok(isCloudVerdict(new NotFoundError('no such instance')));
  assert.ok(isCloudVerdict(new ForbiddenError('instance i-1 is stopped')));
  assert.ok(isCloudVerdict(new InvalidInputError('malformed id')));
  assert.ok(!isCloudVerdict(new ForbiddenError('grant compute.instances.get', { details: { status: 403 } })));
  assert.ok(!isCloudVerdict(new UnauthenticatedError('bad credentials', { details: { httpStatus: 401 } })));
  assert.ok(!isCloudVerdict(new ConfigError('grant ec2:DescribeInstances')));
  assert.ok(!isCloudVerdict(new UnavailableError('HTTP 503')));
  assert.ok(!isCloudVerdict(new Error('socket hang up')));
});

test('withDeadline: the answer when it comes in time, else a TimeoutError naming the call', async () => {
  assert.equal(await withDeadline(Promise.resolve(7), 1_000, 'fast'), 7);
  await assert.rejects(
    withDeadline(new Promise(() => undefined), 20, 'EC2 DescribeInstances i-1'),
    (err: unknown) =>
      err instanceof TimeoutError && /EC2 DescribeInstances i-1: no answer within 20 ms/.test(err.message),
  );
  await assert.rejects(withDeadline(Promise.reject(new NotFoundError('gone')), 1_000, 'x'), NotFoundError);
});
