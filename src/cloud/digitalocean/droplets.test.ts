import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, KopsError } from '../../errors.ts';
import { type DigitalOceanSimulator, startDigitalOceanSimulator } from '../../sim/digitalocean/simulator.ts';
import { useSimulatedCloud } from '../simulated-cloud.test-support.ts';
import { doThrottleWait } from './droplets.ts';
import { createDigitalOceanProvider, type DigitalOceanProvider, doTokenVariable } from './provider.ts';

const cluster = 'prod.example.com';
let sim: DigitalOceanSimulator;
let provider: DigitalOceanProvider;

useSimulatedCloud(startDigitalOceanSimulator, (started) => {
  sim = started;
  provider = createDigitalOceanProvider({
    clusterName: cluster,
    endpoint: started.endpoint,
    token: started.token,
    api: { retries: 1, retryDelayMs: 10 },
  });
  return provider;
});

function errorOf(result: { ok: boolean } | undefined): KopsError {
  assert.ok(result && !result.ok && 'error' in result && result.error instanceof KopsError);
  return result.error as KopsError;
}

test('a droplet tagged with the cluster (dots as dashes) and a group is identified', async () => {
  const [droplet] = sim.addGroup(cluster, 'nodes-nyc3', 1);
  assert.ok(droplet);
  droplet.publicIp = '198.51.100.4';
  const id = `digitalocean://${droplet.id}`;
  const result = (await provider.nodeIdentifier.identify([id])).get(id);
  assert.ok(result?.ok, JSON.stringify(result));
  assert.equal(result.identity.instanceGroup, 'nodes-nyc3');
  assert.equal(result.identity.zone, 'nyc3');
  assert.deepEqual(result.identity.addresses, [
    { type: 'InternalIP', address: droplet.privateIp },
    { type: 'ExternalIP', address: '198.51.100.4' },
    { type: 'Hostname', address: droplet.name },
  ]);
});

test('droplets of another cluster, untagged, off or archived, and unknown ones get no identity', async () => {
  const foreign = sim.addGroup('prod.example.org', 'nodes', 1)[0];
  const untagged = sim.addDroplet({ tags: ['kops-instancegroup:nodes'] });
  const off = sim.addGroup(cluster, 'nodes', 1)[0];
  const archived = sim.addGroup(cluster, 'nodes', 1)[0];
  if (!foreign || !off || !archived) throw new Error('seed');
  off.status = 'off';
  archived.status = 'archive';
  const expect: Array<[string, string, RegExp]> = [
    [`digitalocean://${foreign.id}`, 'forbidden', /belongs to cluster "prod-example-org"/],
    [
      `digitalocean://${untagged.id}`,
      'forbidden',
      /does not carry the tag KubernetesCluster:prod-example-com$/,
    ],
    [`digitalocean://${off.id}`, 'forbidden', /is off, not running/],
    [`digitalocean://${archived.id}`, 'forbidden', /is archive, not running/],
    ['digitalocean://77', 'not-found', /not_found: The resource/],
    ['digitalocean://abc', 'invalid', /not a droplet id/],
    ['hcloud://5', 'invalid', /not a DigitalOcean one/],
  ];
  for (const [id, kind, message] of expect) {
    const error = errorOf((await provider.nodeIdentifier.identify([id])).get(id));
    assert.equal(error.kind, kind, id);
    assert.match(error.message, message, id);
  }
});

test('a crowd is identified by listing the cluster tag, 200 droplets a page, following links.pages.next', async () => {
  const local = await startDigitalOceanSimulator();
  const p = createDigitalOceanProvider({
    clusterName: 'big.example.com',
    endpoint: local.endpoint,
    token: local.token,
  });
  try {
    const droplets = local.addGroup('big.example.com', 'nodes', 450);
    local.addGroup('other.example.com', 'nodes', 10);
    const results = await p.nodeIdentifier.identify(droplets.map((d) => `digitalocean://${d.id}`));
    assert.equal([...results.values()].filter((r) => r.ok).length, 450);
    assert.equal(local.count('droplets.list'), 3);
    assert.equal(local.count('droplets.get'), 0);
    assert.deepEqual(
      local.calls.map((c) => c.query.get('tag_name')),
      [
        'KubernetesCluster:big-example-com',
        'KubernetesCluster:big-example-com',
        'KubernetesCluster:big-example-com',
      ],
    );
    const groups = await p.cloudGroups.list('big.example.com');
    assert.deepEqual(
      groups.map((g) => [g.instanceGroup, g.members.length]),
      [['nodes', 450]],
    );
  } finally {
    p.close();
    await local.close();
  }
});

test('the API failing or throttling is not a verdict on the droplet', async () => {
  const [droplet] = sim.addGroup(cluster, 'nodes', 1);
  const id = `digitalocean://${droplet?.id}`;
  sim.fault({ times: 5, status: 500, operation: 'droplets.get' });
  assert.equal(
    errorOf((await provider.nodeIdentifier.identify([id], { maxAgeMs: 0 })).get(id)).kind,
    'unavailable',
  );
  sim.clearFaults();
  sim.fault({ times: 5, status: 401, operation: 'droplets.get' });
  const refused = errorOf((await provider.nodeIdentifier.identify([id], { maxAgeMs: 0 })).get(id));
  assert.equal(refused.details?.['status'], 401);
  assert.match(refused.message, /check the controller's API token/);
});

test('a 429 waits for Retry-After, else until ratelimit-reset', () => {
  const now = Math.floor(Date.now() / 1000);
  assert.equal(doThrottleWait({ 'retry-after': '7', 'ratelimit-reset': String(now + 50) }), 7);
  const untilReset = doThrottleWait({ 'ratelimit-reset': String(now + 30) }) ?? 0;
  assert.ok(untilReset >= 29 && untilReset <= 31, String(untilReset));
  assert.equal(doThrottleWait({}), undefined);
});

test('without DIGITALOCEAN_ACCESS_TOKEN the provider is a configuration error', () => {
  const saved = process.env[doTokenVariable];
  delete process.env[doTokenVariable];
  try {
    assert.throws(() => createDigitalOceanProvider({ clusterName: 'c.example.com' }), ConfigError);
  } finally {
    if (saved !== undefined) process.env[doTokenVariable] = saved;
  }
});
