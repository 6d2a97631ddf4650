import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { V1Node } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { createGceProvider, type GceProvider } from '../../cloud/gce/provider.ts';
import type { NodeIdentifier } from '../../cloud/types.ts';
import { UnavailableError } from '../../errors.ts';
import { kubeList, kubeWatch } from '../../kube/informer.ts';
import { nodeInformer, SharedInformer } from '../../kube/shared-informer.ts';
import { buildNodeLabels } from '../../nodelabels/build-node-labels.ts';
import { managedLabelsAnnotation } from '../../nodelabels/diff-labels.ts';
import type { KubeObject } from '../../sim/apiserver/index.ts';
import { awsProviderID, simInstanceId } from '../../sim/aws/scenario.ts';
import type { SimInstanceInput } from '../../sim/aws/world.ts';
import { type GceDevCluster, startGceDevCluster } from '../../sim/dev-cluster.ts';
import { ClusterStore } from '../../statestore/cluster-store.ts';
import { openVfs } from '../../statestore/open.ts';
import { eventually, startAwsDevCluster } from '../../testing/aws-dev-cluster.ts';
import { msToStop } from '../../testing/leadership.ts';
import { identityRejectedReason, NodeController } from './node-controller.ts';

const aws = await startAwsDevCluster('node-controller-');
const { cluster, store, provider, clusterStore, labelsOf, editNodeLabels } = aws;
const registry = new Registry();
const stop = new AbortController();
let running: Promise<void> | undefined;

after(() => aws.close());

const manyNodes = 1000;
const bulk: SimInstanceInput[] = Array.from({ length: manyNodes }, (_, i) => ({
  id: simInstanceId(10_000 + i),
  zone: 'us-test-1a',
  cluster: cluster.clusterName,
  instanceGroup: 'nodes-us-test-1a',
}));
const foreign: SimInstanceInput = {
  id: simInstanceId(90_001),
  zone: 'us-test-1a',
  cluster: 'other.example.com',
  instanceGroup: 'nodes-us-test-1a',
};
const stopped: SimInstanceInput = {
  id: simInstanceId(90_002),
  zone: 'us-test-1a',
  cluster: cluster.clusterName,
  instanceGroup: 'nodes-us-test-1a',
  state: 'stopped',
};

function nodeOf(instance: SimInstanceInput, labels: Record<string, string> = {}): KubeObject {
  return aws.nodeOf(instance, { labels });
}

async function desiredLabels(group: string): Promise<Record<string, string>> {
  return buildNodeLabels(await clusterStore.cluster(), await clusterStore.instanceGroup(group));
}

function hasLabels(name: string, desired: Record<string, string>): boolean {
  const labels = labelsOf(name);
  return Object.entries(desired).every(([k, v]) => labels[k] === v);
}

