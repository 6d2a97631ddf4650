import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import type { KopsError } from '../../errors.ts';
import { sendJson } from '../../sim/cloud-sim.ts';
import { type OpenStackSimulator, startOpenStackSimulator } from '../../sim/openstack/simulator.ts';
import { OpenStackCloudGroups } from './cloud-groups.ts';
import { KeystoneSession } from './keystone.ts';
import { OpenStackNodeIdentifier, type OpenStackNodeIdentifierOptions } from './node-identifier.ts';
import { NovaClient } from './nova.ts';

const cluster = 'prod.example.com';
let sim: OpenStackSimulator;
let nova: NovaClient;
const ids: string[] = [];
let foreignCluster: string;
let noGroup: string;

function kopsServer(name: string, ig: string, extra: Record<string, string> = {}) {
  return {
    name,
    fixed: ['10.1.0.1'],
    metadata: { KubernetesCluster: cluster, k8s: cluster, KopsInstanceGroup: ig, KopsRole: 'Node', ...extra },
  };
}

before(async () => {
  sim = await startOpenStackSimulator({ maxLimit: 100 });
  nova = new NovaClient({ session: new KeystoneSession({ auth: sim.passwordAuth }), retryDelayMs: 1 });
  for (let i = 0; i < 250; i++)
    ids.push(sim.addServer(kopsServer(`nodes-${i}`, i % 2 ? 'nodes-a' : 'nodes-b')).id);
  foreignCluster = sim.addServer({
    ...kopsServer('other', 'nodes'),
    metadata: { KubernetesCluster: 'other.example.com', KopsInstanceGroup: 'nodes' },
  }).id;
  noGroup = sim.addServer({ name: 'hand-made', metadata: { KubernetesCluster: cluster } }).id;
});
after(() => sim.close());
beforeEach(() => {
  sim.clearCalls();
  sim.resetFaults();
});

function identifier(options: Partial<OpenStackNodeIdentifierOptions> = {}) {
  return new OpenStackNodeIdentifier({ nova, clusterName: cluster, coalesceWindowMs: 1, ...options });
}

test('a node is identified from its server metadata, in both providerID spellings', async () => {
  const id = ids[1] as string;
  const results = await identifier().identify([`openstack:///${id}`, `openstack://${id}`]);
  for (const result of results.values()) {
    assert.ok(result.ok);
    assert.equal(result.identity.instanceGroup, 'nodes-a');
    assert.equal(result.identity.instanceId, id);
    assert.equal(result.identity.state, 'running');
    assert.deepEqual(result.identity.addresses[0], { type: 'InternalIP', address: '10.1.0.1' });
  }
});

test('kops’ api-server node-template metadata (the kops CLI’s APIServerNodes) is noted on the identity', async () => {
  const tagged = sim.addServer(
    kopsServer('control-plane-0', 'control-plane-a', {
      'k8s.io_cluster-autoscaler_node-template_label_node-role.kubernetes.io_api-server': '',
    }),
  ).id;
  const results = await identifier().identify([`openstack:///${tagged}`, `openstack:///${ids[0]}`]);
  sim.deleteServer(tagged);
  const [server, plain] = [...results.values()];
  assert.ok(server?.ok && plain?.ok);
  assert.equal(server.identity.apiServerTagged, true);
  assert.equal(plain.identity.apiServerTagged, undefined);
});

test('servers of another cluster, without a group, unknown, or malformed ids are refused', async () => {
  const results = await identifier().identify([
    `openstack:///${foreignCluster}`,
    `openstack:///${noGroup}`,
    'openstack:///0000-unknown',
    'aws:///us-east-1a/i-1',
    'openstack:///a/b',
  ]);
  const kinds = [...results.values()].map((r) => (r.ok ? 'ok' : (r.error as KopsError).kind));
  assert.deepEqual(kinds, ['forbidden', 'forbidden', 'not-found', 'invalid', 'invalid']);
  const foreign = results.get(`openstack:///${foreignCluster}`);
  assert.match(foreign && !foreign.ok ? foreign.error.message : '', /cluster "other.example.com"/);
});

