import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { createAwsProvider } from '../cloud/aws/provider.ts';
import { InventoryStore } from '../cloud/metal/inventory.ts';
import { MetalCloudGroups } from '../cloud/metal/node-identifier.ts';
import type { CloudGroup } from '../cloud/types.ts';
import { NotFoundError } from '../errors.ts';
import { nodeInformer } from '../kube/shared-informer.ts';
import { createLogger } from '../log.ts';
import { buildNodeLabels } from '../nodelabels/build-node-labels.ts';
import { formatManagedLabels, managedLabelsAnnotation } from '../nodelabels/diff-labels.ts';
import { managedLabelsSignatureAnnotation, signManagedLabels } from '../nodelabels/signed-managed-labels.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import type { KubeObject } from '../sim/apiserver/objects.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import { type DevCluster, startDevCluster } from '../sim/dev-cluster.ts';
import { ClusterStore } from '../statestore/cluster-store.ts';
import type { InstanceGroup } from '../statestore/kops-types.ts';
import { openVfs, vfsOptionsFromEnv } from '../statestore/open.ts';
import { msToStop } from '../testing/leadership.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { toolPath } from '../testing/tools.ts';
import { type NodeInfo, type PodInfo, validateCluster } from '../validation/validate-cluster.ts';
import {
  ValidationMetrics,
  type ValidationSnapshot,
  validationGauges,
  validationGaugesOf,
} from './validation-metrics.ts';

const ig = (name: string, role: InstanceGroup['spec']['role']) =>
  ({
    apiVersion: 'kops.k8s.io/v1alpha2',
    kind: 'InstanceGroup',
    metadata: { name },
    spec: { role },
  }) as InstanceGroup;
const group = (instanceGroup: string, ids: string[]): CloudGroup => ({
  instanceGroup,
  cloudName: instanceGroup,
  minSize: ids.length,
  maxSize: ids.length,
  targetSize: ids.length,
  members: ids.map((id) => ({
    instanceId: id,
    providerID: `aws:///z/${id}`,
    state: 'running',
    healthy: true,
  })),
});
const node = (id: string, ready = true, controlPlane = false): NodeInfo => ({
  name: id,
  providerID: `aws:///z/${id}`,
  labels: controlPlane ? { 'node-role.kubernetes.io/control-plane': '' } : {},
  readyStatus: ready ? 'True' : 'False',
  networkUnavailable: false,
});
const controlPlane = 'node-role.kubernetes.io/control-plane';
const pod = (name: string, options: Partial<PodInfo>): PodInfo => ({
  namespace: 'kube-system',
  name,
  labels: {},
  phase: 'Running',
  notReadyContainers: [],
  priorityClassName: 'system-cluster-critical',
  ...options,
});

/** The AWS provider of a simulated cluster, pointed at its simulators. */
function awsProviderOf(cluster: DevCluster) {
  return createAwsProvider({
    clusterName: cluster.clusterName,
    region: cluster.region,
    endpoint: cluster.aws.endpoint,
    credentials: { ...cluster.aws.credentials },
  });
}

/** The state store of a simulated cluster. */
function clusterStoreOf(cluster: DevCluster): ClusterStore {
  return new ClusterStore(openVfs(cluster.configBase, vfsOptionsFromEnv(cluster.env)));
}

describe('validationGauges', () => {
  test('counts as kops’ exporter: nodes of the cloud groups, critical pods, containers, missing components', () => {
    const snapshot: ValidationSnapshot = {
      instanceGroups: [ig('cp', 'ControlPlane'), ig('nodes', 'Node')],
      cloudGroups: [group('cp', ['c1', 'c2']), group('nodes', ['n1', 'n2', 'n3'])],
      // n3 has no Node yet: it counts as not ready.
      nodes: [node('c1', true, true), node('c2', true, true), node('n1'), node('n2', false)],
      pods: [
        pod('kube-apiserver-c1', { nodeName: 'c1', labels: { 'k8s-app': 'kube-apiserver' } }),
        pod('dns', { phase: 'Pending' }),
        pod('agent', { phase: 'Unknown' }),
        pod('cni', { notReadyContainers: ['a', 'b'] }),
        pod('web', { priorityClassName: undefined, phase: 'Pending' }),
      ],
      components: [
        { name: 'scheduler', healthy: true },
        { name: 'etcd-0', healthy: false },
      ],
    };
    assert.deepEqual(validationGauges(snapshot), {
      kops_component_healthy: 1,
      kops_component_unhealthy: 1,
      kops_node_ready: 3,
      kops_node_notReady: 2,
      // kube-controller-manager and kube-scheduler are missing on both; kube-apiserver on c2: 3 apps.
      kops_pod_missing: 3,
      kops_pod_notReady: 2,
      kops_pod_pending: 1,
      kops_pod_unknown: 1,
    });
  });
});