describe('NodeController against the simulated cluster', () => {
  before(() => {
    cluster.aws.ec2.addInstances([...bulk, foreign, stopped]);
    for (const instance of [...bulk, foreign, stopped]) store.create(nodeOf(instance));
    cluster.aws.calls.reset();
    const controller = new NodeController({
      kubeConfig: cluster.api.server.kubeConfig(),
      nodes: nodeInformer(cluster.api.server.kubeConfig()),
      identifier: provider.nodeIdentifier,
      clusterStore,
      registry,
      rejectionRetryMs: 3_600_000,
    });
    running = controller.start(stop.signal);
  });
  after(async () => {
    stop.abort();
    await running;
  });

  test('labels every node of every instance group, recording the managed set', async () => {
    for (const [group, names] of cluster.nodesByGroup) {
      const desired = await desiredLabels(group);
      for (const name of names) {
        await eventually(`${name} has the labels of ${group}`, () => hasLabels(name, desired));
        const annotations = store.get('nodes', undefined, name)?.metadata.annotations ?? {};
        assert.equal(annotations[managedLabelsAnnotation], Object.keys(desired).sort().join(','));
        assert.equal(labelsOf(name)['kubernetes.io/hostname'], name, 'other labels stay');
      }
    }
    const controlPlane = cluster.nodesByGroup.get('control-plane-us-test-1a')?.[0] as string;
    assert.equal(labelsOf(controlPlane)['node-role.kubernetes.io/control-plane'], '');
  });

  test('kops’ APIServerNodes, read from the tag the kops CLI put on a control-plane instance; a worker’s own such tag is ignored', async () => {
    // kops-controller's DaemonSet has no KOPS_FEATURE_FLAGS: the CLI that launched the instance had it,
    // and wrote the label into the instance's node-template tags, which kops' identifier applies.
    const tags = { 'k8s.io/cluster-autoscaler/node-template/label/node-role.kubernetes.io/api-server': '' };
    const controlPlane: SimInstanceInput = {
      id: simInstanceId(90_010),
      zone: 'us-test-1a',
      cluster: cluster.clusterName,
      instanceGroup: 'control-plane-us-test-1a',
      tags,
    };
    // A worker able to tag its own instance (Cilium's ENI mode grants nodes ec2:CreateTags).
    const worker: SimInstanceInput = {
      ...controlPlane,
      id: simInstanceId(90_011),
      instanceGroup: 'nodes-us-test-1a',
    };
    cluster.aws.ec2.addInstances([controlPlane, worker]);
    for (const instance of [controlPlane, worker]) store.create(nodeOf(instance));
    const apiServer = 'node-role.kubernetes.io/api-server';
    await eventually(
      'the control-plane node has the api-server role',
      () => labelsOf(controlPlane.id)[apiServer] === '',
    );
    assert.equal(labelsOf(controlPlane.id)['node-role.kubernetes.io/control-plane'], '');
    const desired = await desiredLabels('nodes-us-test-1a');
    await eventually('the worker is labelled', () => hasLabels(worker.id, desired));
    assert.equal(labelsOf(worker.id)[apiServer], undefined, 'a worker never gets the api-server role');
    const managed = store.get('nodes', undefined, controlPlane.id)?.metadata.annotations?.[
      managedLabelsAnnotation
    ];
    assert.ok(managed?.split(',').includes(apiServer), managed);
  });

  test(`labels ${manyNodes} new nodes with a handful of DescribeInstances calls`, async () => {
    const desired = await desiredLabels('nodes-us-test-1a');
    // Labelled nodes stay labelled: each poll resumes where the last one stopped.
    let confirmed = 0;
    await eventually(`all ${manyNodes} nodes are labelled`, () => {
      while (confirmed < bulk.length && hasLabels((bulk[confirmed] as SimInstanceInput).id, desired))
        confirmed++;
      return confirmed === bulk.length;
    });
    const calls = cluster.aws.calls.count('DescribeInstances');
    assert.ok(calls >= 1 && calls <= 5, `${calls} DescribeInstances calls for ${manyNodes + 5} nodes`);
    const metrics = await registry.getSingleMetricAsString('node_controller_reconciles_total');
    assert.match(metrics, /result="labelled"\} (\d+)/);
    assert.ok(Number(/result="labelled"\} (\d+)/.exec(metrics)?.[1]) >= manyNodes);
  });

  test('another cluster’s instance and a stopped instance get no labels, an Event and no retry loop', async () => {
    for (const instance of [foreign, stopped]) {
      await eventually(`an ${identityRejectedReason} event for ${instance.id}`, () =>
        store
          .list('events', 'default')
          .some(
            (e) =>
              (e['involvedObject'] as { name?: string }).name === instance.id &&
              e['reason'] === identityRejectedReason,
          ),
      );
      assert.deepEqual(labelsOf(instance.id), { 'kubernetes.io/hostname': instance.id });
    }
    const foreignEvent = store
      .list('events', 'default')
      .find((e) => (e['involvedObject'] as { name?: string }).name === foreign.id);
    assert.match(String(foreignEvent?.['message']), /tagged for cluster other\.example\.com/);
    assert.equal(foreignEvent?.['type'], 'Warning');
    const rejections = async () =>
      Number(
        /result="rejected"\} (\d+)/.exec(
          await registry.getSingleMetricAsString('node_controller_reconciles_total'),
        )?.[1],
      );
    await eventually('both rejections are counted', async () => (await rejections()) === 2);
    // Node updates and time pass; a refused node is still not reconciled again before its retry delay.
    for (const instance of [foreign, stopped]) {
      store.mutate('nodes', undefined, instance.id, (object) => {
        object['status'] = { conditions: [{ type: 'Ready', status: 'False' }] };
      });
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(await rejections(), 2, 'each refused node was reconciled once, not in a loop');
  });

  test('a refused Node deleted while its Event is written is forgotten: one re-created under its name is reported again', async () => {
    const instance: SimInstanceInput = { ...foreign, id: simInstanceId(90_777) };
    cluster.aws.ec2.addInstances([instance]);
    const events = () =>
      store
        .list('events', 'default')
        .filter((e) => (e['involvedObject'] as { name?: string }).name === instance.id).length;
    cluster.api.server.faults.latency(400, { resource: 'events', verbs: ['create'] });
    try {
      store.create(nodeOf(instance));
      // Deleted while the Event's create waits on the API server.
      await new Promise((resolve) => setTimeout(resolve, 150));
      store.delete('nodes', undefined, instance.id);
      await eventually('the first Event', () => events() === 1);
    } finally {
      cluster.api.server.faults.reset();
    }
    store.create(nodeOf(instance));
    await eventually(
      'the re-created Node is reported too, not taken for the one already reported',
      () => events() === 2,
    );
    store.delete('nodes', undefined, instance.id);
  });

  test('an edited instance group relabels its nodes: new labels set, removed ones pruned, others kept', async () => {
    const [node] = cluster.nodesByGroup.get('high-memory-us-test-1b') as [string];
    await eventually(`${node} is labelled`, () => labelsOf(node)['example.com/workload'] === 'analytics');
    store.mutate('nodes', undefined, node, (object) => {
      object.metadata.labels = { ...object.metadata.labels, 'team.example.com/owner': 'ops' };
    });
    await editNodeLabels('high-memory-us-test-1b', (labels) => {
      delete labels['example.com/workload'];
      labels['example.com/tier'] = 'gold';
    });
    await eventually(`${node} follows the edit`, () => {
      const labels = labelsOf(node);
      return labels['example.com/tier'] === 'gold' && !('example.com/workload' in labels);
    });
    const labels = labelsOf(node);
    assert.equal(labels['team.example.com/owner'], 'ops', 'a label kops never managed is left alone');
    assert.equal(labels['example.com/storage'], 'ebs');
    const other = cluster.nodesByGroup.get('nodes-us-test-1a')?.[0] as string;
    assert.equal(labelsOf(other)['example.com/tier'], undefined, 'nodes of other groups are untouched');
  });
});

