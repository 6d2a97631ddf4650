import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { ConfigError, KopsError } from '../../errors.ts';
import { type LinodeSimulator, startLinodeSimulator } from '../../sim/linode/simulator.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import { cloudCallMetrics } from '../metrics.ts';
import { useSimulatedCloud } from '../simulated-cloud.test-support.ts';
import { isPrivateIPv4, linodeProviderIds } from './instances.ts';
import { createLinodeProvider, type LinodeProvider, linodeTokenVariable } from './provider.ts';

const cluster = 'prod.example.com';
let sim: LinodeSimulator;
let provider: LinodeProvider;
const registry = new Registry();

useSimulatedCloud(startLinodeSimulator, (started) => {
  sim = started;
  provider = createLinodeProvider({
    clusterName: cluster,
    origin: started.origin,
    token: started.token,
    cloudCalls: cloudCallMetrics(registry),
    api: { retries: 1, retryDelayMs: 10, maxRetryWaitMs: 100 },
  });
  return provider;
});

function errorOf(result: { ok: boolean } | undefined): KopsError {
  assert.ok(result && !result.ok && 'error' in result && result.error instanceof KopsError);
  return result.error as KopsError;
}

test('an instance tagged with the cluster and a group is identified through the official SDK', async () => {
  const [instance] = sim.addGroup(cluster, 'nodes-us-ord', 1);
  assert.ok(instance);
  const id = `linode://${instance.id}`;
  const result = (await provider.nodeIdentifier.identify([id])).get(id);
  assert.ok(result?.ok, JSON.stringify(result));
  assert.equal(result.identity.instanceGroup, 'nodes-us-ord');
  assert.equal(result.identity.zone, 'us-ord');
  assert.deepEqual(result.identity.addresses, [
    { type: 'InternalIP', address: instance.ipv4[1] },
    { type: 'ExternalIP', address: instance.ipv4[0] },
    { type: 'Hostname', address: instance.label },
  ]);
  assert.equal(sim.count('linode.instances.get'), 1);
  assert.equal((await cloudRequests(registry))['linode linode.instances.get ok'], 1);
});

test('other clusters’, untagged, stopped and unknown instances get no identity', async () => {
  const foreign = sim.addGroup('other.example.com', 'nodes', 1)[0];
  const untagged = sim.addInstance({});
  const offline = sim.addGroup(cluster, 'nodes', 1)[0];
  const rebooting = sim.addGroup(cluster, 'nodes', 1)[0];
  if (!foreign || !offline || !rebooting) throw new Error('seed');
  offline.status = 'offline';
  rebooting.status = 'rebooting';
  const expect: Array<[string, string, RegExp]> = [
    [`linode://${foreign.id}`, 'forbidden', /belongs to cluster "other\.example\.com"/],
    [
      `linode://${untagged.id}`,
      'forbidden',
      /does not carry the tag kops\.k8s\.io\/cluster:prod\.example\.com$/,
    ],
    [`linode://${offline.id}`, 'forbidden', /is offline, not running/],
    // kops' identifier accepts running, booting and provisioning only.
    [`linode://${rebooting.id}`, 'forbidden', /is rebooting, not running/],
    ['linode://77', 'not-found', /Not found/],
    ['linode://us-ord/x', 'invalid', /not a Linode instance id/],
  ];
  for (const [id, kind, message] of expect) {
    const error = errorOf((await provider.nodeIdentifier.identify([id])).get(id));
    assert.equal(error.kind, kind, id);
    assert.match(error.message, message, id);
  }
});

test('kops’ providerID spellings all name the instance', () => {
  for (const id of ['linode://123', 'linode:///123', 'linode://us-east/123']) {
    assert.equal(linodeProviderIds.parse(id), '123');
  }
  assert.throws(() => linodeProviderIds.parse('linode://'), { kind: 'invalid' });
  assert.throws(() => linodeProviderIds.parse('hcloud://1'), { kind: 'invalid' });
});

