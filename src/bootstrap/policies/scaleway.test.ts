import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { createScalewayClients } from '../../cloud/scaleway/client.ts';
import { type ScalewaySimulator, startScalewaySimulator } from '../../sim/scaleway/simulator.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { simScalewayClients } from '../../testing/scaleway-clients.ts';
import { dependencyOf, isDependencyFault } from '../dependency.ts';
import type { PolicyDecision } from '../types.ts';
import { type ScalewayPolicyOptions, scalewayPolicy } from './scaleway.ts';

const cluster = 'prod.example.com';
let sim: ScalewaySimulator;
let node: string;
let nodeNic: string;

function kopsTags(ig = 'nodes-a', name = cluster): string[] {
  return [
    `noprefix=kops.k8s.io/cluster=${name}`,
    `noprefix=kops.k8s.io/instance-group=${ig}`,
    'noprefix=kops.k8s.io/role=Node',
  ];
}

before(async () => {
  sim = await startScalewaySimulator();
  // Another cluster's server, created first: IPAM lists its records before anyone else's.
  sim.addServer({
    name: 'theirs-first',
    tags: kopsTags('nodes', 'other.example.com'),
    privateIps: ['172.16.4.254'],
    publicIps: ['51.15.0.254'],
  });
  const server = sim.addServer({
    name: 'nodes-a-1',
    tags: kopsTags(),
    privateIps: ['172.16.4.2', 'fd5f:519c:6d46:2728::2'],
    publicIps: ['51.15.0.9'],
  });
  node = server.id;
  nodeNic = server.privateNics[0]?.id as string;
});
after(() => sim.close());
beforeEach(() => {
  sim.resetFaults();
  sim.clearCalls();
  sim.ignoreIpamFilters([]);
});

/** The IPAM queries the policy made, as query parameters. */
const ipamQueries = () =>
  sim.calls.filter((c) => c.operation === 'ips.list').map((c) => new URL(c.path, 'http://x').searchParams);

/** The challenge endpoint and certificate addresses of an approval. */
function approvedAt(decision: PolicyDecision) {
  assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
  if (decision.verdict !== 'approve') throw new Error('not approved');
  return { endpoint: decision.facts.challengeEndpoint, addresses: decision.facts.ipAddresses };
}

function policy(overrides: Partial<ScalewayPolicyOptions> = {}) {
  const clients = simScalewayClients(sim);
  return scalewayPolicy({ clusterName: cluster, clients, ...overrides });
}

function request(serverId: string) {
  return testRequest({
    proof: { kind: 'cloud-id', scheme: 'x-scaleway-instance-server-id', token: serverId },
  });
}

const decide = (serverId: string, options: Partial<ScalewayPolicyOptions> = {}) =>
  policy(options).evaluate(request(serverId), contextAt());

function denied(decision: PolicyDecision, reason: RegExp): void {
  assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
  assert.match(decision.reasons.join(' '), reason);
}

test('a running server of the cluster is approved, to be called back on its Private-Network address, not its public IP', async () => {
  const decision = await decide(node);
  assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
  if (decision.verdict !== 'approve') return;
  assert.equal(decision.facts.nodeName, 'nodes-a-1');
  assert.equal(decision.facts.instanceGroup, 'nodes-a');
  // IPv4 only; the Private NIC's address, not the routed public 51.15.0.9 (kops' zonal query's).
  assert.deepEqual(decision.facts.ipAddresses, ['172.16.4.2']);
  assert.equal(decision.facts.challengeEndpoint, '172.16.4.2:3987');
  assert.equal(decision.facts.evidence['addresses'], 'private-network');
  // The server's incarnation (its UUID, never another server's): the certificates carry it.
  assert.equal(decision.facts.incarnationId, node);
  // One IPAM call: the addresses of the server's Private NICs, by their ids; never zonal.
  const queries = ipamQueries();
  assert.equal(queries.length, 1);
  assert.equal(queries[0]?.get('resource_type'), 'instance_private_nic');
  assert.deepEqual(queries[0]?.getAll('resource_ids'), [nodeNic]);
  assert.equal(queries[0]?.get('is_ipv6'), 'false');
  // In our project, as the cloud controller manager asks (the server's project: ours, checked first).
  assert.equal(queries[0]?.get('project_id'), sim.projectId);
  assert.equal(queries[0]?.get('zonal'), null);
  // Whatever address the request came from: kops relies on the callback, not the source address.
  const elsewhere = await policy().evaluate(
    testRequest({ ...request(node), remoteAddress: '198.51.100.7' }),
    contextAt(),
  );
  assert.equal(elsewhere.verdict, 'approve');
});