test("another project's server, which an admin token can read by id, is refused as foreign-cluster", async () => {
  const theirs = sim.addServer({ ...kopsServer('theirs', 'nodes-a'), project: 'another-project' }).id;
  sim.setAdmin(true);
  const admin = new NovaClient({ session: new KeystoneSession({ auth: sim.passwordAuth }), retryDelayMs: 1 });
  try {
    // A few ids are read one by one: Nova shows the admin the other project's server.
    const single = (await identifier({ nova: admin }).identify([`openstack:///${theirs}`])).get(
      `openstack:///${theirs}`,
    );
    assert.equal(sim.count('servers.get'), 1);
    assert.ok(single && !single.ok, 'identified');
    assert.equal((single.error as KopsError).kind, 'forbidden');
    assert.equal((single.error as KopsError).reasonCode, 'foreign-cluster');
    assert.match(single.error.message, /project another-project/);
    // Many are answered from the project's listing, which holds only our project's servers.
    const many = [theirs, ...ids.slice(0, 5)].map((id) => `openstack:///${id}`);
    const listed = await identifier({ nova: admin }).identify(many);
    const result = listed.get(`openstack:///${theirs}`);
    assert.ok(result && !result.ok, 'identified from a listing');
    assert.ok(many.slice(1).every((pid) => listed.get(pid)?.ok));
  } finally {
    sim.setAdmin(false);
    sim.deleteServer(theirs);
  }
});

test('only a live server (ACTIVE, BUILD, rebooting, resizing…) has an identity: ERROR, SHUTOFF and the like are refused', async () => {
  const byStatus = new Map<string, string>();
  for (const status of [
    'ACTIVE',
    'BUILD',
    'HARD_REBOOT',
    'ERROR',
    'UNKNOWN',
    'SHUTOFF',
    'SUSPENDED',
    'SOFT_DELETED',
  ]) {
    byStatus.set(status, sim.addServer({ ...kopsServer(`s-${status.toLowerCase()}`, 'nodes-a'), status }).id);
  }
  try {
    const results = await identifier().identify([...byStatus.values()].map((id) => `openstack:///${id}`));
    for (const [status, id] of byStatus) {
      const result = results.get(`openstack:///${id}`);
      if (['ACTIVE', 'BUILD', 'HARD_REBOOT'].includes(status)) {
        assert.ok(result?.ok, `${status}: ${result && !result.ok ? result.error.message : 'no result'}`);
        continue;
      }
      assert.ok(result && !result.ok, `${status} was identified`);
      const error = result.error as KopsError;
      assert.equal(error.kind, 'forbidden', status);
      assert.equal(error.reasonCode, 'not-running', status);
      assert.match(error.message, new RegExp(`is ${status}, not ACTIVE`));
    }
  } finally {
    for (const id of byStatus.values()) sim.deleteServer(id);
  }
});

test('a label storm lists the project once and answers every later batch from the snapshot', async () => {
  const ident = identifier();
  // One reconcile per node, all at once, as the node controller does after a restart.
  const answers = await Promise.all(ids.map((id) => ident.identify([`openstack:///${id}`])));
  assert.ok(answers.every((a) => [...a.values()][0]?.ok));
  assert.equal(sim.count('servers.get'), 0);
  assert.equal(sim.count('servers.list'), 3); // 252 servers at 100 a page
  // Later reconciles within the snapshot's lifetime cost nothing.
  sim.clearCalls();
  await Promise.all(ids.slice(0, 50).map((id) => ident.identify([`openstack:///${id}`])));
  assert.equal(sim.calls.length, 0);
});

