import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { UnavailableError } from '../../errors.ts';
import { instanceGroupHealth, memberNeedsUpdate } from '../../metrics/instance-group-health.ts';
import { simulatorCompute } from '../../sim/gce/clients.ts';
import { type GceSimulator, startGceSimulator } from '../../sim/gce/simulator.ts';
import type { InstanceGroup } from '../../statestore/kops-types.ts';
import { GceCloudGroups } from './cloud-groups.ts';

const cluster = 'prod.example.com';
let sim: GceSimulator;

before(async () => {
  sim = await startGceSimulator({ project: 'kops-prod' });
  const w = sim.world;
  w.seedInstanceGroup({ zone: 'us-central1-a', instanceGroup: 'nodes', count: 3, clusterName: cluster });
  w.seedInstanceGroup({ zone: 'us-central1-b', instanceGroup: 'nodes', count: 2, clusterName: cluster });
  w.seedInstanceGroup({
    zone: 'us-central1-a',
    instanceGroup: 'master-us-central1-a',
    count: 1,
    clusterName: cluster,
  });
  w.seedInstanceGroup({
    zone: 'us-central1-a',
    instanceGroup: 'nodes',
    mig: 'a-nodes-dev',
    template: 'dev-tpl',
    count: 2,
    clusterName: 'dev.example.com',
  });
  // A MIG of something else in the project: its template carries no kops metadata.
  w.seedTemplate({ name: 'web-tpl' });
  w.seedInstance({ zone: 'us-central1-a', name: 'web-1' });
  w.seedMig({ zone: 'us-central1-a', name: 'web', instanceTemplate: 'web-tpl', members: ['web-1'] });
});
after(() => sim.close());

test('lists the MIGs of our cluster with target size and members; others are left out', async () => {
  const groups = await new GceCloudGroups({ compute: simulatorCompute(sim) }).list(cluster);
  assert.deepEqual(
    groups.map((g) => [g.instanceGroup, g.cloudName, g.targetSize, g.members.length]),
    [
      ['master-us-central1-a', 'a-master-us-central1-a-us-central1-a', 1, 1],
      ['nodes', 'a-nodes-us-central1-a', 3, 3],
      ['nodes', 'a-nodes-us-central1-b', 2, 2],
    ],
  );
  const member = groups[1]?.members[0];
  assert.deepEqual(member, {
    instanceId: 'a-nodes-us-central1-a-0000',
    providerID: 'gce://kops-prod/us-central1-a/a-nodes-us-central1-a-0000',
    state: 'running',
    healthy: true,
    template: 'projects/kops-prod/global/instanceTemplates/nodes-us-central1-a-tpl',
  });
  assert.equal(groups[1]?.template, 'projects/kops-prod/global/instanceTemplates/nodes-us-central1-a-tpl');
});

test("a rolling update: members still on an older template than the MIG's are counted, as kops rolling-update", async () => {
  const w = sim.world;
  const nodes = w.seedInstanceGroup({
    zone: 'us-central1-f',
    instanceGroup: 'web',
    count: 4,
    clusterName: cluster,
  });
  // `kops update cluster` wrote a new template (new labels, a new image) and pointed the MIG at it.
  const metadata = { 'cluster-name': cluster, 'kops-k8s-io-instance-group-name': 'web' };
  w.seedTemplate({ name: 'web-us-central1-f-tpl-2', metadata });
  w.seedMig({
    zone: 'us-central1-f',
    name: 'a-web-us-central1-f',
    instanceTemplate: 'web-us-central1-f-tpl-2',
    members: [
      { instance: nodes[0]!.name, instanceTemplate: 'web-us-central1-f-tpl-2' },
      nodes[1]!.name,
      { instance: nodes[2]!.name, instanceTemplate: 'web-us-central1-f-tpl' },
      { instance: nodes[3]!.name, instanceTemplate: 'web-us-central1-f-tpl-2' },
    ],
  });
  const cloudGroups = await new GceCloudGroups({ compute: simulatorCompute(sim) }).list(cluster);
  const web = cloudGroups.find((g) => g.instanceGroup === 'web');
  assert.equal(web?.template, 'projects/kops-prod/global/instanceTemplates/web-us-central1-f-tpl-2');
  assert.deepEqual(
    web?.members.map((m) => memberNeedsUpdate(web, m)),
    [false, false, true, false],
    'members seeded without a template run the MIG’s',
  );
  const instanceGroups = [
    {
      apiVersion: 'kops.k8s.io/v1alpha2',
      kind: 'InstanceGroup',
      metadata: { name: 'web' },
      spec: { role: 'Node' },
    },
  ] as InstanceGroup[];
  const [health] = instanceGroupHealth({ instanceGroups, cloudGroups, nodes: [] });
  assert.equal(health?.needingUpdate, 1);
});

test("members being replaced or not running are unhealthy; the target size is the MIG's", async () => {
  const w = sim.world;
  const nodes = w.seedInstanceGroup({
    zone: 'us-central1-c',
    instanceGroup: 'spot',
    count: 3,
    clusterName: cluster,
  });
  w.updateInstance('us-central1-c', nodes[2]!.name, { status: 'STOPPING' });
  w.seedMig({
    zone: 'us-central1-c',
    name: 'a-spot-us-central1-c',
    instanceTemplate: 'spot-us-central1-c-tpl',
    targetSize: 4,
    members: [nodes[0]!.name, { instance: nodes[1]!.name, currentAction: 'RECREATING' }, nodes[2]!.name],
  });
  const groups = await new GceCloudGroups({ compute: simulatorCompute(sim) }).list(cluster);
  const spot = groups.find((g) => g.instanceGroup === 'spot');
  assert.equal(spot?.targetSize, 4);
  assert.deepEqual(
    spot?.members.map((m) => [m.state, m.healthy]),
    [
      ['running', true],
      ['running', false],
      ['stopping', false],
    ],
  );
});

test('templates are read once; later listings cost the MIG listing and member listings only', async () => {
  const groups = new GceCloudGroups({ compute: simulatorCompute(sim) });
  await groups.list(cluster);
  sim.clearCalls();
  const again = await groups.list(cluster);
  assert.equal(sim.count('instanceTemplates.get'), 0);
  assert.equal(sim.count('instanceGroupManagers.aggregatedList'), 1);
  assert.equal(sim.count('instanceGroupManagers.listManagedInstances'), again.length);
});

test('an outage fails the listing instead of returning a partial one', async () => {
  sim.failNext(5, 503);
  await assert.rejects(
    new GceCloudGroups({ compute: simulatorCompute(sim) }).list(cluster),
    UnavailableError,
  );
  sim.failNext(0, 503);
});