test('a server with only a routed public IP (as kops creates them) is called back on it; one with only a Private NIC on its Private-Network address', async () => {
  const publicOnly = sim.addServer({ name: 'public-only', tags: kopsTags(), publicIps: ['51.15.0.10'] }).id;
  sim.clearCalls();
  const onPublic = approvedAt(await decide(publicOnly));
  assert.equal(onPublic.endpoint, '51.15.0.10:3987');
  assert.deepEqual(onPublic.addresses, ['51.15.0.10']);
  // No Private NIC: straight to the server's own records, by id and type, not by zone.
  const [query] = ipamQueries();
  assert.equal(query?.get('resource_type'), 'instance_server');
  assert.equal(query?.get('resource_id'), publicOnly);
  assert.equal(query?.get('zonal'), null);
  assert.equal(ipamQueries().length, 1);
  const privateOnly = sim.addServer({
    name: 'private-only',
    tags: kopsTags(),
    privateIps: ['172.16.4.40'],
  }).id;
  assert.deepEqual(approvedAt(await decide(privateOnly)), {
    endpoint: '172.16.4.40:3987',
    addresses: ['172.16.4.40'],
  });
});

test('every Private NIC counts, the first first; a NIC with no IPv4 falls back to the routed public IPs', async () => {
  const twoNetworks = sim.addServer({
    name: 'two-networks',
    tags: kopsTags(),
    privateIps: ['172.16.4.41'],
    privateNics: [{ ips: ['10.20.0.5'] }],
    publicIps: ['51.15.0.11'],
  });
  sim.clearCalls();
  assert.deepEqual(approvedAt(await decide(twoNetworks.id)), {
    endpoint: '172.16.4.41:3987',
    addresses: ['172.16.4.41', '10.20.0.5'],
  });
  assert.deepEqual(
    ipamQueries()[0]?.getAll('resource_ids'),
    twoNetworks.privateNics.map((n) => n.id),
  );
  const v6Network = sim.addServer({
    name: 'v6-network',
    tags: kopsTags(),
    privateNics: [{ ips: ['fd5f:519c:6d46:2728::9'] }],
    publicIps: ['51.15.0.12', '2001:bc8:1::'],
  }).id;
  sim.clearCalls();
  assert.deepEqual(approvedAt(await decide(v6Network)), {
    endpoint: '51.15.0.12:3987',
    addresses: ['51.15.0.12'],
  });
  assert.deepEqual(
    ipamQueries().map((q) => q.get('resource_type')),
    ['instance_private_nic', 'instance_server'],
  );
});

test('a server for which IPAM lists no IPv4 address at all is refused', async () => {
  const none = sim.addServer({ name: 'no-address', tags: kopsTags() }).id;
  denied(await decide(none), /IPAM lists no IPv4 address for server .*, so it cannot be called back/);
  const v6Only = sim.addServer({
    name: 'v6-only',
    tags: kopsTags(),
    privateIps: ['fd5f:519c:6d46:2728::10'],
    publicIps: ['2001:bc8:2::'],
  }).id;
  denied(await decide(v6Only), /IPAM lists no IPv4 address/);
});

test("attack: IPAM answering more than was asked (a filter it ignores) never gives a server another resource's address", async () => {
  // As an API that does not know the filters: every record of the region comes back, another
  // cluster's server's first.
  sim.ignoreIpamFilters(['resource_id', 'resource_ids', 'resource_type', 'resource_types', 'is_ipv6']);
  assert.deepEqual(approvedAt(await decide(node)), {
    endpoint: '172.16.4.2:3987',
    addresses: ['172.16.4.2'],
  });
  const publicOnly = sim.addServer({ name: 'public-only-2', tags: kopsTags(), publicIps: ['51.15.0.13'] }).id;
  assert.deepEqual(approvedAt(await decide(publicOnly)), {
    endpoint: '51.15.0.13:3987',
    addresses: ['51.15.0.13'],
  });
  // Nothing of its own: refused, though IPAM listed others' addresses.
  const none = sim.addServer({ name: 'no-address-2', tags: kopsTags() }).id;
  denied(await decide(none), /IPAM lists no IPv4 address/);
});

test("other proofs are not this policy's to judge", async () => {
  const decision = await policy().evaluate(
    testRequest({ proof: { kind: 'cloud-id', scheme: 'x-openstack-id', token: node } }),
    contextAt(),
  );
  assert.equal(decision.verdict, 'abstain');
});