test('a few nodes are read one by one; a stale snapshot or a new server is read again', async () => {
  let now = 0;
  const ident = identifier({ now: () => now, snapshotTtlMs: 1_000 });
  await ident.identify(ids.slice(0, 2).map((id) => `openstack:///${id}`));
  assert.equal(sim.count('servers.get'), 2);
  assert.equal(sim.count('servers.list'), 0);
  await ident.identify(ids.slice(0, 10).map((id) => `openstack:///${id}`));
  assert.equal(sim.count('servers.list'), 3);
  // A server created after the snapshot: a few are read singly.
  const fresh = sim.addServer(kopsServer('new-node', 'nodes-a')).id;
  sim.clearCalls();
  assert.ok((await ident.identify([`openstack:///${fresh}`])).get(`openstack:///${fresh}`)?.ok);
  assert.equal(sim.count('servers.get'), 1);
  // A trust decision asking for facts younger than the snapshot gets them read again.
  sim.setStatus(ids[0] as string, 'SHUTOFF');
  now = 500;
  const strict = await ident.identify([`openstack:///${ids[0]}`], { maxAgeMs: 100 });
  const result = strict.get(`openstack:///${ids[0]}`);
  assert.equal(result && !result.ok && (result.error as KopsError).reasonCode, 'not-running');
  sim.setStatus(ids[0] as string, 'ACTIVE');
  // Past its lifetime the snapshot is not used at all.
  now = 2_000;
  sim.clearCalls();
  await ident.identify(ids.slice(0, 10).map((id) => `openstack:///${id}`));
  assert.equal(sim.count('servers.list'), 3);
});

test('a clock stepped back after running ahead: maxAgeMs 0 does not take the snapshot, so a stopped server is refused', async () => {
  let clock = 3_600_000; // an hour ahead when the project was listed
  const ident = identifier({ now: () => clock });
  await ident.identify(ids.slice(0, 10).map((id) => `openstack:///${id}`));
  assert.equal(sim.count('servers.list'), 3);
  sim.setStatus(ids[1] as string, 'SHUTOFF');
  try {
    clock = 1_000; // corrected
    const result = (await ident.identify([`openstack:///${ids[1]}`], { maxAgeMs: 0 })).get(
      `openstack:///${ids[1]}`,
    );
    assert.equal(result && !result.ok && (result.error as KopsError).reasonCode, 'not-running');
  } finally {
    sim.setStatus(ids[1] as string, 'ACTIVE');
  }
});

test("Nova failing is each node's error (a fault, retried by the caller), never an identity", async () => {
  const ident = new OpenStackNodeIdentifier({
    nova: new NovaClient({
      session: new KeystoneSession({ auth: sim.passwordAuth }),
      retryDelayMs: 1,
      maxRetryWaitMs: 5,
      retries: 1,
    }),
    clusterName: cluster,
    coalesceWindowMs: 1,
  });
  sim.failNext(2, 503, 'servers.list');
  const results = await ident.identify(ids.slice(0, 10).map((id) => `openstack:///${id}`));
  assert.ok([...results.values()].every((r) => !r.ok && (r.error as KopsError).kind === 'unavailable'));
  // Nova refusing the controller's own listing (a 404 from a wrong endpoint, a 400) is a fault too,
  // never a verdict (`not-found`, `invalid`) on every node of the batch.
  for (const status of [404, 400]) {
    sim.failNext(2, status, 'servers.list');
    const refused = await ident.identify(ids.slice(10, 20).map((id) => `openstack:///${id}`));
    assert.deepEqual(
      [...new Set([...refused.values()].map((r) => !r.ok && (r.error as KopsError).kind))],
      ['unavailable'],
      `HTTP ${status}`,
    );
  }
  sim.throttleNext(2, 1, 'servers.get');
  const one = await ident.identify([`openstack:///${ids[3]}`]);
  assert.equal([...one.values()].map((r) => !r.ok && (r.error as KopsError).kind)[0], 'rate-limited');
});

test("cloud groups are the cluster's servers grouped by KopsInstanceGroup", async () => {
  const groups = await new OpenStackCloudGroups(nova).list(cluster);
  const byName = new Map(groups.map((g) => [g.instanceGroup, g]));
  assert.deepEqual([...byName.keys()].sort(), ['nodes-a', 'nodes-b']);
  const a = byName.get('nodes-a');
  assert.ok(a && a.members.length >= 125 && a.targetSize === a.members.length);
  assert.ok(a.members.every((m) => m.providerID.startsWith('openstack:///') && m.healthy));
  assert.ok(!groups.some((g) => g.members.some((m) => m.instanceId === foreignCluster)));
});