describe('NodeController when the cloud fails and nodes change', () => {
  const flakyInstance: SimInstanceInput = { ...bulk[0], id: simInstanceId(90_004) } as SimInstanceInput;
  const failures = { left: 2 };
  const calls: string[][] = [];
  /** The real identifier, except that the flaky instance's first lookups find EC2 unavailable. */
  const flaky: NodeIdentifier = {
    identify: async (providerIDs) => {
      calls.push([...providerIDs]);
      if (providerIDs.includes(awsProviderID(flakyInstance)) && failures.left-- > 0) {
        const error = new UnavailableError('EC2 is unavailable (simulated)');
        return new Map(providerIDs.map((id) => [id, { ok: false, error }]));
      }
      return provider.nodeIdentifier.identify(providerIDs);
    },
  };
  const late: SimInstanceInput = {
    id: simInstanceId(90_003),
    zone: 'us-test-1a',
    cluster: cluster.clusterName,
    instanceGroup: 'nodes-us-test-1a',
  };
  const flakyStop = new AbortController();
  let flakyRun: Promise<void> | undefined;
  before(() => {
    cluster.aws.ec2.addInstances([late, flakyInstance]);
    store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: late.id } });
    store.create(nodeOf(flakyInstance));
    flakyRun = new NodeController({
      kubeConfig: cluster.api.server.kubeConfig(),
      nodes: nodeInformer(cluster.api.server.kubeConfig()),
      identifier: flaky,
      clusterStore,
      registry: new Registry(),
    }).start(flakyStop.signal);
  });
  after(async () => {
    flakyStop.abort();
    await flakyRun;
  });

  test('a failing cloud call is retried with backoff until the node is labelled', async () => {
    const desired = await desiredLabels('nodes-us-test-1a');
    await eventually('the node is labelled after the outage', () =>
      hasLabels(simInstanceId(90_004), desired),
    );
    assert.ok(failures.left < 0, 'the first calls failed');
  });

  test('a node without a providerID waits for one, then is labelled', async () => {
    const desired = await desiredLabels('nodes-us-test-1a');
    await eventually('the outage is over', () => failures.left < 0);
    assert.ok(!calls.flat().some((id) => id.includes(late.id)), 'not identified without a providerID');
    assert.equal(labelsOf(late.id)['kops.k8s.io/instancegroup'], undefined);
    store.mutate('nodes', undefined, late.id, (node) => {
      node['spec'] = { providerID: awsProviderID(late) };
    });
    await eventually(`${late.id} is labelled once it has a providerID`, () => hasLabels(late.id, desired));
  });

  test('a node deleted right after it appears is dropped, not recreated by a patch', async () => {
    const gone = simInstanceId(90_005);
    cluster.aws.ec2.addInstances([{ ...late, id: gone }]);
    store.create(nodeOf({ ...late, id: gone }));
    store.delete('nodes', undefined, gone);
    const survivor = simInstanceId(90_006);
    cluster.aws.ec2.addInstances([{ ...late, id: survivor }]);
    store.create(nodeOf({ ...late, id: survivor }));
    const desired = await desiredLabels('nodes-us-test-1a');
    await eventually('a node created later is labelled', () => hasLabels(survivor, desired));
    assert.equal(
      store.get('nodes', undefined, gone),
      undefined,
      'the deleted node was not recreated by a patch',
    );
  });
});