describe('the gauges count typed validation results', () => {
  const snapshot = (): ValidationSnapshot => ({
    instanceGroups: [ig('cp', 'ControlPlane'), ig('nodes', 'Node'), ig('bastions', 'Bastion')],
    cloudGroups: [group('cp', ['c1']), group('nodes', ['n1', 'n2']), group('bastions', ['b1'])],
    nodes: [node('c1', true, true), node('n1'), node('n2', false)],
    pods: [
      pod('kube-apiserver-c1', { nodeName: 'c1', labels: { 'k8s-app': 'kube-apiserver' } }),
      pod('cni', {
        notReadyContainers: ['a', 'b', 'c'],
        priorityClassName: 'system-node-critical',
        nodeName: 'n1',
      }),
      pod('dns', { phase: 'Pending' }),
    ],
    components: [],
  });
  const expected = {
    kops_component_healthy: 0,
    kops_component_unhealthy: 0,
    kops_node_ready: 2,
    kops_node_notReady: 1,
    kops_pod_missing: 2,
    kops_pod_notReady: 3,
    kops_pod_pending: 1,
    kops_pod_unknown: 0,
  };

  test('any wording of the messages counts the same: the gauges never read them', () => {
    const result = validateCluster(snapshot());
    const reworded = {
      ...result,
      failures: result.failures.map((f) => ({ ...f, message: `reworded: ${f.reason}` })),
    };
    assert.deepEqual(validationGaugesOf(reworded, []), expected);
    assert.deepEqual(validationGauges(snapshot()), expected);
  });

  test('a bastion member (it never joins) is not a not-ready node', () => {
    // kops expects no node of a bastion (pkg/validation/validate_cluster.go validateNodes).
    const values = validationGauges(snapshot());
    assert.equal(values.kops_node_notReady, 1, 'only n2');
  });

  test('nodes of no cloud group count too, as `kubectl get nodes` shows them', () => {
    const withExtra = snapshot();
    withExtra.nodes = [...withExtra.nodes, node('x1'), node('x2', false)];
    const values = validationGauges(withExtra);
    assert.equal(values.kops_node_ready, 3);
    assert.equal(values.kops_node_notReady, 2);
  });

  test('no instance groups: nothing to validate, so no values rather than "all ready"', () => {
    assert.throws(() => validationGauges({ ...snapshot(), instanceGroups: [] }), NotFoundError);
  });
});

