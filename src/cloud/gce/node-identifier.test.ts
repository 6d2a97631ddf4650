import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { ForbiddenError, InvalidInputError, NotFoundError, UnavailableError } from '../../errors.ts';
import { simulatorCompute } from '../../sim/gce/clients.ts';
import { type GceSimulator, startGceSimulator } from '../../sim/gce/simulator.ts';
import type { IdentifyResult } from '../types.ts';
import { type GceIdentifyResult, GceNodeIdentifier } from './node-identifier.ts';

const cluster = 'prod.example.com';
const zone = 'us-central1-a';
let sim: GceSimulator;

before(async () => {
  sim = await startGceSimulator({ project: 'kops-prod' });
});
after(() => sim.close());
beforeEach(() => sim.clearCalls());

/** A fresh identifier, so caches never leak between tests. */
function identifier(options: Partial<ConstructorParameters<typeof GceNodeIdentifier>[0]> = {}) {
  return new GceNodeIdentifier({
    compute: simulatorCompute(sim),
    clusterName: cluster,
    coalesceWindowMs: 1,
    ...options,
  });
}

const pid = (name: string, z = zone, project = 'kops-prod') => `gce://${project}/${z}/${name}`;

function identityOf(result: GceIdentifyResult | undefined) {
  assert.ok(result, 'a result for every providerID');
  if (!result.ok) assert.fail(`expected an identity, got ${result.error.message}`);
  return result.identity;
}

function errorOf(result: IdentifyResult | undefined): Error {
  assert.ok(result, 'a result for every providerID');
  assert.equal(result.ok, false, 'expected no identity');
  return (result as { error: Error }).error;
}

function computeCalls(): number {
  return sim.calls.filter((c) => c.operation !== 'token').length;
}

test('a MIG member is identified with the group its template names, its addresses and state', async () => {
  const [node] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-basic',
    count: 1,
    clusterName: cluster,
  });
  sim.world.updateInstance(zone, node!.name, { natIP: '34.1.2.3' });
  const results = await identifier().identify([pid(node!.name)]);
  assert.deepEqual(identityOf(results.get(pid(node!.name))), {
    providerID: pid(node!.name),
    instanceId: node!.name,
    instanceGroup: 'nodes-basic',
    state: 'running',
    addresses: [
      { type: 'InternalIP', address: node!.networkIP },
      { type: 'ExternalIP', address: '34.1.2.3' },
      { type: 'Hostname', address: node!.name },
    ],
    zone,
    routedRanges: { externalIpv6Ranges: [] },
    incarnation: { id: node!.id, createdAt: node!.creationTimestamp },
  });
});

test('IPv6: the internal IPv6 address is an InternalIP (a SAN), the external one and the routed ranges are reported', async () => {
  const [node] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-v6',
    count: 1,
    clusterName: cluster,
  });
  sim.world.updateInstance(zone, node!.name, {
    ipv6Address: 'fd20:0:0:1::5',
    externalIpv6Range: '2600:1900:4000:9::/96',
    aliasIpRanges: ['10.4.1.0/24'],
  });
  const identity = identityOf((await identifier().identify([pid(node!.name)])).get(pid(node!.name)));
  assert.deepEqual(identity.addresses, [
    { type: 'InternalIP', address: node!.networkIP },
    { type: 'InternalIP', address: 'fd20:0:0:1::5' },
    { type: 'ExternalIP', address: '2600:1900:4000:9::' },
    { type: 'Hostname', address: node!.name },
  ]);
  // The alias IPv4 range is not a pod range kops assigns (gceipam.go reads the IPv6 range only).
  assert.deepEqual(identity.routedRanges, { externalIpv6Ranges: ['2600:1900:4000:9::/96'] });
});

test('spoof: an instance not in the MIG its created-by claims gets no identity', async () => {
  sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'control-plane-x',
    mig: 'a-cp-x',
    count: 1,
    clusterName: cluster,
  });
  sim.world.seedInstance({
    zone,
    name: 'rogue-1',
    metadata: { 'created-by': sim.world.createdBy(zone, 'a-cp-x') },
  });
  const error = errorOf((await identifier().identify([pid('rogue-1')])).get(pid('rogue-1')));
  assert.ok(error instanceof ForbiddenError);
  assert.match(error.message, /is not managed by MIG a-cp-x/);
});

