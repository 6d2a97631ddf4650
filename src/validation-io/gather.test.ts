import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import type { Config } from '../config/schema.ts';
import { ConfigError, exitCodeOf, TimeoutError, UnavailableError } from '../errors.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { seedClusterStore } from '../statestore/cluster-store.ts';
import { openVfs } from '../statestore/open.ts';
import { outcomeWithin, silentServer } from '../testing/silent-server.ts';
import { apiServerAddresses, gatherValidationInput } from './gather.ts';

test('the API server is resolved when it is a name, not when it is an address', async () => {
  const resolve = async (host: string) => (host === 'api.c.example.com' ? ['10.0.0.9', '10.0.0.10'] : []);
  assert.deepEqual(await apiServerAddresses('https://api.c.example.com', resolve), {
    host: 'api.c.example.com',
    addresses: ['10.0.0.9', '10.0.0.10'],
  });
  assert.equal(await apiServerAddresses('https://127.0.0.1:6443', resolve), undefined);
  assert.equal(await apiServerAddresses('https://[::1]:6443', resolve), undefined);
  const local = await apiServerAddresses('https://localhost:6443');
  assert.ok(
    local?.addresses.some((a) => a === '127.0.0.1' || a === '::1'),
    JSON.stringify(local),
  );
});

test('a name that does not resolve is an outage with the reason', async () => {
  const failing = async () => {
    throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
  };
  await assert.rejects(
    apiServerAddresses('https://api.c.example.com', failing),
    (err) =>
      err instanceof UnavailableError &&
      err.message === 'cannot resolve the API server name api.c.example.com: ENOTFOUND',
  );
});

/** A kubeconfig naming the API server `https://<host>`; nothing connects to it in these tests. */
function kubeConfigFor(host: string): KubeConfig {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [{ name: 'c', server: `https://${host}` }],
    users: [{ name: 'u' }],
    contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
    currentContext: 'c',
  });
  return kubeConfig;
}

/** A state store (in memory) holding the cluster `name` with `spec` and one instance group. */
async function storeWith(name: string, spec: string): Promise<string> {
  const root = `memfs://gather-${name.replaceAll('.', '-')}-${Math.random().toString(36).slice(2)}`;
  await seedClusterStore(openVfs(root), name, {
    cluster: `apiVersion: kops.k8s.io/v1alpha2\nkind: Cluster\nmetadata:\n  name: ${name}\nspec:\n${spec}`,
    instanceGroups: [
      'apiVersion: kops.k8s.io/v1alpha2\nkind: InstanceGroup\nmetadata:\n  name: nodes\nspec:\n  role: Node\n',
    ],
  });
  return `${root}/${name}`;
}

test('on the placeholder, validation reads nothing else: not the cloud or the API', async () => {
  // A cloud that cannot be reached: touching it would fail the call.
  const config = {
    clusterName: 'c.example.com',
    cloud: 'aws',
    configBase: await storeWith('c.example.com', '  cloudProvider: aws\n'),
  } as Config;
  const input = await gatherValidationInput({
    config,
    kubeConfig: kubeConfigFor('api.c.example.com'),
    resolve: async () => ['203.0.113.123'],
    cloud: { aws: { endpoint: 'http://127.0.0.1:9' } },
  });
  assert.deepEqual(
    input.instanceGroups.map((ig) => ig.metadata.name),
    ['nodes'],
  );
  assert.deepEqual(input, {
    apiServer: { host: 'api.c.example.com', addresses: ['203.0.113.123'] },
    instanceGroups: input.instanceGroups,
    cloudGroups: [],
    nodes: [],
    pods: [],
  });
});

test('gossip and `dns: None` clusters publish no DNS records: the placeholder check does not run', async () => {
  // kops checks the placeholder only when cluster.PublishesDNSRecords() (pkg/validation/validate_cluster.go):
  // not for `dns: None` (pkg/apis/kops/cluster.go UsesNoneDNS) nor, before kOps 1.37 removed gossip, for a
  // gossip name ending in .k8s.local (pkg/dns/gossip.go IsGossipClusterName, at 239453846b^).
  for (const [name, spec] of [
    ['c.k8s.local', '  cloudProvider: aws\n'],
    ['c.example.com', '  cloudProvider: aws\n  topology:\n    dns:\n      type: None\n'],
    ['d.example.com', '  cloudProvider: aws\n  networking:\n    topology:\n      dns: None\n'],
  ] as const) {
    let resolved = 0;
    // An unsupported cloud stops the gathering right after the DNS step, before any connection.
    const config = {
      clusterName: name,
      cloud: 'openstack',
      configBase: await storeWith(name, spec),
    } as Config;
    await assert.rejects(
      gatherValidationInput({
        config,
        kubeConfig: kubeConfigFor(`api.${name}`),
        resolve: async () => {
          resolved++;
          return ['203.0.113.123'];
        },
      }),
      ConfigError,
      name,
    );
    assert.equal(resolved, 0, `${name}: the API name must not be resolved`);
  }
});

test('a cloud that never answers fails the gathering at the deadline (timed out, exit 75), its connection closed', async () => {
  // kops' validate would wait on it forever; `validate` (and `--wait`) must end with a reason.
  const [api, silent] = await Promise.all([startApiServer(), silentServer()]);
  try {
    const config = {
      clusterName: 'c.example.com',
      cloud: 'aws',
      configBase: await storeWith('c.example.com', '  cloudProvider: aws\n'),
      // A region, so that nothing asks an instance metadata service for one.
      server: { provider: { aws: { Region: 'us-test-1' } } },
    } as Config;
    const gathering = gatherValidationInput({
      config,
      kubeConfig: api.kubeConfig(),
      cloud: {
        aws: { endpoint: silent.endpoint, credentials: { accessKeyId: 'AKID', secretAccessKey: 's' } },
      },
      cloudTimeoutMs: 300,
    });
    const outcome = await outcomeWithin(gathering, 5_000);
    assert.equal(outcome.pending, false, 'the gathering ended');
    const error = outcome.pending ? undefined : outcome.error;
    assert.ok(error instanceof TimeoutError, String(error));
    assert.equal(error.message, 'list the cloud groups: no answer within 300 ms');
    assert.equal(exitCodeOf(error), 75);
    assert.ok(silent.accepted() > 0, 'the cloud was asked');
    for (let i = 0; i < 100 && silent.open() > 0; i++)
      await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(silent.open(), 0, 'no connection to the cloud is left open');
  } finally {
    silent.close();
    await api.close();
  }
});