describe('ValidationMetrics against the simulated cluster', () => {
  let dir: string;
  let cluster: DevCluster;
  const registry = new Registry();
  const stop = new AbortController();
  let running: Promise<void>;
  let metrics: ValidationMetrics;
  let clusterSpec: ClusterStore;
  /** The NodeController's signing key as the gauges are given it: none until a test sets one. */
  let heldKey: Uint8Array | undefined;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'validation-metrics-'));
    cluster = await startDevCluster({ stateDir: dir, awsThrottling: false });
    const aws = await awsProviderOf(cluster);
    const store = clusterStoreOf(cluster);
    const kubeConfig = cluster.api.server.kubeConfig();
    metrics = new ValidationMetrics({
      clusterName: cluster.clusterName,
      kubeConfig,
      nodes: nodeInformer(kubeConfig),
      core: kubeConfig.makeApiClient(CoreV1Api),
      cloudGroups: aws.cloudGroups,
      instanceGroups: () => store.instanceGroups(),
      cluster: () => store.cluster(),
      labelsKey: () => heldKey,
      registry,
    });
    clusterSpec = store;
    running = metrics.start(stop.signal).finally(() => aws.clients.destroy());
  });
  after(async () => {
    stop.abort();
    await running;
    await cluster.close();
    await rm(dir, { recursive: true, force: true });
  });

  async function gauge(name: string): Promise<number | undefined> {
    const match = new RegExp(`^${name}\\{cluster_name="minimal\\.example\\.com"\\} (\\d+)$`, 'm').exec(
      await registry.metrics(),
    );
    return match ? Number(match[1]) : undefined;
  }

  async function until(check: () => Promise<boolean>): Promise<void> {
    for (let i = 0; i < 400 && !(await check()); i++) await new Promise((resolve) => setTimeout(resolve, 25));
    assert.ok(await check(), 'never happened');
  }

  test('a healthy cluster: every node ready, nothing missing; promtool reads the exposition', async () => {
    await until(async () => (await gauge('kops_node_ready')) !== undefined);
    const nodes = [...cluster.nodesByGroup.values()].flat().length;
    assert.equal(await gauge('kops_node_ready'), nodes);
    assert.equal(await gauge('kops_node_notReady'), 0);
    assert.equal(await gauge('kops_component_healthy'), 3);
    for (const name of [
      'kops_component_unhealthy',
      'kops_pod_missing',
      'kops_pod_notReady',
      'kops_pod_pending',
      'kops_pod_unknown',
    ]) {
      assert.equal(await gauge(name), 0, name);
    }
    const check = spawnSync(toolPath('promtool'), ['check', 'metrics'], { input: await registry.metrics() });
    // Two names are camelCase (kops_node_notReady, kops_pod_notReady), kept for the rules and dashboard that use them; promtool's only complaint may be that lint.
    const problems = `${check.stdout}${check.stderr}`
      .split('\n')
      .filter((line) => line.trim() && !/kops_(node_notReady|pod_notReady) .*camelCase/.test(line));
    assert.deepEqual(problems, []);
  });

  /** The per-instance-group samples of `name`, keyed by `instance_group` (and `state`, when it has one). */
  async function groupGauge(name: string): Promise<Map<string, number>> {
    const samples = new Map<string, number>();
    const line = new RegExp(
      `^${name}\\{cluster_name="minimal\\.example\\.com",instance_group="([^"]+)"(?:,state="(\\w+)")?\\} (\\d+)$`,
      'gm',
    );
    for (const [, group, state, value] of (await registry.metrics()).matchAll(line)) {
      samples.set(state ? `${group}/${state}` : (group as string), Number(value));
    }
    return samples;
  }

  test('per instance group: nodes ready, not ready and missing against the desired size, and label drift', async () => {
    const groups = [...cluster.nodesByGroup.entries()];
    const expected = (missingFrom?: string) =>
      new Map(
        groups.flatMap(([group, names]) => {
          const missing = group === missingFrom ? 1 : 0;
          return [
            [`${group}/ready`, names.length - missing],
            [`${group}/not_ready`, 0],
            [`${group}/missing`, missing],
          ];
        }),
      );
    await until(async () => (await groupGauge('kops_instance_group_nodes')).size === groups.length * 3);
    assert.deepEqual(await groupGauge('kops_instance_group_nodes'), expected());
    assert.deepEqual(
      await groupGauge('kops_instance_group_desired_nodes'),
      new Map(groups.map(([group, names]) => [group, names.length])),
    );
    // The simulated machines joined with no label of their group: no node controller ran, so all drift.
    assert.deepEqual(
      await groupGauge('kops_instance_group_nodes_label_drift'),
      new Map(groups.map(([group, names]) => [group, names.length])),
    );

    // The node controller's work on one node (its group's labels and the managed set) ends its drift.
    const store = cluster.api.server.store;
    const [group, names] = groups.find(([g]) => g.startsWith('nodes')) as [string, string[]];
    const [victim] = names as [string];
    const original = store.get('nodes', undefined, victim) as KubeObject;
    const desired = buildNodeLabels(
      await clusterSpec.cluster(),
      (await clusterSpec.instanceGroups()).find((g) => g.metadata.name === group) as InstanceGroup,
    );
    const labelled = structuredClone(original);
    labelled.metadata = {
      ...labelled.metadata,
      labels: { ...labelled.metadata?.labels, ...desired },
      annotations: { [managedLabelsAnnotation]: formatManagedLabels(Object.keys(desired)) },
    };
    store.update(labelled);
    try {
      await until(
        async () =>
          (await groupGauge('kops_instance_group_nodes_label_drift')).get(group) === names.length - 1,
      );
      // A label the spec does not ask for, in a managed set the node wrote itself: the controller
      // would not remove it, so it is no drift; signed by the controller, it is, once the key is held.
      const drift = async () => (await groupGauge('kops_instance_group_nodes_label_drift')).get(group);
      const current = store.get('nodes', undefined, victim) as KubeObject;
      const uid = current.metadata?.uid as string;
      const keys = [...Object.keys(desired), 'old'];
      const withOld = (signature: string | undefined) => {
        const next = structuredClone(store.get('nodes', undefined, victim) as KubeObject);
        next.metadata = {
          ...next.metadata,
          labels: { ...next.metadata?.labels, old: 'x' },
          annotations: {
            [managedLabelsAnnotation]: formatManagedLabels(keys),
            ...(signature ? { [managedLabelsSignatureAnnotation]: signature } : {}),
          },
        };
        store.update(next);
      };
      const key = new Uint8Array(32).fill(9);
      const seen = (signature: string) =>
        until(
          async () =>
            metrics.snapshot()?.nodes.find((n) => n.name === victim)?.managedLabelsSignature === signature,
        );
      const forged = signManagedLabels(key, { name: victim, uid }, Object.keys(desired));
      withOld(forged);
      heldKey = key;
      await seen(forged);
      assert.equal(await drift(), names.length - 1, 'a forged set counted as drift');
      heldKey = undefined;
      const signed = signManagedLabels(key, { name: victim, uid }, keys);
      withOld(signed);
      await seen(signed);
      assert.equal(await drift(), names.length - 1, 'a set believed without the key');
      heldKey = key;
      assert.equal(
        await drift(),
        names.length,
        'the key held, the signed set is believed at the next scrape',
      );
      heldKey = undefined;
      // Its Node going away is a node missing from its group, as the watch sees it at once.
      store.delete('nodes', undefined, victim);
      await until(async () => (await groupGauge('kops_instance_group_nodes')).get(`${group}/missing`) === 1);
      assert.deepEqual(await groupGauge('kops_instance_group_nodes'), expected(group));
    } finally {
      if (store.get('nodes', undefined, victim)) store.delete('nodes', undefined, victim);
      store.create(original);
    }
    await until(async () => (await groupGauge('kops_instance_group_nodes')).get(`${group}/missing`) === 0);
  });

  test('component statuses refused (deprecated API) or a failing cloud: the other gauges carry on', async () => {
    const own = new Registry();
    let cloudCalls = 0;
    const kubeConfig = cluster.api.server.kubeConfig();
    const groups = await (async () => {
      const aws = await awsProviderOf(cluster);
      try {
        return await aws.cloudGroups.list(cluster.clusterName);
      } finally {
        aws.clients.destroy();
      }
    })();
    const store = clusterStoreOf(cluster);
    const flaky = new ValidationMetrics({
      clusterName: cluster.clusterName,
      kubeConfig,
      nodes: nodeInformer(kubeConfig),
      core: {
        listComponentStatus: async () => {
          throw new Error('componentstatuses is forbidden');
        },
      },
      // The first read works; every later one fails, and the first result must be kept.
      cloudGroups: {
        list: async () => {
          if (cloudCalls++ > 0) throw new Error('RequestLimitExceeded');
          return groups;
        },
      },
      instanceGroups: () => store.instanceGroups(),
      registry: own,
      refreshIntervalMs: 50,
    });
    const flakyStop = new AbortController();
    const flakyRun = flaky.start(flakyStop.signal);
    try {
      const read = async (name: string) =>
        new RegExp(`^${name}\\{cluster_name="minimal\\.example\\.com"\\} (\\d+)$`, 'm').exec(
          await own.metrics(),
        )?.[1];
      await until(async () => (await read('kops_node_ready')) !== undefined && cloudCalls > 2);
      const nodes = [...cluster.nodesByGroup.values()].flat().length;
      assert.equal(Number(await read('kops_node_ready')), nodes);
      assert.equal(Number(await read('kops_component_healthy')), 0);
      assert.equal(Number(await read('kops_component_unhealthy')), 0);
    } finally {
      flakyStop.abort();
      await flakyRun;
    }
  });

  test('a new term whose first cloud read fails tries again within seconds, not at the next interval: its gauges appear once the cloud answers', async () => {
    const own = new Registry();
    let cloudCalls = 0;
    const kubeConfig = cluster.api.server.kubeConfig();
    const aws = await awsProviderOf(cluster);
    const store = clusterStoreOf(cluster);
    const nodes = nodeInformer(kubeConfig);
    const metrics = new ValidationMetrics({
      clusterName: cluster.clusterName,
      kubeConfig,
      nodes,
      core: kubeConfig.makeApiClient(CoreV1Api),
      // The leader changed during an EC2 fault: its first two reads fail.
      cloudGroups: {
        list: async (name) => {
          if (cloudCalls++ < 2) throw new Error('RequestLimitExceeded');
          return aws.cloudGroups.list(name);
        },
      },
      instanceGroups: () => store.instanceGroups(),
      registry: own,
      refreshIntervalMs: 3_600_000,
      retryMs: 20,
    });
    const stop = new AbortController();
    const run = metrics.start(stop.signal);
    try {
      await until(async () => /^kops_node_ready\{/m.test(await own.metrics()));
      assert.equal(cloudCalls, 3, 'two failed reads, then the one that answered; no wait for the hour');
    } finally {
      stop.abort();
      await run;
      aws.clients.destroy();
      await nodes.stop();
    }
  });

  test('inputs too old to stand for the cluster: the gauges are withdrawn, the log says which, and come back when current', async () => {
    const own = new Registry();
    let cloudFails = false;
    const kubeConfig = cluster.api.server.kubeConfig();
    const aws = await awsProviderOf(cluster);
    const store = clusterStoreOf(cluster);
    const { logger, lines } = capturedLogger();
    const gauges = new ValidationMetrics({
      clusterName: cluster.clusterName,
      kubeConfig,
      nodes: nodeInformer(kubeConfig),
      core: kubeConfig.makeApiClient(CoreV1Api),
      cloudGroups: {
        list: async (name) => {
          if (cloudFails) throw new Error('RequestLimitExceeded');
          return aws.cloudGroups.list(name);
        },
      },
      instanceGroups: () => store.instanceGroups(),
      registry: own,
      refreshIntervalMs: 50,
      staleAfterMs: { watch: 1_500, refresh: 500 },
      logger,
    });
    // A live cluster against the production bounds scaled down: a kubelet renews its Lease and etcd
    // reports progress every 100 ms, and the API server bookmarks every 200 ms (its minute), so the
    // Node and pod watches, whose own resources do not change, stay current through bookmarks (their
    // 90 s reopening, which keeps a quiet watch current in production, is beyond this test's 1.5 s).
    // Re-opened so that the Node watch gets the bookmarks too.
    const { store: apiStore } = cluster.api.server;
    apiStore.create({
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'kubelet-heartbeat', namespace: 'kube-node-lease' },
      spec: { renewTime: new Date().toISOString() },
    });
    const progress = setInterval(() => {
      apiStore.mutate('leases', 'kube-node-lease', 'kubelet-heartbeat', (lease) => {
        lease['spec'] = { renewTime: new Date().toISOString() };
      });
      apiStore.notifyProgress();
    }, 100);
    const bookmarks = cluster.api.server.bookmarkIntervalMs;
    cluster.api.server.bookmarkIntervalMs = 200;
    cluster.api.server.faults.dropWatches();
    const leading = new AbortController();
    const run = gauges.start(leading.signal);
    const ready = async () =>
      /^kops_node_ready\{cluster_name="minimal\.example\.com"\} \d+$/m.test(await own.metrics());
    const withdrawn = (why: RegExp) =>
      lines.some((line) => line.includes('cannot validate the cluster; no kops_* values') && why.test(line));
    try {
      await until(ready);
      // The cloud fails: the last read is kept for 500 ms, then the gauges go.
      cloudFails = true;
      await until(async () => !(await ready()));
      assert.ok(
        withdrawn(/cloud groups and the instance groups have not been read for over 1 s/),
        lines.join(''),
      );
      cloudFails = false;
      await until(ready);
      // The pods watch is refused (RBAC revoked, a webhook failing): the cache stops being current.
      cluster.api.server.faults.errors({ resource: 'pods', verbs: ['list', 'watch'], status: 500, rate: 1 });
      cluster.api.server.faults.dropWatches({ resource: 'pods' });
      await until(async () => !(await ready()));
      assert.ok(withdrawn(/the pods-validation watch has not been current for over 2 s/), lines.join(''));
      assert.match(
        await own.metrics(),
        /^informer_last_current_timestamp_seconds\{resource="pods-validation"\} \d+/m,
      );
      cluster.api.server.faults.reset();
      await until(ready);
      assert.ok(lines.some((line) => line.includes('the cluster validates again')));
    } finally {
      cluster.api.server.faults.reset();
      cluster.api.server.bookmarkIntervalMs = bookmarks;
      clearInterval(progress);
      apiStore.delete('leases', 'kube-node-lease', 'kubelet-heartbeat');
      leading.abort();
      await run;
      aws.clients.destroy();
    }
    assert.doesNotMatch(
      await own.metrics(),
      /^informer_last_current_timestamp_seconds\{resource="pods-validation"\}/m,
      'a watch stopped with the term has no sample',
    );
  });

  test('a scrape reflects a node going away at once, through the watch, with no API call', async () => {
    const [victim] = cluster.nodesByGroup.get('nodes-us-test-1a') as string[];
    const store = cluster.api.server.store;
    const removed = store.get('nodes', undefined, victim as string);
    store.delete('nodes', undefined, victim as string);
    try {
      await until(async () => (await gauge('kops_node_notReady')) === 1);
      const nodes = [...cluster.nodesByGroup.values()].flat().length;
      assert.equal(await gauge('kops_node_ready'), nodes - 1);
    } finally {
      if (removed) store.create(removed);
    }
    await until(async () => (await gauge('kops_node_notReady')) === 0);
  });

  test('after a burst of watch events the kept counts equal a validation of the cache from scratch', async () => {
    const store = cluster.api.server.store;
    const nodes = [...cluster.nodesByGroup.values()].flat();
    await until(async () => (await gauge('kops_node_ready')) === nodes.length);
    const originals = nodes.slice(0, 3).map((name) => store.get('nodes', undefined, name) as KubeObject);
    const created: string[] = [];
    try {
      // Two nodes go NotReady, one becomes a control-plane node without its static pods.
      for (const [i, original] of originals.entries()) {
        const changed = structuredClone(original);
        if (i < 2) changed.status = { conditions: [{ type: 'Ready', status: 'False' }] };
        else
          changed.metadata = {
            ...changed.metadata,
            labels: { ...changed.metadata?.labels, [controlPlane]: '' },
          };
        store.update(changed);
      }
      // Critical pods in trouble, some deleted again, and one static pod on the new control-plane node.
      for (let i = 0; i < 12; i++) {
        const name = `burst-${i}`;
        store.create({
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: {
            namespace: 'kube-system',
            name,
            labels: i === 0 ? { 'k8s-app': 'kube-scheduler' } : {},
          },
          spec: {
            nodeName: originals[2]?.metadata?.name,
            priorityClassName: 'system-node-critical',
            containers: [{ name: 'c', image: 'i' }],
          },
          status: {
            phase: i % 3 === 0 ? 'Running' : i % 3 === 1 ? 'Pending' : 'Unknown',
            containerStatuses: [{ name: 'c', ready: i % 2 === 0, restartCount: 0, image: 'i', imageID: '' }],
          },
        });
        created.push(name);
      }
      for (const name of created.splice(8)) store.delete('pods', 'kube-system', name);
      // Watch events arrive in order: once this last one is cached, so is everything before it.
      store.create({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { namespace: 'kube-system', name: 'burst-sentinel' },
        spec: { containers: [{ name: 'c', image: 'i' }] },
      });
      created.push('burst-sentinel');
      await until(async () => metrics.snapshot()?.pods.some((p) => p.name === 'burst-sentinel') === true);
      const snapshot = metrics.snapshot() as ValidationSnapshot;
      const scraped = Object.fromEntries(
        await Promise.all(Object.keys(validationGauges(snapshot)).map(async (n) => [n, await gauge(n)])),
      );
      assert.deepEqual(scraped, validationGauges(snapshot));
      assert.equal(scraped.kops_node_notReady, 2);
      assert.equal(scraped.kops_pod_missing, 2, 'the new control-plane node runs only kube-scheduler');
    } finally {
      for (const name of created) store.delete('pods', 'kube-system', name);
      for (const original of originals) {
        const current = store.get('nodes', undefined, original.metadata?.name as string) as KubeObject;
        store.update({
          ...original,
          metadata: { ...original.metadata, resourceVersion: current.metadata?.resourceVersion },
        });
      }
    }
    await until(
      async () => (await gauge('kops_node_notReady')) === 0 && (await gauge('kops_pod_missing')) === 0,
    );
  });

  test('instances needing a rolling update: no series while the cloud names no launch template', async () => {
    await until(async () => (await groupGauge('kops_instance_group_nodes')).size > 0);
    assert.match(await registry.metrics(), /^# HELP kops_instance_group_nodes_needing_update /m);
    assert.equal((await groupGauge('kops_instance_group_nodes_needing_update')).size, 0);
  });

  test('a node joined outside any Auto Scaling group counts, as `kubectl get nodes` shows it', async () => {
    const store = cluster.api.server.store;
    const nodes = [...cluster.nodesByGroup.values()].flat().length;
    await until(async () => (await gauge('kops_node_ready')) === nodes);
    const name = 'i-000000000000e0001';
    store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name, labels: { 'kubernetes.io/hostname': name } },
      spec: { providerID: `aws:///us-test-1a/${name}` },
      status: { conditions: [{ type: 'Ready', status: 'False' }] },
    });
    try {
      await until(async () => (await gauge('kops_node_notReady')) === 1);
      assert.equal(await gauge('kops_node_ready'), nodes);
      assert.equal(store.list('nodes').length, nodes + 1, 'ready + notReady = the Nodes');
    } finally {
      store.delete('nodes', undefined, name);
    }
    await until(async () => (await gauge('kops_node_notReady')) === 0);
  });

  test("a new leadership term over the process's Node watch counts every Node once: not zero, not twice", async () => {
    const own = new Registry();
    const kubeConfig = cluster.api.server.kubeConfig();
    const aws = await awsProviderOf(cluster);
    const nodes = nodeInformer(kubeConfig);
    const store = clusterStoreOf(cluster);
    const gauges = new ValidationMetrics({
      clusterName: cluster.clusterName,
      kubeConfig,
      nodes,
      core: kubeConfig.makeApiClient(CoreV1Api),
      cloudGroups: aws.cloudGroups,
      instanceGroups: () => store.instanceGroups(),
      registry: own,
    });
    const ready = async () =>
      Number(
        /^kops_node_ready\{cluster_name="minimal\.example\.com"\} (\d+)$/m.exec(await own.metrics())?.[1] ??
          NaN,
      );
    nodes.start(); // as `run` holds it for the process
    const term = async () => {
      const leading = new AbortController();
      const run = gauges.start(leading.signal);
      await until(async () => !Number.isNaN(await ready()));
      const value = await ready();
      leading.abort();
      await run;
      return value;
    };
    try {
      const first = await term();
      assert.ok(first > 0);
      assert.equal(await term(), first, 'the second term counted the cached Nodes once');
    } finally {
      await nodes.stop();
      aws.clients.destroy();
    }
  });

  test('no instance groups in the state store: no values at all, never zeros that read as healthy', async () => {
    const own = new Registry();
    const kubeConfig = cluster.api.server.kubeConfig();
    let refreshed = 0;
    const empty = new ValidationMetrics({
      clusterName: cluster.clusterName,
      kubeConfig,
      nodes: nodeInformer(kubeConfig),
      core: kubeConfig.makeApiClient(CoreV1Api),
      cloudGroups: { list: async () => [] },
      instanceGroups: async () => {
        refreshed++;
        return [];
      },
      registry: own,
      refreshIntervalMs: 50,
    });
    const emptyStop = new AbortController();
    const emptyRun = empty.start(emptyStop.signal);
    try {
      await until(async () => refreshed > 1 && empty.snapshot() !== undefined);
      assert.doesNotMatch(await own.metrics(), /^kops_\w+\{/m);
    } finally {
      emptyStop.abort();
      await emptyRun;
    }
  });
});

