import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
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
import { capturedLogger } from '../testing/log-capture.ts';
import {
  DependencyOutages,
  defaultRetryAfterSeconds,
  dependencyFault,
  dependencyOf,
  faultDetail,
  faultOfPolicy,
  isCloudVerdict,
  isDependencyFault,
  isTransientFailure,
  outageRetryAfterSeconds,
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

test('the wait an outage tells grows with its length: 2–5 s at first, a quarter of it later, 30–60 s from four minutes on', () => {
  const range = (elapsedMs: number) => [
    outageRetryAfterSeconds(elapsedMs, () => 0),
    outageRetryAfterSeconds(elapsedMs, (n) => n - 1),
  ];
  assert.deepEqual(range(0), [2, 5]);
  assert.deepEqual(range(20_000), [2, 5]);
  assert.deepEqual(range(60_000), [7, 15]);
  assert.deepEqual(range(120_000), [15, 30]);
  assert.deepEqual(range(240_000), [30, 60]);
  assert.deepEqual(range(86_400_000), [30, 60], 'capped at 60 s');
});

test('a grown fault tells the node the same wait in its message as in Retry-After, and is never shortened', () => {
  const fault = faultOfPolicy('aws', dependencyFault('sts', new Error('x')));
  const grown = fault.waitingAtLeast(42);
  assert.equal(grown.retryAfterSeconds, 42);
  assert.match(
    grown.message,
    /^AWS STS is unavailable, so the request cannot be decided now; retry in 42 s$/,
  );
  assert.deepEqual([grown.dependency, policyOf(grown), grown.cause], ['sts', 'aws', fault.cause]);
  assert.equal(fault.waitingAtLeast(1), fault);
});

describe('DependencyOutages', () => {
  function outages() {
    let now = 0;
    const { logger, lines } = capturedLogger({ level: 'debug' });
    const tracked = new DependencyOutages({ logger, now: () => now, randomInt: (n) => n - 1 });
    const warnings = () =>
      lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((r) => r['level'] === 'warn');
    return { tracked, warnings, at: (ms: number) => (now = ms) };
  }
  const sts = () => dependencyFault('sts', new UnavailableError('STS failed (ServiceUnavailable: down)'));

  test('each dependency has its own outage, and its own line', () => {
    const { tracked, warnings, at } = outages();
    for (let t = 0; t <= 300_000; t += 5_000) {
      at(t);
      tracked.failed(sts());
    }
    assert.equal(tracked.failed(sts()).retryAfterSeconds, 60, 'five minutes into the STS outage');
    const ec2 = tracked.failed(dependencyFault('ec2', new UnavailableError('HTTP 503')));
    assert.equal(ec2.retryAfterSeconds, 5, 'the first EC2 fault begins an outage of its own');
    assert.deepEqual(
      warnings().map((r) => [r['dependency'], r['err'], r['failures']]),
      [
        ['sts', 'AWS STS is unavailable', 1],
        ['ec2', 'the EC2 API is unavailable', 1],
      ],
    );
  });

  test("a fault about one request keeps its own wait and neither begins nor lengthens an outage: a dependency's Retry-After, a node's callback server", () => {
    const { tracked, at } = outages();
    const asked = () =>
      dependencyFault('ec2', new UnavailableError('EC2 does not list i-1 yet', { retryAfterSeconds: 10 }));
    const callback = () =>
      dependencyFault('node-callback', new UnavailableError('no answer'), 'your callback');
    for (let t = 0; t <= 600_000; t += 5_000) {
      at(t);
      assert.equal(tracked.failed(asked()).retryAfterSeconds, 10);
      assert.ok(tracked.failed(callback()).retryAfterSeconds <= 5);
    }
    // EC2 itself failing now is the start of an outage, not ten minutes into one.
    assert.equal(
      tracked.failed(dependencyFault('ec2', new UnavailableError('HTTP 503'))).retryAfterSeconds,
      5,
    );
  });

  test('a different cause of the same dependency is the same outage and the same line (causes name nodes)', () => {
    const { tracked, warnings, at } = outages();
    for (let i = 0; i < 50; i++) {
      at(i * 1000);
      tracked.failed(
        dependencyFault('kubernetes-api', new UnavailableError(`read node node-${i}: HTTP 503`)),
        {
          requestId: `r${i}`,
        },
      );
    }
    const written = warnings();
    assert.equal(written.length, 1);
    assert.equal(written[0]?.['requestId'], 'r0');
    assert.equal(written[0]?.['detail'], 'read node node-0: HTTP 503');
  });
});
