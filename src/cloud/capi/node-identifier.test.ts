import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import { ForbiddenError, KopsError, NotFoundError, UnavailableError } from '../../errors.ts';
import { buildNodeLabels } from '../../nodelabels/build-node-labels.ts';
import { type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../../sim/aws/server.ts';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import { simulatorCompute } from '../../sim/gce/clients.ts';
import { type GceSimulator, startGceSimulator } from '../../sim/gce/simulator.ts';
import { type OpenStackSimulator, startOpenStackSimulator } from '../../sim/openstack/simulator.ts';
import { parseCluster } from '../../statestore/kops-types.ts';
import { apiServerRequests, countOf } from '../../testing/apiserver-requests.ts';
import { simAzureClient } from '../../testing/azure-client.ts';
import { type AwsClients, createAwsClients } from '../aws/clients.ts';
import { AwsNodeIdentifier } from '../aws/identify.ts';
import { AzureNodeIdentifier } from '../azure/node-identifier.ts';
import { GceNodeIdentifier } from '../gce/node-identifier.ts';
import { KeystoneSession } from '../openstack/keystone.ts';
import { OpenStackNodeIdentifier } from '../openstack/node-identifier.ts';
import { NovaClient } from '../openstack/nova.ts';
import type { IdentifyResult, NodeIdentifier, NodeIdentity } from '../types.ts';
import { capiInstanceGroup } from './instance-group.ts';
import { MachineIndex, machineRecordOf } from './machines.ts';
import { CapiNodeIdentifier } from './node-identifier.ts';

const cluster = 'capi.example.com';
let api: SimApiServer;
let machines: CustomObjectsApi;
let index: MachineIndex;

function identityOf(result: IdentifyResult | undefined): NodeIdentity {
  assert.ok(
    result?.ok,
    `expected an identity, got ${result && !result.ok ? result.error.message : 'nothing'}`,
  );
  return result.identity;
}

function errorOf(result: IdentifyResult | undefined): Error {
  assert.ok(result && !result.ok, 'expected no identity');
  return result.error;
}

/** The controller's own call refused: a fault the caller retries (503), never a verdict nor an identity. */
function assertFault(result: IdentifyResult | undefined): void {
  const error = errorOf(result);
  assert.ok(error instanceof KopsError, String(error));
  assert.equal(error.kind, 'unavailable', error.message);
}

/** A Machine as Cluster API writes it: providerID, failure domain, deployment label, phase, addresses. */
async function createMachine(
  name: string,
  providerID: string,
  options: { deployment?: string; phase?: string; addresses?: { type: string; address: string }[] } = {},
): Promise<void> {
  await machines.createNamespacedCustomObject({
    group: 'cluster.x-k8s.io',
    version: 'v1beta1',
    namespace: 'kube-system',
    plural: 'machines',
    body: {
      apiVersion: 'cluster.x-k8s.io/v1beta1',
      kind: 'Machine',
      metadata: {
        name,
        namespace: 'kube-system',
        labels: options.deployment ? { 'cluster.x-k8s.io/deployment-name': options.deployment } : {},
      },
      spec: { clusterName: 'capi-example-com', providerID, failureDomain: 'zone-a', bootstrap: {} },
      status: { phase: options.phase ?? 'Running', addresses: options.addresses ?? [] },
    },
  });
}

async function deleteMachine(name: string): Promise<void> {
  await machines.deleteNamespacedCustomObject({
    group: 'cluster.x-k8s.io',
    version: 'v1beta1',
    namespace: 'kube-system',
    plural: 'machines',
    name,
  });
}

/** The simulated API server's request count for machines, by verb (from its /metrics). */
async function machineRequests(verb: string): Promise<number> {
  return countOf(await apiServerRequests(api, 'machines'), { verb });
}

async function until(check: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500 && !(await check()); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(await check(), 'condition not reached');
}

before(async () => {
  api = await startApiServer();
  machines = api.kubeConfig().makeApiClient(CustomObjectsApi);
  await api
    .kubeConfig()
    .makeApiClient(CoreV1Api)
    .readNamespace({ name: 'kube-system' })
    .catch(() =>
      api
        .kubeConfig()
        .makeApiClient(CoreV1Api)
        .createNamespace({ body: { metadata: { name: 'kube-system' } } }),
    );
  index = new MachineIndex({ kubeConfig: api.kubeConfig() });
  index.start();
  assert.equal(await index.waitForSync(), true);
});

after(async () => {
  await index?.stop();
  await api?.close();
});

test('machineRecordOf keeps providerID, deployment, failure domain, phase as a state, usable addresses', () => {
  assert.deepEqual(
    machineRecordOf({
      metadata: { namespace: 'ns', name: 'm', labels: { 'cluster.x-k8s.io/deployment-name': 'md' } },
      spec: { providerID: 'gce://p/z/i', failureDomain: 'z' },
      status: {
        phase: 'Provisioned',
        addresses: [{ type: 'InternalIP', address: '10.0.0.1' }, { type: 'Bogus', address: 'x' }, null],
      },
    }),
    {
      key: 'ns/m',
      providerID: 'gce://p/z/i',
      deploymentName: 'md',
      failureDomain: 'z',
      state: 'pending',
      addresses: [{ type: 'InternalIP', address: '10.0.0.1' }],
    },
  );
});

describe('Cluster API mode on AWS (the real AWS identifier, the AWS simulator)', () => {
  let aws: AwsSimulator;
  let clients: AwsClients;
  let identifier: NodeIdentifier;
  const kopsNode = 'aws:///us-east-1a/i-0a0000000000000a1';
  const capiNode = 'aws:///us-east-1a/i-0a0000000000000b1';
  const foreign = 'aws:///us-east-1a/i-0a0000000000000c1';
  const stopped = 'aws:///us-east-1a/i-0a0000000000000d1';

  before(async () => {
    aws = await startAwsSimulator({ throttling: false });
    aws.ec2.addInstances([
      { id: 'i-0a0000000000000a1', zone: 'us-east-1a', cluster, instanceGroup: 'nodes' },
      // Cluster API's instances: the cluster's, but no kops instance-group tag.
      { id: 'i-0a0000000000000b1', zone: 'us-east-1a', cluster },
      { id: 'i-0a0000000000000c1', zone: 'us-east-1a', cluster: 'other.example.com' },
      { id: 'i-0a0000000000000d1', zone: 'us-east-1a', cluster, state: 'stopped' },
    ]);
    clients = await createAwsClients({
      region: aws.region,
      endpoint: aws.endpoint,
      credentials: aws.credentials,
    });
    identifier = new CapiNodeIdentifier(
      new AwsNodeIdentifier({
        ec2: clients.ec2,
        clusterName: cluster,
        // Twenty lookups one after the other: past its burst, the default budget would space them 2 s apart.
        callBudget: { burst: 100, perSecond: 100 },
      }),
      index,
    );
    await createMachine('aws-md-a-1', capiNode, {
      deployment: 'md-a',
      addresses: [{ type: 'InternalIP', address: '10.1.0.7' }],
    });
    await createMachine('aws-claims-kops-node', kopsNode, { deployment: 'md-evil' });
    await createMachine('aws-claims-foreign', foreign, { deployment: 'md-a' });
    await createMachine('aws-claims-stopped', stopped, { deployment: 'md-a' });
    await until(() => index.machinesOf(stopped).length === 1);
  });
  after(async () => {
    clients.destroy();
    await aws.close();
  });

  test('its MachineDeployment is known to the index, and its nodes get the labels of a Node group', async () => {
    assert.equal(index.hasDeployment('md-a'), true);
    assert.equal(index.hasDeployment('nodes'), false);
    const cluster = parseCluster(
      'apiVersion: kops.k8s.io/v1alpha2\nkind: Cluster\nmetadata:\n  name: c\nspec: {}\n',
    );
    assert.deepEqual(buildNodeLabels(cluster, capiInstanceGroup('md-a')), {
      'node-role.kubernetes.io/node': '',
      'kops.k8s.io/instancegroup': 'md-a',
    });
  });

  test("an instance outside kops' groups takes its group, state and addresses from its Machine", async () => {
    const identity = identityOf((await identifier.identify([capiNode])).get(capiNode));
    assert.equal(identity.instanceGroup, 'md-a');
    assert.equal(identity.instanceId, 'i-0a0000000000000b1');
    assert.equal(identity.state, 'running');
    assert.deepEqual(identity.addresses, [{ type: 'InternalIP', address: '10.1.0.7' }]);
    assert.equal(identity.zone, 'zone-a');
  });

  test("a Machine cannot move a kops instance out of its group, nor vouch for another cluster's or a stopped one", async () => {
    const results = await identifier.identify([kopsNode, foreign, stopped]);
    assert.equal(identityOf(results.get(kopsNode)).instanceGroup, 'nodes');
    assert.match(errorOf(results.get(foreign)).message, /does not belong to cluster capi\.example\.com/);
    assert.match(errorOf(results.get(stopped)).message, /is stopped/);
  });

  test('identifying many nodes reads no Machine: the watch serves them (no GET per node)', async () => {
    const gets = await machineRequests('GET');
    const lists = await machineRequests('LIST');
    for (let i = 0; i < 20; i++) await identifier.identify([capiNode, kopsNode]);
    assert.equal(await machineRequests('GET'), gets);
    assert.equal(await machineRequests('LIST'), lists);
  });
});

describe('Cluster API mode on GCE (the real GCE identifier, the GCE simulator)', () => {
  let gce: GceSimulator;
  let identifier: NodeIdentifier;
  const zone = 'us-central1-a';
  const pid = (name: string) => `gce://kops-prod/${zone}/${name}`;

  before(async () => {
    gce = await startGceSimulator({ project: 'kops-prod' });
    // Created by Cluster API's GCP provider: no MIG, a capg-role label.
    gce.world.seedInstance({
      zone,
      name: 'capg-md-b-1',
      labels: { 'capg-role': 'node' },
      networkIP: '10.2.0.9',
    });
    gce.world.seedInstance({ zone, name: 'capg-md-b-2', labels: { 'capg-role': 'node' } });
    gce.world.seedInstance({ zone, name: 'capg-stopped', status: 'TERMINATED' });
    identifier = new CapiNodeIdentifier(
      new GceNodeIdentifier({ compute: simulatorCompute(gce), clusterName: cluster, coalesceWindowMs: 1 }),
      index,
    );
    await createMachine('gce-md-b-1', pid('capg-md-b-1'), {
      deployment: 'md-b',
      addresses: [{ type: 'InternalIP', address: '10.2.0.9' }],
    });
    await createMachine('gce-twin-1', pid('capg-md-b-2'), { deployment: 'md-b' });
    await createMachine('gce-twin-2', pid('capg-md-b-2'), { deployment: 'md-c' });
    await createMachine('gce-stopped', pid('capg-stopped'), { deployment: 'md-b' });
    await until(() => index.machinesOf(pid('capg-stopped')).length === 1);
  });
  after(() => gce.close());

  test('a CAPG instance takes its group from its Machine', async () => {
    const identity = identityOf((await identifier.identify([pid('capg-md-b-1')])).get(pid('capg-md-b-1')));
    assert.equal(identity.instanceGroup, 'md-b');
    assert.equal(identity.instanceId, 'capg-md-b-1');
  });

  test('two Machines claiming one instance identify nobody; a stopped instance stays refused', async () => {
    const results = await identifier.identify([pid('capg-md-b-2'), pid('capg-stopped')]);
    assert.match(errorOf(results.get(pid('capg-md-b-2'))).message, /several Machines claim/);
    assert.match(errorOf(results.get(pid('capg-stopped'))).message, /not RUNNING/);
  });

  test("Compute refusing the controller's own call (403) is a fault to retry, never a Machine's identity", async () => {
    const id = pid('capg-md-b-3');
    gce.world.seedInstance({ zone, name: 'capg-md-b-3', labels: { 'capg-role': 'node' } });
    await createMachine('gce-md-b-3', id, { deployment: 'md-b' });
    await until(() => index.machinesOf(id).length === 1);
    gce.failNext(1, 403, 'instances.get');
    assertFault((await identifier.identify([id])).get(id));
    // Once Compute answers again, the Machine speaks for the CAPG instance.
    assert.equal(identityOf((await identifier.identify([id])).get(id)).instanceGroup, 'md-b');
  });

  test('a deleted Machine stops vouching: the cloud has the last word again', async () => {
    const id = pid('capg-md-b-1');
    await deleteMachine('gce-md-b-1');
    await until(() => index.machinesOf(id).length === 0);
    const error = errorOf((await identifier.identify([id])).get(id));
    assert.ok(error instanceof ForbiddenError);
    assert.match(error.message, /created-by|managed instance group/);
  });
});

describe('Cluster API mode on OpenStack (the real OpenStack identifier, the OpenStack simulator)', () => {
  let os: OpenStackSimulator;
  let identifier: NodeIdentifier;
  const pid = (id: string) => `openstack:///${id}`;
  let capiServer: string;
  let foreign: string;
  let untagged: string;
  let errored: string;

  before(async () => {
    os = await startOpenStackSimulator();
    // Cluster API's servers: the cluster's metadata, but no KopsInstanceGroup.
    capiServer = os.addServer({
      name: 'capo-md-d-1',
      fixed: ['10.3.0.4'],
      metadata: { KubernetesCluster: cluster },
    }).id;
    foreign = os.addServer({
      name: 'theirs',
      metadata: { KubernetesCluster: 'other.example.com', KopsInstanceGroup: 'nodes' },
    }).id;
    untagged = os.addServer({ name: 'no-cluster' }).id;
    errored = os.addServer({
      name: 'capo-broken',
      status: 'ERROR',
      metadata: { KubernetesCluster: cluster },
    }).id;
    identifier = new CapiNodeIdentifier(
      new OpenStackNodeIdentifier({
        nova: new NovaClient({
          session: new KeystoneSession({ auth: os.passwordAuth }),
          retryDelayMs: 1,
          retries: 1,
        }),
        clusterName: cluster,
        coalesceWindowMs: 1,
      }),
      index,
    );
    await createMachine('os-md-d-1', pid(capiServer), { deployment: 'md-d' });
    await createMachine('os-claims-foreign', pid(foreign), { deployment: 'md-d' });
    await createMachine('os-claims-untagged', pid(untagged), { deployment: 'md-d' });
    await createMachine('os-claims-errored', pid(errored), { deployment: 'md-d' });
    await until(() => index.machinesOf(pid(errored)).length === 1);
  });
  after(() => os.close());

  test("a server of the cluster outside kops' groups takes its group from its Machine", async () => {
    const identity = identityOf((await identifier.identify([pid(capiServer)])).get(pid(capiServer)));
    assert.equal(identity.instanceGroup, 'md-d');
    assert.equal(identity.instanceId, capiServer);
  });

  test("a Machine cannot vouch for another cluster's server, an unmarked one, or one in ERROR", async () => {
    const results = await identifier.identify([pid(foreign), pid(untagged), pid(errored)]);
    assert.match(errorOf(results.get(pid(foreign))).message, /belongs to cluster "other\.example\.com"/);
    assert.match(errorOf(results.get(pid(untagged))).message, /belongs to cluster ""/);
    assert.match(errorOf(results.get(pid(errored))).message, /is ERROR/);
  });

  test("Nova refusing the controller's own token (403) is a fault to retry, never a Machine's identity", async () => {
    os.failNext(1, 403, 'servers.get');
    assertFault((await identifier.identify([pid(capiServer)])).get(pid(capiServer)));
  });
});

describe('Cluster API mode on Azure (the real Azure identifier, the Azure simulator)', () => {
  let az: AzureSimulator;
  let identifier: NodeIdentifier;
  let capiVm: string;
  let otherCluster: string;
  let otherGroup: string;

  before(async () => {
    az = await startAzureSimulator();
    // Cluster API's VM: the cluster's tag, but no kops.k8s.io_instancegroup tag.
    capiVm = az.world.providerID(az.world.addVm('capz-md-e-1', { KubernetesCluster: cluster }));
    const theirs = az.world.seedKopsCluster('other.example.com', [{ name: 'nodes', count: 1 }]).get('nodes');
    otherCluster = az.world.providerID(theirs?.[0] as NonNullable<typeof theirs>[number]);
    // The same VM named under a resource group that is not the cluster's.
    otherGroup = capiVm.replace(`/resourceGroups/${az.world.resourceGroup}/`, '/resourceGroups/other-rg/');
    identifier = new CapiNodeIdentifier(
      new AzureNodeIdentifier({
        client: simAzureClient(az),
        clusterName: cluster,
        coalesceWindowMs: 1,
      }),
      index,
    );
    await createMachine('az-md-e-1', capiVm, { deployment: 'md-e' });
    await createMachine('az-claims-other-cluster', otherCluster, { deployment: 'md-e' });
    await createMachine('az-claims-other-group', otherGroup, { deployment: 'md-e' });
    await until(() => index.machinesOf(otherGroup).length === 1);
  });
  after(() => az.close());

  test("a VM of the cluster outside kops' groups takes its group from its Machine", async () => {
    assert.equal(identityOf((await identifier.identify([capiVm])).get(capiVm)).instanceGroup, 'md-e');
  });

  test("a Machine cannot vouch for another cluster's VM, nor one outside the cluster's resource group", async () => {
    const results = await identifier.identify([otherCluster, otherGroup]);
    assert.match(errorOf(results.get(otherCluster)).message, /not named <group>\.capi\.example\.com/);
    assert.match(
      errorOf(results.get(otherGroup)).message,
      /outside this cluster's subscription and resource group/,
    );
  });

  test("ARM refusing the controller's own credentials (403) is a fault to retry, never a Machine's identity", async () => {
    az.failNext(1, 403, 'virtualMachines.get');
    assertFault((await identifier.identify([capiVm])).get(capiVm));
  });
});

describe('what the wrapper passes through', () => {
  const failing = (error: Error): NodeIdentifier => ({
    identify: async (ids) => new Map(ids.map((id) => [id, { ok: false, error }])),
  });

  test('cloud faults and "no such instance" are never replaced by a Machine', async () => {
    const id = 'aws:///us-east-1a/i-0a0000000000000b1';
    for (const error of [new UnavailableError('EC2: HTTP 503'), new NotFoundError('no such instance')]) {
      const result = (await new CapiNodeIdentifier(failing(error), index).identify([id])).get(id);
      assert.equal(errorOf(result), error);
    }
  });

  test('before the Machines are listed, an instance outside the groups is retried, not refused', async () => {
    const id = 'aws:///us-east-1a/i-0a0000000000000b1';
    const unsynced = { hasSynced: () => false, machinesOf: () => [] };
    const result = (
      await new CapiNodeIdentifier(failing(new ForbiddenError('no group')), unsynced).identify([id])
    ).get(id);
    assert.ok(errorOf(result) instanceof UnavailableError);
  });

  test('a Machine without the deployment label names no group', async () => {
    const id = 'aws:///us-east-1a/i-0a00000000000ffff';
    await createMachine('no-label', id);
    await until(() => index.machinesOf(id).length === 1);
    const result = (
      await new CapiNodeIdentifier(failing(new ForbiddenError('no group')), index).identify([id])
    ).get(id);
    assert.match(errorOf(result).message, /has no cluster\.x-k8s\.io\/deployment-name label/);
  });
});