describe('NodeController on GCE when the compute API refuses the controller itself', () => {
  let gceDir: string;
  let gce: GceDevCluster;
  let gceProvider: GceProvider;
  const gceRegistry = new Registry();
  const gceStop = new AbortController();
  let gceRun: Promise<void> | undefined;
  before(async () => {
    gceDir = await mkdtemp(join(tmpdir(), 'node-controller-gce-'));
    gce = await startGceDevCluster({ stateDir: gceDir });
    gceProvider = await createGceProvider({
      project: gce.project,
      clusterName: gce.clusterName,
      endpoint: gce.gce.endpoint,
      auth: gce.auth,
    });
  });
  after(async () => {
    gceStop.abort();
    await gceRun;
    await gce.close();
    await rm(gceDir, { recursive: true, force: true });
  });

  test('a 403 on its own compute call (a missing permission) is retried, never an IdentityRejected Event', async () => {
    const gceStore = gce.api.server.store;
    const gceClusterStore = new ClusterStore(openVfs(gce.configBase, gce.target.clients.vfsOptions), {
      pollIntervalMs: 100,
    });
    gce.gce.failNext(1_000_000, 403);
    gceRun = new NodeController({
      kubeConfig: gce.api.server.kubeConfig(),
      nodes: nodeInformer(gce.api.server.kubeConfig()),
      identifier: gceProvider.nodeIdentifier,
      clusterStore: gceClusterStore,
      registry: gceRegistry,
      rejectionRetryMs: 3_600_000,
    }).start(gceStop.signal);
    const failed = async () =>
      Number(
        /result="error"\} (\d+)/.exec(
          await gceRegistry.getSingleMetricAsString('node_controller_reconciles_total'),
        )?.[1] ?? 0,
      );
    await eventually('reconciles failed on the refused compute calls', async () => (await failed()) > 0);
    gce.gce.failNext(0, 403);
    for (const [group, names] of gce.nodesByGroup) {
      const ig = await gceClusterStore.instanceGroup(group);
      const desired = buildNodeLabels(await gceClusterStore.cluster(), ig);
      for (const name of names) {
        await eventually(`${name} is labelled once the permission is granted`, () => {
          const labels = (gceStore.get('nodes', undefined, name)?.metadata.labels ?? {}) as Record<
            string,
            string
          >;
          return Object.entries(desired).every(([k, v]) => labels[k] === v);
        });
      }
    }
    const metrics = await gceRegistry.getSingleMetricAsString('node_controller_reconciles_total');
    assert.doesNotMatch(metrics, /result="rejected"/, 'no node was rejected for the controller’s own 403');
    const rejections = gceStore
      .list('events', 'default')
      .filter((e) => e['reason'] === identityRejectedReason);
    assert.deepEqual(rejections, [], 'no node was reported as refused by the cloud');
  });
});

