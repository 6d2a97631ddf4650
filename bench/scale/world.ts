/**
 * The simulated cluster of the scale benchmark, in a process of its own (so the controller's memory
 * and CPU are measured alone): `kops-controller dev`'s AWS cluster (API server, EC2 with its
 * documented throttle, Auto Scaling, an S3 state store with kops' sample cluster) grown to N Nodes
 * and P pods. Its Nodes are unlabelled (as a fresh cluster's), `groupNodes` of them in the
 * `high-memory-us-test-1b` instance group and the rest in `nodes-us-test-1a`, each a running EC2
 * instance of that group's Auto Scaling group with a Ready Node, a kube-proxy pod (critical, so
 * validation reads it) and the Deployment pods of bench/informer.ts spread over the nodes.
 * The parent asks for cloud and API request counts, for how many Nodes carry a label, and for an
 * instance-group edit, over IPC.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseDocument } from 'yaml';
import type { CloudOverrides } from '../../src/cloud/from-config.ts';
import type { ResourceType } from '../../src/sim/apiserver/resources.ts';
import { resourceTypeByName } from '../../src/sim/apiserver/resources.ts';
import { awsProviderID, clusterInstances } from '../../src/sim/aws/scenario.ts';
import { type DevCluster, kubeletNodeStatus, startDevCluster } from '../../src/sim/dev-cluster.ts';
import { openVfs, type VfsOptions, vfsOptionsFromEnv } from '../../src/statestore/open.ts';
import { samplePod } from '../informer.ts';

/** The instance group an edit is measured on, and the one holding every other seeded node. */
export const editedGroup = 'high-memory-us-test-1b';
export const bulkGroup = 'nodes-us-test-1a';

/** What the world is seeded with. */
export interface WorldSize {
  nodes: number;
  pods: number;
  /** Nodes of {@link editedGroup}; the rest go to {@link bulkGroup}. */
  groupNodes: number;
}

/** What the parent needs to point a controller at the world. */
export interface WorldReady {
  type: 'ready';
  kubeconfig: string;
  configPath: string;
  clients: { cloud: CloudOverrides; vfsOptions: VfsOptions };
  /** Nodes and pods in the API server, the sample cluster's own included. */
  nodes: number;
  pods: number;
  seedMs: number;
  rssMiB: number;
}

/** AWS calls since the last reset: DescribeInstances served and refused by the throttle, and every action served. */
export interface CloudCalls {
  describeInstances: number;
  /** Of those, the lookups by instance id (the NodeController's) and the listings (the gauges' refresh). */
  describeById: number;
  describeListing: number;
  throttled: number;
  all: number;
}

type ToWorld =
  | { type: 'start'; size: WorldSize }
  | { type: 'cloud-calls'; reset?: boolean }
  | { type: 'api-requests'; reset?: boolean }
  | { type: 'labelled'; group?: string; label: string; value: string }
  | { type: 'in-own-group' }
  | { type: 'edit-node-labels'; group: string; label: string; value: string }
  | { type: 'exit' };
type FromWorld =
  | WorldReady
  | { type: 'failed'; error: string }
  | { type: 'cloud-calls'; calls: CloudCalls }
  | { type: 'api-requests'; requests: number }
  | { type: 'labelled'; nodes: number; of: number }
  | { type: 'edited' };

/** The label kops puts on every node of an instance group, naming it. */
const instanceGroupLabel = 'kops.k8s.io/instancegroup';

/**
 * Seeds the nodes, their instances and Auto Scaling membership, and the pods; returns the instance
 * group of each seeded Node.
 */