test('a crowd is identified with pages of 500 filtered on the cluster tag', async () => {
  const local = await startLinodeSimulator();
  const p = createLinodeProvider({
    clusterName: 'big.example.com',
    origin: local.origin,
    token: local.token,
  });
  try {
    const instances = local.addGroup('big.example.com', 'nodes', 1_100);
    local.addGroup('other.example.com', 'nodes', 20);
    const results = await p.nodeIdentifier.identify(instances.map((i) => `linode://${i.id}`));
    assert.equal([...results.values()].filter((r) => r.ok).length, 1_100);
    assert.equal(local.count('linode.instances.list'), 3);
    assert.equal(local.count('linode.instances.get'), 0);
    assert.ok(local.calls.every((c) => c.query.get('page_size') === '500'));
    const groups = await p.cloudGroups.list('big.example.com');
    assert.deepEqual(
      groups.map((g) => [g.instanceGroup, g.members.length]),
      [['nodes', 1_100]],
    );
  } finally {
    p.close();
    await local.close();
  }
});

test('a cluster with no tagged instance lists empty from the real answer (page 0 of 0 pages)', async () => {
  // A filter that matches nothing is answered `page: 0, pages: 0, results: 0`
  // (linode/linode_api4-python pull #192); the simulator answers so.
  const local = await startLinodeSimulator();
  const p = createLinodeProvider({
    clusterName: 'empty.example.com',
    origin: local.origin,
    token: local.token,
  });
  try {
    local.addGroup('other.example.com', 'nodes', 3);
    assert.deepEqual(await p.cloudGroups.list('empty.example.com'), []);
    assert.equal(local.count('linode.instances.list'), 1);
  } finally {
    p.close();
    await local.close();
  }
});

test('the API failing, throttling or refusing the token is not a verdict on the instance', async () => {
  const [instance] = sim.addGroup(cluster, 'nodes', 1);
  const id = `linode://${instance?.id}`;
  for (const [status, kind] of [
    [500, 'unavailable'],
    [429, 'rate-limited'],
    [401, 'unauthenticated'],
  ] as const) {
    sim.clearFaults();
    sim.fault({ times: 5, status, operation: 'linode.instances.get' });
    const error = errorOf((await provider.nodeIdentifier.identify([id], { maxAgeMs: 0 })).get(id));
    assert.equal(error.kind, kind, String(status));
    assert.equal(error.details?.['status'], status);
  }
  sim.clearFaults();
  sim.fault({ times: 5, drop: true, operation: 'linode.instances.get' });
  assert.equal(
    errorOf((await provider.nodeIdentifier.identify([id], { maxAgeMs: 0 })).get(id)).kind,
    'unavailable',
  );
});

test('two clients calling at once each reach their own endpoint with their own token', async () => {
  const other = await startLinodeSimulator();
  const p = createLinodeProvider({ clusterName: cluster, origin: other.origin, token: other.token });
  try {
    const mine = sim.addGroup(cluster, 'nodes', 5);
    const theirs = other.addGroup(cluster, 'nodes', 5);
    const asks = [
      ...mine.map((i) => provider.nodeIdentifier.identify([`linode://${i.id}`], { maxAgeMs: 0 })),
      ...theirs.map((i) => p.nodeIdentifier.identify([`linode://${i.id}`], { maxAgeMs: 0 })),
    ];
    for (const answer of await Promise.all(asks)) assert.ok([...answer.values()][0]?.ok);
    // Each simulator checks its own token: a call with the other's would have been refused.
    assert.ok(sim.calls.every((c) => c.status === 200));
    assert.ok(other.calls.every((c) => c.status === 200));
    assert.ok(sim.calls.length > 0 && other.calls.length > 0);
  } finally {
    p.close();
    await other.close();
  }
});

test('RFC 1918 addresses are private, as Go’s IsPrivate says', () => {
  assert.deepEqual(
    ['10.0.0.1', '172.16.0.1', '172.31.255.255', '172.32.0.1', '192.168.130.5', '172.105.1.1', '::1'].map(
      isPrivateIPv4,
    ),
    [true, true, true, false, true, false, false],
  );
});

test('without LINODE_TOKEN the provider is a configuration error', () => {
  const saved = process.env[linodeTokenVariable];
  delete process.env[linodeTokenVariable];
  try {
    assert.throws(() => createLinodeProvider({ clusterName: 'c.example.com' }), ConfigError);
  } finally {
    if (saved !== undefined) process.env[linodeTokenVariable] = saved;
  }
});