describe('NodeController over a Node cache its process holds across leadership terms', () => {
  test('a new term lists no Node again, and looks at every node from the warm cache', async () => {
    const kubeConfig = cluster.api.server.kubeConfig();
    const list = kubeList<V1Node>(kubeConfig, '/api/v1/nodes');
    let lists = 0;
    const nodes = new SharedInformer<V1Node>({
      name: 'nodes',
      path: '/api/v1/nodes',
      list: (options) => {
        if (!options._continue) lists++; // a list's first page
        return list(options);
      },
      watch: kubeWatch(kubeConfig),
    });
    const looked = new Set<string>();
    const identifier: NodeIdentifier = {
      identify: (providerIDs) => {
        for (const id of providerIDs) looked.add(id);
        return provider.nodeIdentifier.identify(providerIDs);
      },
    };
    const controller = new NodeController({
      kubeConfig,
      nodes,
      identifier,
      clusterStore,
      registry: new Registry(),
      rejectionRetryMs: 3_600_000,
    });
    nodes.start(); // as `run` holds it for the process
    const all = store
      .list('nodes')
      .map((node) => (node['spec'] as { providerID?: string } | undefined)?.providerID)
      .filter((id): id is string => Boolean(id));
    const term = async () => {
      looked.clear();
      const leading = new AbortController();
      const run = controller.start(leading.signal);
      await eventually('every node with a providerID looked at', () => all.every((id) => looked.has(id)));
      leading.abort();
      await run;
    };
    try {
      await term();
      assert.equal(lists, 1);
      await term();
      assert.equal(lists, 1, 'the second term started from the cache, without listing');
    } finally {
      await nodes.stop();
    }
  });
});

describe('NodeController when leadership ends during slow I/O', () => {
  let next = 95_000;

  /**
   * Runs a controller on the cluster, adds a new node, makes one call slow (`slow`), waits until a
   * request of that call has reached a simulator (`arrived`), then ends the term and returns how long
   * the controller took to stop.
   */
  async function stopDuringSlowCall(slow: () => void, arrived: () => boolean): Promise<number> {
    const kubeConfig = cluster.api.server.kubeConfig();
    const nodes = nodeInformer(kubeConfig);
    const controller = new NodeController({
      kubeConfig,
      nodes,
      identifier: provider.nodeIdentifier,
      clusterStore,
      registry: new Registry(),
      rejectionRetryMs: 3_600_000,
    });
    nodes.start();
    const leading = new AbortController();
    const run = controller.start(leading.signal);
    try {
      slow();
      const instance = aws.addNodesInstance(next++);
      store.create(nodeOf(instance));
      await eventually('the slow call is in flight', arrived);
      return msToStop(leading, run);
    } finally {
      leading.abort();
      await run;
      await nodes.stop();
    }
  }

  test('a slow Node patch (API server brownout): the controller stops within a second', async () => {
    const faults = cluster.api.server.faults;
    let patches = 0;
    const plan = faults.plan.bind(faults);
    faults.plan = (resource, verb, namespace) => {
      if (resource === 'nodes' && verb === 'patch') patches++;
      return plan(resource, verb, namespace);
    };
    try {
      const ms = await stopDuringSlowCall(
        () => faults.latency(5_000, { resource: 'nodes', verbs: ['patch'] }),
        () => patches > 0,
      );
      assert.ok(ms < 1_000, `stopped ${Math.round(ms)} ms after leadership ended`);
    } finally {
      faults.plan = plan;
      faults.reset();
    }
  });

  test('a slow DescribeInstances (the SDK riding out throttling): the controller stops within a second', async () => {
    const faults = cluster.aws.faults;
    let lookups = 0;
    const plan = faults.plan.bind(faults);
    faults.plan = (service) => {
      const fault = plan(service);
      if (service === 'ec2' && fault) lookups++;
      return fault;
    };
    try {
      const ms = await stopDuringSlowCall(
        () => faults.add({ service: 'ec2', latencyMs: 5_000 }),
        () => lookups > 0,
      );
      assert.ok(ms < 1_000, `stopped ${Math.round(ms)} ms after leadership ended`);
    } finally {
      faults.plan = plan;
      faults.reset();
    }
  });
});