function seed(cluster: DevCluster, size: WorldSize): Map<string, string> {
  const store = cluster.api.server.store;
  const nodesType = resourceTypeByName('nodes') as ResourceType;
  const podsType = resourceTypeByName('pods') as ResourceType;
  const groups = [
    { name: editedGroup, count: size.groupNodes, zone: 'us-test-1b', firstId: 0x100000 },
    { name: bulkGroup, count: size.nodes - size.groupNodes, zone: 'us-test-1a', firstId: 0x200000 },
  ];
  const groupOf = new Map<string, string>();
  for (const group of groups) {
    const instances = clusterInstances({
      cluster: cluster.clusterName,
      instanceGroup: group.name,
      count: group.count,
      zones: [group.zone],
      firstId: group.firstId,
    });
    cluster.aws.ec2.addInstances(instances);
    const asgName = `${group.name}.${cluster.clusterName}`;
    const asg = cluster.aws.autoscaling.autoScalingGroups().find((g) => g.name === asgName);
    const members = [...(asg?.members.map((m) => m.instanceId) ?? []), ...instances.map((i) => i.id)];
    cluster.aws.autoscaling.addAutoScalingGroup({
      name: asgName,
      minSize: members.length,
      maxSize: members.length,
      desiredCapacity: members.length,
      zones: [group.zone],
      cluster: cluster.clusterName,
      instanceGroup: group.name,
      members,
    });
    for (const [k, instance] of instances.entries()) {
      const n = group.firstId + k;
      store.createEntry(
        nodesType,
        {
          apiVersion: 'v1',
          kind: 'Node',
          metadata: { name: instance.id, labels: { 'kubernetes.io/hostname': instance.id } },
          spec: { providerID: awsProviderID(instance) },
          status: kubeletNodeStatus(instance.id, `172.${16 + ((n >> 16) & 15)}.${(n >> 8) & 255}.${n & 255}`),
        },
        {},
      );
      store.createEntry(
        podsType,
        {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: {
            namespace: 'kube-system',
            name: `kube-proxy-${instance.id}`,
            labels: { 'k8s-app': 'kube-proxy' },
          },
          spec: {
            nodeName: instance.id,
            priorityClassName: 'system-node-critical',
            containers: [{ name: 'kube-proxy', image: 'registry.k8s.io/kube-proxy:v1.33.0' }],
          },
          status: {
            phase: 'Running',
            conditions: [{ type: 'Ready', status: 'True' }],
            containerStatuses: [
              { name: 'kube-proxy', image: 'kube-proxy', imageID: '', ready: true, restartCount: 0 },
            ],
          },
        },
        {},
      );
      groupOf.set(instance.id, group.name);
    }
  }
  for (let team = 0; team < 20; team++) {
    store.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: `team-${team}` } });
  }
  const nodeNames = [...groupOf.keys()];
  const deploymentPods = Math.max(0, size.pods - size.nodes);
  for (let i = 0; i < deploymentPods; i++) {
    const pod = samplePod(i);
    (pod['spec'] as { nodeName: string }).nodeName = nodeNames[i % nodeNames.length] as string;
    store.createEntry(podsType, pod, {});
  }
  return groupOf;
}

/** The world process: starts and seeds the cluster, then answers the parent. */
async function serveWorld(): Promise<void> {
  const send = (message: FromWorld) => process.send?.(message);
  process.on('disconnect', () => process.exit(0));
  let cluster: DevCluster | undefined;
  let stateDir: string | undefined;
  let apiRequests = 0;
  let groupOf = new Map<string, string>();
  process.on('message', (message: ToWorld) => {
    void (async () => {
      if (message.type === 'start') {
        stateDir = await mkdtemp(join(tmpdir(), 'scale-'));
        cluster = await startDevCluster({ stateDir, awsThrottling: true });
        const started = performance.now();
        groupOf = seed(cluster, message.size);
        const seedMs = performance.now() - started;
        const server = cluster.api.server;
        // A real apiserver keeps about five minutes of changes (etcd compaction); a label storm of
        // 50,000 patches must not expire the continue tokens of a list in progress.
        server.store.historyLimit = 200_000;
        // Every API request passes the fault plan once: that is where they are counted, all but the
        // leader's lease renewals (every 2 s whatever the controller does).
        const plan = server.faults.plan.bind(server.faults);
        server.faults.plan = (resource, verb) => {
          if (resource !== 'leases') apiRequests++;
          return plan(resource, verb);
        };
        const { clients } = cluster.target;
        send({
          type: 'ready',
          kubeconfig: server.kubeconfig(),
          configPath: cluster.configPath,
          clients: { cloud: clients.cloud, vfsOptions: clients.vfsOptions },
          nodes: server.store.view(resourceTypeByName('nodes') as ResourceType).to,
          pods: server.store.view(resourceTypeByName('pods') as ResourceType).to,
          seedMs,
          rssMiB: process.memoryUsage().rss / 1048576,
        });
        return;
      }
      if (!cluster) throw new Error(`${message.type} before start`);
      const nodesType = resourceTypeByName('nodes') as ResourceType;
      const { aws } = cluster;
      switch (message.type) {
        case 'cloud-calls':
          send({
            type: 'cloud-calls',
            calls: {
              describeInstances: aws.calls.count('DescribeInstances'),
              describeById: aws.calls.countForm('DescribeInstances by id'),
              describeListing: aws.calls.countForm('DescribeInstances listing'),
              throttled: aws.calls.throttled('DescribeInstances'),
              all: aws.calls.count(),
            },
          });
          if (message.reset) aws.calls.reset();
          return;
        case 'api-requests':
          send({ type: 'api-requests', requests: apiRequests });
          if (message.reset) apiRequests = 0;
          return;
        case 'labelled': {
          let nodes = 0;
          let of = 0;
          for (const entry of cluster.api.server.store.snapshot(nodesType)) {
            const labels = entry.object.metadata.labels ?? {};
            if (message.group && labels[instanceGroupLabel] !== message.group) continue;
            of++;
            if (labels[message.label] === message.value) nodes++;
          }
          send({ type: 'labelled', nodes, of });
          return;
        }
        case 'in-own-group': {
          let nodes = 0;
          for (const [name, group] of groupOf) {
            const node = cluster.api.server.store.entry(nodesType, undefined, name);
            if (node?.object.metadata.labels?.[instanceGroupLabel] === group) nodes++;
          }
          send({ type: 'labelled', nodes, of: groupOf.size });
          return;
        }
        case 'edit-node-labels': {
          // As `kops edit ig` would: the instance group's spec.nodeLabels rewritten in the state store.
          const vfs = openVfs(cluster.configBase, vfsOptionsFromEnv(cluster.env));
          const path = `instancegroup/${message.group}`;
          const doc = parseDocument((await vfs.read(path)).data.toString('utf8'));
          doc.setIn(['spec', 'nodeLabels', message.label], message.value);
          await vfs.write(path, doc.toString());
          send({ type: 'edited' });
          return;
        }
        case 'exit':
          await cluster.close();
          if (stateDir) await rm(stateDir, { recursive: true, force: true });
          process.exit(0);
      }
    })().catch((err: Error) => send({ type: 'failed', error: err.stack ?? err.message }));
  });
}

