import assert from 'node:assert/strict';
import { createPublicKey } from 'node:crypto';
import { after, before, test } from 'node:test';
import { OAuth2Client } from 'google-auth-library';
import { Registry } from 'prom-client';
import { isTransientFailure } from '../../bootstrap/dependency.ts';
import {
  ConfigError,
  exitCodeOf,
  ForbiddenError,
  NotFoundError,
  RateLimitedError,
  UnauthenticatedError,
  UnavailableError,
} from '../../errors.ts';
import { simulatorAuth, simulatorCompute } from '../../sim/gce/clients.ts';
import { type GceSimulator, startGceSimulator } from '../../sim/gce/simulator.ts';
import { cloudCallsTimed, cloudRequests } from '../../testing/cloud-calls.ts';
import { withLocalGoogleCredentials } from '../../testing/google-env.ts';
import { outcomeWithin, silentServer } from '../../testing/silent-server.ts';
import { cloudCallMetrics } from '../metrics.ts';
import { ComputeClient, defaultAuthClient, lastComponent, metadataValue } from './compute.ts';

let sim: GceSimulator;
before(async () => {
  sim = await startGceSimulator({ project: 'p-compute' });
  sim.world.seedInstanceGroup({ zone: 'us-east4-a', instanceGroup: 'nodes', count: 700, clusterName: 'c' });
  sim.world.seedInstanceGroup({ zone: 'us-east4-b', instanceGroup: 'nodes', count: 400, clusterName: 'c' });
});
after(() => sim.close());

test('aggregated and zonal lists follow every page', async () => {
  const compute = simulatorCompute(sim);
  sim.clearCalls();
  assert.equal((await compute.aggregatedListInstances()).length, 1_100);
  assert.equal(sim.count('instances.aggregatedList'), 3);
  assert.equal((await compute.listInstances('us-east4-a')).length, 700);
  assert.equal((await compute.listManagedInstances('us-east4-b', 'a-nodes-us-east4-b')).length, 400);
  assert.equal((await compute.aggregatedListInstanceGroupManagers()).length, 2);
});

test('a preset access token works as well as a refresh token', async () => {
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: sim.accessToken, expiry_date: Date.now() + 3_600_000 });
  const compute = new ComputeClient({ project: 'p-compute', auth, endpoint: sim.endpoint });
  const template = await compute.getInstanceTemplate('nodes-us-east4-a-tpl');
  assert.equal(metadataValue(template.properties?.metadata, 'kops-k8s-io-instance-group-name'), 'nodes');
});

test('the shielded instance identity carries the vTPM signing key', async () => {
  const name = sim.world.instances('p-compute', 'us-east4-a')[0]?.name as string;
  const identity = await simulatorCompute(sim).getShieldedInstanceIdentity('us-east4-a', name);
  const expected = createPublicKey(sim.world.shieldedKeys('p-compute', 'us-east4-a', name).signing);
  assert.ok(createPublicKey(identity.signingKey?.ekPub ?? '').equals(expected));
});