describe('NodeController when a Node is re-created under its name during the cloud lookup', () => {
  test('the patch names the uid it was planned for: the replacement gets its own labels, never the old instance’s', async () => {
    const own = await startAwsDevCluster('node-controller-recreate-');
    const oldId = 'aws:///us-test-1a/i-0000000000000old1';
    const newId = 'aws:///us-test-1a/i-0000000000000new1';
    let releaseOld: () => void = () => undefined;
    const oldGate = new Promise<void>((resolve) => {
      releaseOld = resolve;
    });
    let oldAsked = false;
    const identity = (providerID: string, spot: boolean) => ({
      ok: true as const,
      identity: {
        providerID,
        instanceId: providerID.split('/').pop() as string,
        instanceGroup: 'nodes-us-test-1a',
        state: 'running',
        addresses: [],
        // The old machine was a spot instance; its replacement is on-demand.
        ...(spot ? { cloudLabels: { 'node-role.kubernetes.io/spot-worker': 'true' } } : {}),
      },
    });
    const identifier: NodeIdentifier = {
      async identify(ids) {
        const out = new Map();
        for (const id of ids) {
          if (id === oldId) {
            oldAsked = true;
            await oldGate; // the old instance's lookup is slow (a throttled cloud)
            out.set(id, identity(id, true));
          } else out.set(id, identity(id, false));
        }
        return out;
      },
    };
    const nodeNamed = (providerID: string): KubeObject =>
      ({
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: 'reused', labels: { 'kubernetes.io/hostname': 'reused' } },
        spec: { providerID },
      }) as KubeObject;
    const nodes = nodeInformer(own.cluster.api.server.kubeConfig());
    const ownRegistry = new Registry();
    const controller = new NodeController({
      kubeConfig: own.cluster.api.server.kubeConfig(),
      nodes,
      identifier,
      clusterStore: own.clusterStore,
      registry: ownRegistry,
    });
    const leading = new AbortController();
    const run = controller.start(leading.signal);
    try {
      await eventually('the signing key is read', () => controller.labelsKey !== undefined);
      own.store.create(nodeNamed(oldId));
      await eventually('the old node’s reconcile waits for its lookup', () => oldAsked);
      own.store.delete('nodes', undefined, 'reused');
      const newUid = own.store.create(nodeNamed(newId)).metadata.uid;
      // The old node's plan is ready only now, for a Node that no longer exists; the replacement's
      // event has queued the name again, to be reconciled once that reconcile ends.
      releaseOld();
      const deleted = async () =>
        (await ownRegistry.getSingleMetric('node_controller_reconciles_total')?.get())?.values.find(
          (v) => v.labels['result'] === 'deleted',
        )?.value ?? 0;
      await eventually(
        'the old node’s patch is refused as for another Node',
        async () => (await deleted()) > 0,
      );
      const group = (await desiredLabels('nodes-us-test-1a'))['kops.k8s.io/instancegroup'];
      await eventually(
        'the replacement is labelled',
        () => own.labelsOf('reused')['kops.k8s.io/instancegroup'] === group,
      );
      const final = own.store.get('nodes', undefined, 'reused');
      assert.equal(final?.metadata.uid, newUid);
      assert.equal(
        final?.metadata.labels?.['node-role.kubernetes.io/spot-worker'],
        undefined,
        'the replacement (on-demand) node does not get the old spot instance’s label',
      );
    } finally {
      releaseOld();
      leading.abort();
      await run;
      await nodes.close();
      await own.close();
    }
  });
});