/** The parent's handle on a world process. */
export interface World {
  ready: WorldReady;
  pid: number;
  cloudCalls(reset?: boolean): Promise<CloudCalls>;
  apiRequests(reset?: boolean): Promise<number>;
  /** Seeded Nodes labelled with their own instance group, of all seeded. */
  inOwnGroup(): Promise<{ nodes: number; of: number }>;
  /** Nodes (of `group`, when given) whose label `label` is `value`, and how many were looked at. */
  labelled(label: string, value: string, group?: string): Promise<{ nodes: number; of: number }>;
  editNodeLabels(group: string, label: string, value: string): Promise<void>;
  stop(): Promise<void>;
}

/** Forks the world process and seeds it; resolves once its API server serves. */
export async function startWorld(size: WorldSize, options: { maxOldSpaceMiB?: number } = {}): Promise<World> {
  const child: ChildProcess = fork(new URL(import.meta.url).pathname, [], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    // A million whole pods (object and JSON text, as an apiserver's watch cache holds them) take
    // about 4.5 GB of heap, past V8's default limit.
    execArgv: [...process.execArgv, `--max-old-space-size=${options.maxOldSpaceMiB ?? 12_288}`],
  });
  // One question at a time: answers carry no id, so two of the same type in flight would both take
  // the first answer.
  let queue: Promise<unknown> = Promise.resolve();
  const ask = <T extends FromWorld['type']>(message: ToWorld, type: T) => {
    const answer = queue.then(() => askNow(message, type));
    queue = answer.catch(() => undefined);
    return answer;
  };
  const askNow = <T extends FromWorld['type']>(message: ToWorld, type: T) =>
    new Promise<Extract<FromWorld, { type: T }>>((resolve, reject) => {
      const onExit = (code: number | null) => reject(new Error(`the world process exited with ${code}`));
      const onMessage = (reply: FromWorld) => {
        if (reply.type !== type && reply.type !== 'failed') return;
        child.off('message', onMessage).off('exit', onExit);
        if (reply.type === 'failed') reject(new Error(reply.error));
        else resolve(reply as Extract<FromWorld, { type: T }>);
      };
      child.on('message', onMessage).once('exit', onExit);
      child.send(message);
    });
  const ready = await ask({ type: 'start', size }, 'ready');
  return {
    ready,
    pid: child.pid as number,
    cloudCalls: async (reset) => (await ask({ type: 'cloud-calls', reset }, 'cloud-calls')).calls,
    apiRequests: async (reset) => (await ask({ type: 'api-requests', reset }, 'api-requests')).requests,
    labelled: async (label, value, group) => {
      const { nodes, of } = await ask(
        { type: 'labelled', label, value, ...(group ? { group } : {}) },
        'labelled',
      );
      return { nodes, of };
    },
    inOwnGroup: async () => {
      const { nodes, of } = await ask({ type: 'in-own-group' }, 'labelled');
      return { nodes, of };
    },
    editNodeLabels: async (group, label, value) => {
      await ask({ type: 'edit-node-labels', group, label, value }, 'edited');
    },
    stop: async () => {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.send({ type: 'exit' } satisfies ToWorld);
      await exited;
    },
  };
}

if (import.meta.main) await serveWorld();