test('an instance group metadata value kops never writes is refused with a reason, and no cloud group', async () => {
  const bad = ['../../config', 'Nodes', 'a'.repeat(64)].map(
    (group, i) => sim.addServer(kopsServer(`bad-group-${i}`, group)).id,
  );
  const results = await identifier().identify(bad.map((id) => `openstack:///${id}`));
  for (const result of results.values()) {
    assert.ok(!result.ok, JSON.stringify(result));
    assert.equal((result.error as KopsError).kind, 'forbidden');
    assert.equal((result.error as KopsError).reasonCode, 'invalid-instance-group');
  }
  const groups = await new OpenStackCloudGroups(nova).list(cluster);
  assert.deepEqual(
    groups.map((g) => g.instanceGroup).filter((g) => !['nodes-a', 'nodes-b'].includes(g)),
    [],
  );
  for (const id of bad) sim.deleteServer(id);
});

test('a listing with a record Nova never sends is a fault for the batch, never a refusal of its nodes', async () => {
  // Nova's metadata values are strings (openstack/nova nova/api/validation/parameter_types.py
  // `metadata`); one that is not makes the page unreadable, as it does gophercloud's (map[string]string).
  const wanted = ids.slice(0, 5);
  sim.answerWith('servers.list', (_req, res) => {
    const servers = wanted.map((id, i) => ({
      id,
      name: `nodes-${i}`,
      status: 'ACTIVE',
      tenant_id: sim.projectId,
      metadata: { KubernetesCluster: cluster, KopsInstanceGroup: i === 0 ? 5 : 'nodes-a' },
      addresses: {},
    }));
    sendJson(res, 200, { servers });
  });
  try {
    const results = await identifier().identify(wanted.map((id) => `openstack:///${id}`));
    assert.equal(results.size, wanted.length);
    for (const result of results.values()) {
      assert.ok(!result.ok, JSON.stringify(result));
      assert.equal((result.error as KopsError).kind, 'unavailable');
      assert.equal((result.error as KopsError).reasonCode, 'malformed-answer');
    }
    await assert.rejects(new OpenStackCloudGroups(nova).list(cluster), (err: unknown) => {
      assert.equal((err as KopsError).reasonCode, 'malformed-answer');
      return true;
    });
  } finally {
    sim.answerWith('servers.list', undefined);
  }
});

test("a server's access IPs (accessIPv4, accessIPv6) are ExternalIP addresses of its identity, as the OpenStack cloud controller manager gives the Node", async () => {
  // kubernetes/cloud-provider-openstack pkg/openstack/instances.go nodeAddresses: AccessIPv4 and
  // AccessIPv6 are ExternalIP; the kubelet then asks for them in its serving certificate.
  const id = sim.addServer(kopsServer('with-access-ips', 'nodes-a')).id;
  sim.answerWith('servers.get', (_req, res) =>
    sendJson(res, 200, {
      server: {
        id,
        name: 'with-access-ips',
        status: 'ACTIVE',
        tenant_id: sim.projectId,
        metadata: kopsServer('with-access-ips', 'nodes-a').metadata,
        addresses: { private: [{ addr: '10.1.0.9', version: 4, 'OS-EXT-IPS:type': 'fixed' }] },
        accessIPv4: '198.51.100.9',
        accessIPv6: '2001:db8::9',
      },
    }),
  );
  try {
    const pid = `openstack:///${id}`;
    const result = (await identifier().identify([pid])).get(pid);
    assert.ok(result?.ok, JSON.stringify(result));
    assert.deepEqual(
      result.identity.addresses.filter((a) => a.type === 'ExternalIP').map((a) => a.address),
      ['198.51.100.9', '2001:db8::9'],
    );
  } finally {
    sim.answerWith('servers.get', undefined);
  }
});