test('attack: a server of another cluster, or one kops did not tag, is refused without an IPAM call', async () => {
  const other = sim.addServer({
    name: 'theirs',
    tags: kopsTags('nodes', 'other.example.com'),
    privateIps: ['172.16.4.9'],
  }).id;
  denied(await decide(other), /belongs to cluster "other.example.com"/);
  const bare = sim.addServer({ name: 'bare', privateIps: ['172.16.4.10'] }).id;
  denied(await decide(bare), /belongs to cluster ""/);
  const noGroup = sim.addServer({ name: 'nogroup', tags: [`noprefix=kops.k8s.io/cluster=${cluster}`] }).id;
  denied(await decide(noGroup), /no noprefix=kops.k8s.io\/instance-group=… tag/);
  assert.equal(sim.count('ips.list'), 0);
});

test('attack: a server of another project, another zone, or an unknown id is refused', async () => {
  const otherProject = sim.addServer({
    name: 'p2',
    project: '11111111-1111-4111-8111-111111111111',
    tags: kopsTags(),
  }).id;
  // A key that may not read the project: GetServer answers 404.
  denied(await decide(otherProject), /does not vouch for server .* not found/);
  const otherZone = sim.addServer({
    name: 'ams',
    zone: 'nl-ams-1',
    tags: kopsTags(),
    privateIps: ['172.16.5.2'],
  }).id;
  denied(await decide(otherZone), /does not vouch/);
  denied(await decide('00000000-0000-4000-8000-000000000000'), /does not vouch/);
  denied(await decide('../servers'), /not a server id/);
});

test("attack: a server of another project that the controller's key can read, tagged for our cluster, is refused", async () => {
  // An API key whose IAM policy covers several projects reads their servers (and IPAM) by id too.
  const shared = '44444444-4444-4444-8444-444444444444';
  sim.grantProject(shared);
  const theirs = sim.addServer({
    name: 'nodes-a-9',
    project: shared,
    tags: kopsTags(),
    privateIps: ['172.16.4.30'],
  }).id;
  denied(
    await decide(theirs),
    new RegExp(`is in project ${shared}, not this cluster's project ${sim.projectId}`),
  );
  assert.equal(sim.count('ips.list'), 0);
});

test('stopped and stopping servers are refused', async () => {
  for (const state of ['stopped', 'stopped in place', 'stopping', 'locked']) {
    const id = sim.addServer({
      name: `s-${state.replace(/ /g, '-')}`,
      tags: kopsTags(),
      privateIps: ['172.16.4.20'],
      state,
    }).id;
    denied(await decide(id), new RegExp(`is ${state}, not running or starting`));
  }
  const starting = sim.addServer({
    name: 'booting',
    tags: kopsTags(),
    privateIps: ['172.16.4.21'],
    state: 'starting',
  }).id;
  assert.equal((await decide(starting)).verdict, 'approve');
  const gone = sim.addServer({ name: 'gone', tags: kopsTags(), privateIps: ['172.16.4.22'] }).id;
  sim.deleteServer(gone);
  denied(await decide(gone), /not found/);
  const odd = sim.addServer({ name: 'Odd Name', tags: kopsTags(), privateIps: ['172.16.4.23'] }).id;
  denied(await decide(odd), /not a valid node name/);
});

test('the Instance or IPAM API failing, throttling or not answering is a dependency fault (503)', async () => {
  for (const inject of [
    () => sim.failNext(2, 500, 'servers.get'),
    () => sim.throttleNext(2, 1, 'servers.get'),
    () => sim.failNext(2, 503, 'ips.list'),
    () => sim.dropNext(2, 'ips.list'),
  ]) {
    sim.resetFaults();
    inject();
    await assert.rejects(decide(node), (err: unknown) => {
      assert.ok(isDependencyFault(err), String(err));
      assert.equal(dependencyOf(err), 'policy:scaleway');
      return true;
    });
  }
  sim.resetFaults();
  sim.delayNext(1, 300, 'servers.get');
  await assert.rejects(decide(node, { lookupTimeoutMs: 50 }), (err: unknown) => isDependencyFault(err));
});

test("the controller's own key being refused is a fault, not a verdict on the node", async () => {
  const clients = createScalewayClients({
    credentials: { ...sim.credentials, secretKey: '00000000-0000-4000-8000-000000000000' },
  });
  await assert.rejects(
    scalewayPolicy({ clusterName: cluster, clients }).evaluate(request(node), contextAt()),
    (err: unknown) => isDependencyFault(err),
  );
});

test('a creation_date in the server record that is no time is a dependency fault (503), never a denial nor dropped', async () => {
  const server = sim.addServer({
    name: 'nodes-a-bad-time',
    tags: kopsTags(),
    privateIps: ['172.16.4.9'],
    creationDate: 'not a time',
  });
  await assert.rejects(decide(server.id), (err: unknown) => {
    assert.ok(isDependencyFault(err), String(err));
    assert.equal(dependencyOf(err), 'policy:scaleway');
    return true;
  });
});