test('spoof: a MIG whose template names no group identifies nobody', async () => {
  sim.world.seedTemplate({ name: 'bare-tpl', metadata: { 'cluster-name': cluster } });
  sim.world.seedInstance({
    zone,
    name: 'bare-1',
    metadata: { 'created-by': sim.world.createdBy(zone, 'bare-mig') },
  });
  sim.world.seedMig({ zone, name: 'bare-mig', instanceTemplate: 'bare-tpl', members: ['bare-1'] });
  const error = errorOf((await identifier().identify([pid('bare-1')])).get(pid('bare-1')));
  assert.ok(error instanceof ForbiddenError);
  assert.match(error.message, /bare-tpl has no kops-k8s-io-instance-group-name/);
});

test('spoof: live metadata edited to claim another group still yields the template group', async () => {
  sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'master-edit',
    mig: 'a-master-edit',
    count: 1,
    clusterName: cluster,
  });
  const [node] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-edit',
    count: 1,
    clusterName: cluster,
  });
  sim.world.updateInstance(zone, node!.name, {
    metadata: {
      ...node!.metadata,
      'kops-k8s-io-instance-group-name': 'master-edit',
      'cluster-name': cluster,
    },
  });
  assert.equal(
    identityOf((await identifier().identify([pid(node!.name)])).get(pid(node!.name))).instanceGroup,
    'nodes-edit',
  );

  // Pointing created-by at the control-plane MIG does not help either: the MIG does not list it.
  sim.world.updateInstance(zone, node!.name, {
    metadata: { 'created-by': sim.world.createdBy(zone, 'a-master-edit') },
  });
  const error = errorOf((await identifier().identify([pid(node!.name)])).get(pid(node!.name)));
  assert.match(error.message, /not managed by MIG a-master-edit/);
});

test('with maxAgeMs, a MIG membership verified longer ago is verified again; the status is always read', async () => {
  const [node, other] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-fresh',
    mig: 'a-nodes-fresh',
    count: 2,
    clusterName: cluster,
  });
  let now = 0;
  const id = identifier({ now: () => now });
  const ask = async (name: string, options?: { maxAgeMs: number }) =>
    (await id.identify([pid(name)], options)).get(pid(name));
  identityOf(await ask(node!.name, { maxAgeMs: 60_000 }));
  const migReads = () => sim.count('instanceGroupManagers.listManagedInstances');
  assert.equal(migReads(), 1);
  // Abandoned from its MIG (still running): the cached verification no longer holds.
  const mig = sim.world.mig('kops-prod', zone, 'a-nodes-fresh');
  mig.members = mig.members.filter((m) => m.instance !== node!.name);
  now = 59_999;
  identityOf(await ask(node!.name, { maxAgeMs: 60_000 }));
  assert.equal(migReads(), 1, 'a verification younger than the bound serves');
  now = 60_000;
  identityOf(await ask(node!.name));
  assert.equal(migReads(), 1, 'a caller without a bound (labelling) keeps the cache');
  assert.match(errorOf(await ask(node!.name, { maxAgeMs: 60_000 })).message, /not managed by MIG/);
  assert.equal(migReads(), 2);
  // The status is read on every call, whatever the cache: a stop is seen at once.
  identityOf(await ask(other!.name, { maxAgeMs: 60_000 }));
  sim.world.updateInstance(zone, other!.name, { status: 'TERMINATED' });
  const stopped = errorOf(await ask(other!.name));
  assert.ok(stopped instanceof ForbiddenError);
  assert.equal(stopped.details?.['reason'], 'not-running');
});

test('spoof: a stopped or terminated instance gets no identity', async () => {
  const [a, b] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-stop',
    count: 2,
    clusterName: cluster,
  });
  sim.world.updateInstance(zone, a!.name, { status: 'STOPPED' });
  sim.world.updateInstance(zone, b!.name, { status: 'TERMINATED' });
  const results = await identifier().identify([pid(a!.name), pid(b!.name)]);
  assert.match(errorOf(results.get(pid(a!.name))).message, /is STOPPED, not RUNNING/);
  assert.match(errorOf(results.get(pid(b!.name))).message, /is TERMINATED, not RUNNING/);
});