describe('ValidationMetrics when leadership ends during a slow read', () => {
  let api: SimApiServer;
  let aws: AwsSimulator;

  before(async () => {
    [api, aws] = await Promise.all([startApiServer(), startAwsSimulator({ throttling: false })]);
  });
  after(async () => {
    await Promise.all([api.close(), aws.close()]);
  });

  /** Waits until `check` holds, polling every 20 ms for at most 10 s. */
  async function until(what: string, check: () => boolean): Promise<void> {
    for (let i = 0; i < 500 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.ok(check(), `never happened: ${what}`);
  }

  /**
   * Runs the gauges with the real AWS provider and API client until their first refresh, makes one
   * read slow (`slow`), waits until a request of that read has reached the simulator (`arrived`), then
   * ends the term and returns how long the component took to stop.
   */
  async function stopDuringSlowRead(
    slow: () => void,
    arrived: () => boolean,
    options: { refreshIntervalMs?: number } = {},
  ): Promise<number> {
    const provider = await createAwsProvider({
      clusterName: 'slow.example.com',
      region: aws.region,
      endpoint: aws.endpoint,
      credentials: { ...aws.credentials },
    });
    const kubeConfig = api.kubeConfig();
    const nodes = nodeInformer(kubeConfig);
    const metrics = new ValidationMetrics({
      clusterName: 'slow.example.com',
      kubeConfig,
      nodes,
      core: kubeConfig.makeApiClient(CoreV1Api),
      cloudGroups: provider.cloudGroups,
      instanceGroups: async () => [ig('nodes', 'Node')],
      registry: new Registry(),
      refreshIntervalMs: options.refreshIntervalMs ?? 50,
    });
    const leading = new AbortController();
    const run = metrics.start(leading.signal);
    try {
      await until('the first refresh', () => metrics.snapshot() !== undefined);
      slow();
      await until('the slow read is in flight', arrived);
      return msToStop(leading, run);
    } finally {
      leading.abort();
      await run;
      provider.clients.destroy();
      await nodes.stop();
    }
  }

  test('the cloud groups answer slowly (the SDK riding out throttling): the component stops within a second', async () => {
    let arrivals = 0;
    const plan = aws.faults.plan.bind(aws.faults);
    aws.faults.plan = (service) => {
      const fault = plan(service);
      if (service === 'autoscaling' && fault) arrivals++;
      return fault;
    };
    try {
      const ms = await stopDuringSlowRead(
        () => aws.faults.add({ service: 'autoscaling', latencyMs: 5_000 }),
        () => arrivals > 0,
      );
      assert.ok(ms < 1_000, `stopped ${Math.round(ms)} ms after leadership ended`);
    } finally {
      aws.faults.plan = plan;
      aws.faults.reset();
    }
  });

  test('the component statuses answer slowly: the component stops within a second', async () => {
    let arrivals = 0;
    let slowNow = false;
    const plan = api.faults.plan.bind(api.faults);
    api.faults.plan = (resource, verb, namespace) => {
      if (slowNow && resource === 'componentstatuses') arrivals++;
      return plan(resource, verb, namespace);
    };
    try {
      const ms = await stopDuringSlowRead(
        () => {
          api.faults.latency(5_000, { resource: 'componentstatuses' });
          slowNow = true;
        },
        () => arrivals > 0,
      );
      assert.ok(ms < 1_000, `stopped ${Math.round(ms)} ms after leadership ended`);
    } finally {
      api.faults.plan = plan;
      api.faults.reset();
    }
  });

  test('a read that never answers costs each refresh its deadline: the other inputs stay current', async () => {
    const kubeConfig = api.kubeConfig();
    const nodes = nodeInformer(kubeConfig);
    let cloudCalls = 0;
    let refreshes = 0;
    const lines: string[] = [];
    const metrics = new ValidationMetrics({
      clusterName: 'hung.example.com',
      kubeConfig,
      nodes,
      core: {
        listComponentStatus: async () => {
          refreshes++;
          return { items: [] };
        },
      },
      cloudGroups: {
        list: () => {
          cloudCalls++;
          return new Promise<CloudGroup[]>(() => undefined);
        },
      },
      instanceGroups: async () => [ig('nodes', 'Node')],
      registry: new Registry(),
      refreshIntervalMs: 20,
      readTimeoutMs: 100,
      logger: createLogger({ level: 'warn', destination: { write: (line: string) => lines.push(line) } }),
    });
    const leading = new AbortController();
    const run = metrics.start(leading.signal);
    try {
      await until('three refreshes', () => refreshes >= 3);
      assert.ok(cloudCalls >= 2, 'each refresh asked the cloud again after the deadline');
      const warning = lines.find((line) => line.includes('cannot refresh the validation inputs'));
      assert.match(warning ?? '', /no answer within 100 ms/);
      assert.equal(
        lines.filter((line) => line.includes('cannot refresh the validation inputs')).length,
        1,
        'the same failure is written once in ten minutes, not at every refresh',
      );
    } finally {
      leading.abort();
      await run;
      await nodes.stop();
    }
  });
});

describe('ValidationMetrics on metal', () => {
  let api: SimApiServer;

  before(async () => {
    api = await startApiServer();
  });
  after(async () => {
    await api.close();
  });

  test('hosts are matched to their Nodes by name: a healthy host is one ready node, a host without a Node one not ready', async () => {
    // kops' nodeup sets no providerID on metal, and kops' metal GetCloudGroups matches Nodes by name:
    // counted by providerID only, each host would be a machine not joined and its Node counted again.
    const vfs = openVfs(`memfs://metal-gauges-${Math.random().toString(36).slice(2)}/c`);
    await vfs.write(
      'metal/inventory.yaml',
      [
        'hosts:',
        '  - {name: cp-1, instanceGroup: cp, addresses: [10.0.0.10]}',
        '  - {name: node-1, instanceGroup: nodes, addresses: [10.0.0.11], providerID: "metal://rack4-u12"}',
        '  - {name: node-2, instanceGroup: nodes, addresses: [10.0.0.12]}',
        '',
      ].join('\n'),
    );
    for (const [name, labels] of [
      ['cp-1', { [controlPlane]: '' }],
      ['node-1', {}],
    ] as const) {
      api.store.create({
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name, labels },
        status: { conditions: [{ type: 'Ready', status: 'True' }] },
      });
    }
    const kubeConfig = api.kubeConfig();
    const nodes = nodeInformer(kubeConfig);
    const registry = new Registry();
    const metrics = new ValidationMetrics({
      clusterName: 'metal.example.com',
      kubeConfig,
      nodes,
      core: { listComponentStatus: async () => ({ items: [] }) },
      cloudGroups: new MetalCloudGroups(new InventoryStore({ vfs })),
      identifiesByNodeName: true,
      instanceGroups: async () => [ig('cp', 'ControlPlane'), ig('nodes', 'Node')],
      registry,
    });
    const leading = new AbortController();
    const run = metrics.start(leading.signal);
    const gauge = async (name: string) =>
      new RegExp(`^${name}\\{cluster_name="metal\\.example\\.com"\\} (\\d+)$`, 'm').exec(
        await registry.metrics(),
      )?.[1];
    try {
      for (let i = 0; i < 400 && (await gauge('kops_node_ready')) !== '2'; i++) {
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      assert.equal(await gauge('kops_node_ready'), '2');
      assert.equal(await gauge('kops_node_notReady'), '1', 'node-2 has not joined; no Node counted twice');
      const snapshot = metrics.snapshot();
      assert.ok(snapshot);
      assert.deepEqual(
        validateCluster(snapshot).failures.map((f) => `${f.reason}/${f.name}`),
        [
          'machine-not-joined/node-2',
          'static-pod-missing/cp-1',
          'static-pod-missing/cp-1',
          'static-pod-missing/cp-1',
        ],
        'the snapshot validates from scratch as the gauges count',
      );
    } finally {
      leading.abort();
      await run;
      await nodes.stop();
    }
  });
});