test('API errors become typed errors that name the call', async () => {
  const compute = simulatorCompute(sim);
  await assert.rejects(compute.getInstance('us-east4-a', 'missing'), (err: Error) => {
    assert.ok(err instanceof NotFoundError);
    assert.match(err.message, /compute instances\.get zones\/us-east4-a\/instances\/missing: The resource/);
    return true;
  });
  // The filter is the controller's own: the API refusing it is a fault, not the node's input.
  await assert.rejects(compute.listInstances('us-east4-a', 'name ='), UnavailableError);
  sim.failNext(1, 403);
  await assert.rejects(compute.getInstanceTemplate('x'), (err: Error) => {
    assert.ok(err instanceof ForbiddenError);
    assert.match(err.message, /grant the controller's service account compute\.instanceTemplates\.get/);
    return true;
  });
  sim.failNext(2, 429);
  await assert.rejects(compute.getInstanceTemplate('x'), RateLimitedError);
  const unauthenticated = new OAuth2Client();
  unauthenticated.setCredentials({ access_token: 'ya29.stale', expiry_date: Date.now() + 3_600_000 });
  const stale = new ComputeClient({ project: 'p-compute', auth: unauthenticated, endpoint: sim.endpoint });
  await assert.rejects(stale.getInstance('us-east4-a', 'x'), UnauthenticatedError);
});

/** A client counting into its own registry, retrying once (two attempts per call). */
function countedCompute() {
  const registry = new Registry();
  const compute = new ComputeClient({
    project: 'p-compute',
    auth: simulatorAuth(sim),
    endpoint: sim.endpoint,
    retries: 1,
    retryDelayMs: 5,
    cloudCalls: cloudCallMetrics(registry),
  });
  return { compute, registry };
}

test('every request is counted by operation and result, a throttled attempt that a retry follows included', async () => {
  const { compute, registry } = countedCompute();
  const name = sim.world.instances('p-compute', 'us-east4-a')[0]?.name as string;
  await compute.getInstance('us-east4-a', name);
  sim.failNext(1, 429);
  await compute.getInstanceTemplate('nodes-us-east4-a-tpl');
  sim.failNext(2, 429);
  await assert.rejects(compute.getInstanceTemplate('nodes-us-east4-a-tpl'), RateLimitedError);
  await assert.rejects(compute.getInstance('us-east4-a', 'missing'), NotFoundError);
  sim.failNext(2, 503);
  await assert.rejects(compute.listManagedInstances('us-east4-b', 'a-nodes-us-east4-b'));
  // 700 instances are two pages: two requests.
  await compute.listInstances('us-east4-a');
  assert.deepEqual(await cloudRequests(registry), {
    'gce instances.get ok': 1,
    'gce instanceTemplates.get throttled': 3,
    'gce instanceTemplates.get ok': 1,
    'gce instances.get rejected': 1,
    'gce instanceGroupManagers.listManagedInstances error': 2,
    'gce instances.list ok': 2,
  });
  assert.equal(await cloudCallsTimed(registry, 'gce', 'instanceTemplates.get'), 2);
});

// Compute Engine answers an exhausted rate quota with 403 (reason rateLimitExceeded or
// userRateLimitExceeded, domain usageLimits), not 429: cloud.google.com/compute/api-quota.
test('a rate-quota 403 is throttling: retried, and counted as throttled, and the call succeeds', async () => {
  for (const reason of ['rateLimitExceeded', 'userRateLimitExceeded']) {
    const { compute, registry } = countedCompute();
    sim.clearCalls();
    sim.failNext(1, 403, 'instanceTemplates.get', { reason });
    const template = await compute.getInstanceTemplate('nodes-us-east4-a-tpl');
    assert.equal(template.name, 'nodes-us-east4-a-tpl', reason);
    assert.equal(sim.count('instanceTemplates.get'), 2, `${reason}: retried once`);
    assert.deepEqual(
      await cloudRequests(registry),
      { 'gce instanceTemplates.get throttled': 1, 'gce instanceTemplates.get ok': 1 },
      reason,
    );
  }
});

test('a rate quota exhausted on every attempt fails the call as rate-limited (a transient fault), not as a missing permission', async () => {
  const { compute, registry } = countedCompute();
  sim.clearCalls();
  sim.failNext(2, 403, 'instances.get', { reason: 'rateLimitExceeded' });
  const name = sim.world.instances('p-compute', 'us-east4-a')[0]?.name as string;
  await assert.rejects(compute.getInstance('us-east4-a', name), (err: Error) => {
    assert.ok(err instanceof RateLimitedError, `${err.name}: ${err.message}`);
    assert.equal(err.kind, 'rate-limited');
    assert.match(err.message, /compute instances\.get .*: Quota exceeded for quota metric/);
    assert.match(err.message, /the compute API quota is exhausted, retry later/);
    assert.doesNotMatch(err.message, /grant the controller's service account/);
    // What the bootstrap answers 503 with Retry-After for, and the controllers retry.
    assert.ok(isTransientFailure(err));
    return true;
  });
  assert.equal(sim.count('instances.get'), 2, 'both attempts were made');
  assert.deepEqual(await cloudRequests(registry), { 'gce instances.get throttled': 2 });
});

test('a permission 403 (forbidden, insufficientPermissions) stays a ForbiddenError and is not retried', async () => {
  for (const reason of [undefined, 'forbidden', 'insufficientPermissions']) {
    const { compute, registry } = countedCompute();
    sim.clearCalls();
    sim.failNext(1, 403, 'instanceTemplates.get', reason ? { reason } : {});
    await assert.rejects(compute.getInstanceTemplate('nodes-us-east4-a-tpl'), (err: Error) => {
      assert.ok(err instanceof ForbiddenError, `${reason}: ${err.name}`);
      assert.match(err.message, /grant the controller's service account compute\.instanceTemplates\.get/);
      return true;
    });
    assert.equal(sim.count('instanceTemplates.get'), 1, `${reason}: not retried`);
    assert.deepEqual(await cloudRequests(registry), { 'gce instanceTemplates.get rejected': 1 }, reason);
  }
});

test('lastComponent takes the name off a resource URL', () => {
  assert.equal(
    lastComponent('https://www.googleapis.com/compute/v1/projects/p/zones/us-east4-a'),
    'us-east4-a',
  );
  assert.equal(lastComponent('plain'), 'plain');
});

test('an API that accepts the connection and never answers: the call ends at its timeout, as unavailable, its connection closed', async () => {
  const silent = await silentServer();
  const hung = new ComputeClient({
    project: 'p-compute',
    auth: simulatorAuth(sim),
    endpoint: silent.endpoint,
    retries: 0,
    requestTimeoutMs: 300,
  });
  try {
    const started = Date.now();
    const outcome = await outcomeWithin(hung.listInstances('us-east4-a'), 5_000);
    assert.ok(!outcome.pending, 'still pending 5 s after its 300 ms timeout');
    assert.ok(Date.now() - started < 2_000, `failed after ${Date.now() - started} ms`);
    assert.equal((outcome.error as Error).name, 'UnavailableError', String(outcome.error));
    for (let i = 0; i < 100 && silent.open() > 0; i++)
      await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(silent.open(), 0, 'the request still holds its connection');
  } finally {
    silent.close();
  }
});

test('closing the client ends a call waiting on a silent API at once, and refuses the next without a request', async () => {
  const silent = await silentServer();
  const hung = new ComputeClient({
    project: 'p-compute',
    auth: simulatorAuth(sim),
    endpoint: silent.endpoint,
    retries: 3,
    requestTimeoutMs: 60_000,
  });
  try {
    const waiting = outcomeWithin(hung.listInstances('us-east4-a'), 5_000);
    for (let i = 0; i < 100 && silent.accepted() === 0; i++)
      await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(silent.accepted(), 1, 'the call never reached the API');
    const closed = Date.now();
    hung.close();
    const outcome = await waiting;
    assert.ok(!outcome.pending, 'still pending 5 s after the client was closed');
    assert.ok(Date.now() - closed < 1_000, `ended ${Date.now() - closed} ms after close`);
    assert.equal((outcome.error as Error).name, 'UnavailableError', String(outcome.error));
    for (let i = 0; i < 100 && silent.open() > 0; i++)
      await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(silent.open(), 0, 'the aborted call still holds its connection');
    await assert.rejects(hung.listInstances('us-east4-b'), { name: 'UnavailableError', message: /closed/ });
    assert.equal(silent.accepted(), 1, 'a call after close reached the API (or the first was retried)');
  } finally {
    silent.close();
  }
});

test('missing credentials are typed errors: an unreadable GOOGLE_APPLICATION_CREDENTIALS is the configuration (78), none at all a dependency (69)', async () => {
  await withLocalGoogleCredentials({ GOOGLE_APPLICATION_CREDENTIALS: '/nonexistent/key.json' }, () =>
    assert.rejects(
      defaultAuthClient(),
      (err: unknown) =>
        err instanceof ConfigError &&
        exitCodeOf(err) === 78 &&
        /GOOGLE_APPLICATION_CREDENTIALS/.test(err.message) &&
        err.message.includes('/nonexistent/key.json'),
    ),
  );
  await withLocalGoogleCredentials({}, () =>
    assert.rejects(
      defaultAuthClient(),
      (err: unknown) =>
        err instanceof UnavailableError &&
        exitCodeOf(err) === 69 &&
        /no Google credentials/.test(err.message),
    ),
  );
});