test('spoof: a providerID of another project is refused without calling the cloud', async () => {
  sim.world.seedInstanceGroup({
    project: 'other-proj',
    zone,
    instanceGroup: 'nodes',
    count: 1,
    clusterName: cluster,
    namePrefix: 'theirs',
  });
  const id = pid('theirs-0000', zone, 'other-proj');
  const error = errorOf((await identifier().identify([id])).get(id));
  assert.ok(error instanceof ForbiddenError);
  assert.match(error.message, /names project "other-proj", not this cluster's project "kops-prod"/);
  // Final: the Cluster API fallback must not hand another project's instance a group from a Machine.
  assert.equal(error.reasonCode, 'foreign-cluster');
  assert.equal(computeCalls(), 0);
});

test('spoof: a template of another cluster does not identify our nodes', async () => {
  const [node] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes',
    mig: 'a-nodes-dev',
    template: 'dev-tpl',
    count: 1,
    clusterName: 'dev.example.com',
  });
  const error = errorOf((await identifier().identify([pid(node!.name)])).get(pid(node!.name)));
  assert.match(error.message, /belongs to cluster "dev\.example\.com", not "prod\.example\.com"/);
  // Final: the Cluster API fallback must not hand another cluster's instance a group from a Machine.
  assert.ok(error instanceof ForbiddenError);
  assert.equal(error.reasonCode, 'foreign-cluster');
  assert.equal(error.details?.['reason'], 'foreign-cluster');
});

test('spoof: created-by naming a MIG of another zone, a missing MIG or no MIG is refused', async () => {
  sim.world.seedInstance({
    zone,
    name: 'cross-zone',
    metadata: { 'created-by': sim.world.createdBy('us-central1-b', 'b-nodes') },
  });
  sim.world.seedInstance({
    zone,
    name: 'ghost-mig',
    metadata: { 'created-by': sim.world.createdBy(zone, 'no-such-mig') },
  });
  sim.world.seedInstance({ zone, name: 'hand-made' });
  const results = await identifier().identify([pid('cross-zone'), pid('ghost-mig'), pid('hand-made')]);
  assert.match(errorOf(results.get(pid('cross-zone'))).message, /claims MIG b-nodes of zone us-central1-b/);
  assert.match(errorOf(results.get(pid('ghost-mig'))).message, /no-such-mig, which does not exist/);
  assert.match(errorOf(results.get(pid('hand-made'))).message, /has no created-by metadata/);
});

test('malformed and unknown providerIDs give input and not-found errors', async () => {
  const results = await identifier().identify(['aws:///us-east-1a/i-1', pid('does-not-exist')]);
  assert.ok(errorOf(results.get('aws:///us-east-1a/i-1')) instanceof InvalidInputError);
  assert.ok(errorOf(results.get(pid('does-not-exist'))) instanceof NotFoundError);
});

test('batching: N nodes of one zone cost O(1) calls, and a second pass only re-reads the instances', async () => {
  const z = 'europe-west4-c';
  const nodes = sim.world.seedInstanceGroup({
    zone: z,
    instanceGroup: 'nodes-big',
    count: 1_200,
    clusterName: cluster,
  });
  sim.clearCalls();
  const id = identifier();
  const ids = nodes.map((n) => pid(n.name, z));
  const first = await id.identify(ids);
  assert.equal([...first.values()].filter((r) => r.ok).length, 1_200);
  // 1,200 instances and members at 500 a page: 3 pages each.
  assert.equal(sim.count('instances.list'), 3);
  assert.equal(sim.count('instances.get'), 0);
  assert.equal(sim.count('instanceGroupManagers.get'), 1);
  assert.equal(sim.count('instanceGroupManagers.listManagedInstances'), 3);
  assert.equal(sim.count('instanceTemplates.get'), 1);

  sim.clearCalls();
  const second = await id.identify(ids);
  assert.equal([...second.values()].filter((r) => r.ok).length, 1_200);
  assert.equal(computeCalls(), 3, 'verified instance ids are cached; only the instances are read again');
});

