import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ConfigError, UnauthenticatedError } from '../../errors.ts';
import { type OpenStackSimulator, startOpenStackSimulator } from '../../sim/openstack/simulator.ts';
import { openstackAuthFromEnv } from './auth.ts';
import { createOpenStackProvider } from './provider.ts';

const cluster = 'prod.example.com';
let sim: OpenStackSimulator;
before(async () => {
  sim = await startOpenStackSimulator();
});
after(() => sim.close());

test('the provider identifies nodes and lists groups with the OS_* credentials, counting its calls', async () => {
  const node = sim.addServer({
    name: 'nodes-1',
    metadata: { KubernetesCluster: cluster, KopsInstanceGroup: 'nodes' },
  });
  const counted: string[] = [];
  const provider = createOpenStackProvider({
    clusterName: cluster,
    auth: openstackAuthFromEnv(sim.env),
    cloudCalls: {
      request: (cloud, call, result) => counted.push(`${cloud}/${call}/${result}`),
      duration: () => undefined,
    },
  });
  const providerID = `openstack:///${node.id}`;
  const result = (await provider.nodeIdentifier.identify([providerID])).get(providerID);
  assert.equal(result?.ok && result.identity.instanceGroup, 'nodes');
  assert.deepEqual(
    (await provider.cloudGroups.list(cluster)).map((g) => [g.instanceGroup, g.members.length]),
    [['nodes', 1]],
  );
  assert.deepEqual(counted, [
    'openstack/tokens.create/ok',
    'openstack/servers.get/ok',
    'openstack/servers.list/ok',
  ]);
  provider.close();
});

/**
 * What an operator meets with the project missing or misspelt in the `OS_*` environment: start-up
 * succeeds (the provider authenticates lazily), and every cloud call then fails with a typed error
 * that is not retried, one Keystone authentication per call. Those kinds are not cloud verdicts
 * (bootstrap/dependency.ts isCloudVerdict), so a joining node gets 503 and retries, never a denial.
 */
async function failuresWith(env: Record<string, string | undefined>) {
  const node = sim.addServer({
    name: 'nodes-x',
    metadata: { KubernetesCluster: cluster, KopsInstanceGroup: 'nodes' },
  });
  const provider = createOpenStackProvider({ clusterName: cluster, auth: openstackAuthFromEnv(env) });
  sim.clearCalls();
  try {
    const providerID = `openstack:///${node.id}`;
    const identified = (await provider.nodeIdentifier.identify([providerID])).get(providerID);
    assert.ok(identified && !identified.ok, 'the node was identified');
    const listed = await provider.cloudGroups.list(cluster).then(
      () => assert.fail('the groups were listed'),
      (err: unknown) => err,
    );
    return { identifyError: identified.error, listError: listed, calls: sim.calls.map((c) => c.operation) };
  } finally {
    provider.close();
    sim.deleteServer(node.id);
  }
}

test('OS_PROJECT_NAME unset: Keystone issues an unscoped token without a catalog, and every call is a ConfigError', async () => {
  const { OS_PROJECT_NAME: _, OS_PROJECT_DOMAIN_NAME: __, ...env } = sim.env;
  const { identifyError, listError, calls } = await failuresWith(env);
  for (const err of [identifyError, listError]) {
    assert.ok(err instanceof ConfigError, String(err));
    assert.match(err.message, /^OpenStack: Keystone issued a token scoped to no project/);
  }
  assert.deepEqual(
    calls,
    ['tokens.create', 'tokens.create'],
    'one authentication per call, Nova never asked',
  );
});

test('OS_PROJECT_NAME misspelt, or an unknown OS_PROJECT_ID: Keystone answers 401, every call is an UnauthenticatedError', async () => {
  for (const env of [
    { ...sim.env, OS_PROJECT_NAME: 'kpos' },
    { ...sim.env, OS_PROJECT_NAME: 'kops', OS_PROJECT_DOMAIN_NAME: 'Defualt' },
    { ...sim.env, OS_PROJECT_ID: 'not-a-project' },
  ]) {
    const { identifyError, listError, calls } = await failuresWith(env);
    for (const err of [identifyError, listError]) {
      assert.ok(err instanceof UnauthenticatedError, String(err));
      assert.equal(err.upstreamStatus, 401);
      assert.match(
        err.message,
        /^tokens\.create: HTTP 401: The request you have made requires authentication\. Keystone refused the controller's credentials for project /,
      );
    }
    assert.deepEqual(calls, ['tokens.create', 'tokens.create'], 'not retried, Nova never asked');
  }
});

test('a missing or wrong project is named in the error: OS_PROJECT_NAME / OS_PROJECT_ID, not OS_REGION_NAME', async () => {
  const { OS_PROJECT_NAME: _, OS_PROJECT_DOMAIN_NAME: __, ...unset } = sim.env;
  for (const env of [unset, { ...sim.env, OS_PROJECT_NAME: 'kpos' }]) {
    const { identifyError } = await failuresWith(env);
    assert.match(String((identifyError as Error).message), /OS_PROJECT_(NAME|ID)/);
    assert.doesNotMatch(String((identifyError as Error).message), /check OS_REGION_NAME/);
  }
});
