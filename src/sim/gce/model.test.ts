import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NotFoundError } from '../../errors.ts';
import { GceWorld, pacificTimestamp } from './model.ts';

test('seeding an instance group creates a template, a MIG and members pointing at it', () => {
  const world = new GceWorld('p1');
  const nodes = world.seedInstanceGroup({
    zone: 'us-central1-a',
    instanceGroup: 'nodes',
    count: 2,
    clusterName: 'c',
  });
  assert.equal(nodes.length, 2);
  assert.equal(nodes[0]?.metadata['created-by'], world.createdBy('us-central1-a', 'a-nodes-us-central1-a'));
  assert.match(
    world.createdBy('us-central1-a', 'm'),
    /^projects\/\d+\/zones\/us-central1-a\/instanceGroupManagers\/m$/,
  );
  const mig = world.mig('p1', 'us-central1-a', 'a-nodes-us-central1-a');
  assert.deepEqual(
    world.managedInstancesJson(mig).map((m) => m.id),
    nodes.map((n) => n.id),
  );
  const template = world.templateJson(world.template('p1', 'nodes-us-central1-a-tpl'));
  assert.deepEqual(template.properties.metadata.items, [
    { key: 'cluster-name', value: 'c' },
    { key: 'kops-k8s-io-instance-group-name', value: 'nodes' },
  ]);
  assert.notEqual(nodes[0]?.networkIP, nodes[1]?.networkIP);
});

test('deleting an instance drops its MIG membership; unknown resources are not found', () => {
  const world = new GceWorld('p1');
  const [a] = world.seedInstanceGroup({
    zone: 'us-central1-a',
    instanceGroup: 'nodes',
    count: 2,
    clusterName: 'c',
  });
  world.deleteInstance('us-central1-a', a?.name as string);
  assert.equal(world.mig('p1', 'us-central1-a', 'a-nodes-us-central1-a').members.length, 1);
  assert.throws(() => world.instance('p1', 'us-central1-a', a?.name as string), NotFoundError);
  assert.throws(() => world.mig('p1', 'us-central1-a', 'nope'), NotFoundError);
  assert.throws(() => world.template('p1', 'nope'), NotFoundError);
  assert.throws(
    () => world.seedMig({ zone: 'us-central1-a', name: 'm', instanceTemplate: 't', members: ['ghost'] }),
    NotFoundError,
  );
});

test('project numbers are stable and can be set', () => {
  const world = new GceWorld('p1');
  assert.equal(world.seedProject('p2', '42'), '42');
  assert.equal(world.projectNumber('p2'), '42');
  assert.equal(world.projectNumber('p1'), world.projectNumber('p1'));
  assert.match(world.projectNumber('p1'), /^\d+$/);
});

test('MIG JSON counts current actions and reports stability', () => {
  const world = new GceWorld('p1');
  const nodes = world.seedInstanceGroup({
    zone: 'europe-west1-b',
    instanceGroup: 'n',
    count: 2,
    clusterName: 'c',
  });
  world.seedMig({
    zone: 'europe-west1-b',
    name: 'a-n-europe-west1-b',
    instanceTemplate: 'n-europe-west1-b-tpl',
    targetSize: 3,
    members: [nodes[0]?.name as string, { instance: nodes[1]?.name as string, currentAction: 'RECREATING' }],
  });
  const json = world.migJson(world.mig('p1', 'europe-west1-b', 'a-n-europe-west1-b'));
  assert.equal(json.targetSize, 3);
  assert.equal(json.currentActions.none, 1);
  assert.equal(json.currentActions.recreating, 1);
  assert.equal(json.status.isStable, false);
});

test('recreating an instance keeps its name, metadata and MIG membership; the id, creation time and address are new', () => {
  const world = new GceWorld('p1');
  const [a] = world.seedInstanceGroup({
    zone: 'us-central1-a',
    instanceGroup: 'nodes',
    count: 1,
    clusterName: 'c',
  });
  assert.ok(a);
  const createdAt = new Date('2026-06-27T10:10:47.431Z');
  const b = world.recreateInstance('us-central1-a', a.name, { creationTimestamp: createdAt });
  assert.equal(b.name, a.name);
  assert.notEqual(b.id, a.id);
  assert.notEqual(b.networkIP, a.networkIP);
  assert.deepEqual(b.metadata, a.metadata);
  assert.equal(b.creationTimestamp, createdAt);
  const mig = world.mig('p1', 'us-central1-a', 'a-nodes-us-central1-a');
  assert.deepEqual(
    world.managedInstancesJson(mig).map((m) => m.id),
    [b.id],
  );
  // As the compute API writes them: the id a uint64 in decimal, the time RFC 3339 with an offset.
  const json = world.instanceJson(b);
  assert.match(json.id, /^\d{19}$/);
  assert.equal(json.creationTimestamp, '2026-06-27T03:10:47.431-07:00');
  assert.equal(pacificTimestamp(new Date('2026-01-01T03:00:00Z')), '2025-12-31T20:00:00.000-07:00');
});