test('batching: a few nodes use one filtered list, nodes of several zones one aggregated list', async () => {
  const a = sim.world.seedInstanceGroup({
    zone: 'asia-east1-a',
    instanceGroup: 'nodes-few',
    template: 'nodes-few-tpl',
    count: 3,
    clusterName: cluster,
  });
  const b = sim.world.seedInstanceGroup({
    zone: 'asia-east1-b',
    instanceGroup: 'nodes-few',
    template: 'nodes-few-tpl',
    count: 3,
    clusterName: cluster,
  });
  sim.clearCalls();
  const results = await identifier().identify(a.map((n) => pid(n.name, 'asia-east1-a')));
  assert.equal([...results.values()].filter((r) => r.ok).length, 3);
  assert.equal(sim.count('instances.list'), 1);
  assert.match(
    sim.calls.find((c) => c.operation === 'instances.list')?.query['filter'] ?? '',
    /^\(name = ".+"\) OR/,
  );

  sim.clearCalls();
  const both = await identifier().identify([
    ...a.map((n) => pid(n.name, 'asia-east1-a')),
    ...b.map((n) => pid(n.name, 'asia-east1-b')),
  ]);
  assert.equal([...both.values()].filter((r) => r.ok).length, 6);
  assert.equal(sim.count('instances.aggregatedList'), 1);
  assert.equal(sim.count('instances.list') + sim.count('instances.get'), 0);
  assert.equal(sim.count('instanceTemplates.get'), 1, 'both zones share the template; read once');
});

test('batching: concurrent single-node calls are coalesced into one batch', async () => {
  const nodes = sim.world.seedInstanceGroup({
    zone: 'us-west1-a',
    instanceGroup: 'nodes-co',
    count: 40,
    clusterName: cluster,
  });
  sim.clearCalls();
  const id = identifier({ coalesceWindowMs: 5 });
  const results = await Promise.all(nodes.map((n) => id.identify([pid(n.name, 'us-west1-a')])));
  assert.ok(results.every((r) => r.size === 1 && [...r.values()][0]?.ok));
  assert.equal(sim.count('instances.list'), 1);
  assert.equal(sim.count('instanceGroupManagers.listManagedInstances'), 1);
});

test('a recreated instance with the same name is verified again, not served from the cache', async () => {
  const [node] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-re',
    count: 1,
    clusterName: cluster,
  });
  const id = identifier();
  identityOf((await id.identify([pid(node!.name)])).get(pid(node!.name)));
  // Deleted, then a hand-made instance takes the name and copies created-by: the MIG does not list it.
  sim.world.deleteInstance(zone, node!.name);
  sim.world.seedInstance({ zone, name: node!.name, metadata: node!.metadata });
  const error = errorOf((await id.identify([pid(node!.name)])).get(pid(node!.name)));
  assert.match(error.message, /not managed by MIG/);
});

test('the identity carries the numeric id of the incarnation read now, so a name its MIG reused is told apart', async () => {
  const [node] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-inc',
    count: 1,
    clusterName: cluster,
  });
  const id = identifier();
  const first = identityOf((await id.identify([pid(node!.name)])).get(pid(node!.name)));
  assert.equal(first.incarnation?.id, node!.id);
  assert.deepEqual(first.incarnation, { id: node!.id, createdAt: node!.creationTimestamp });
  // The MIG recreates it: same name, same created-by, still its member, a new id and creation time.
  const createdAt = new Date('2026-06-27T10:10:47.431Z');
  const reborn = sim.world.recreateInstance(zone, node!.name, { creationTimestamp: createdAt });
  const again = identityOf((await id.identify([pid(node!.name)])).get(pid(node!.name)));
  assert.equal(again.incarnation?.id, reborn.id);
  assert.notEqual(again.incarnation?.id, node!.id);
  // Read from the API's `2026-06-27T03:10:47.431-07:00`.
  assert.deepEqual(again.incarnation, { id: reborn.id, createdAt });
});

test('an instance read whose id cannot be read is a fault for the node (a 503 to a renewal), never an identity without an incarnation', async () => {
  const [node] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-bad',
    count: 1,
    clusterName: cluster,
  });
  const real = simulatorCompute(sim);
  const compute = Object.assign(Object.create(real) as typeof real, {
    getInstance: async (z: string, name: string) => ({ ...(await real.getInstance(z, name)), id: 'x1' }),
  });
  const error = errorOf((await identifier({ compute }).identify([pid(node!.name)])).get(pid(node!.name)));
  assert.ok(error instanceof UnavailableError, error.message);
  assert.match(error.message, /the id "x1", not a uint64 in decimal/);
});

test('a compute outage is a retryable error per node and nothing is cached', async () => {
  const [node] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-out',
    count: 1,
    clusterName: cluster,
  });
  const id = identifier();
  await id.identify([]); // nothing asked, nothing called
  sim.failNext(10, 503);
  const error = errorOf((await id.identify([pid(node!.name)])).get(pid(node!.name)));
  assert.ok(error instanceof UnavailableError, error.message);
  sim.failNext(0, 503);
  identityOf((await id.identify([pid(node!.name)])).get(pid(node!.name)));
});
