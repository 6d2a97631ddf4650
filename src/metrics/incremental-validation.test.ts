import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import type { CloudGroup, CloudGroupMember } from '../cloud/types.ts';
import { NotFoundError } from '../errors.ts';
import { instanceGroupLabel, roleLabels } from '../nodelabels/build-node-labels.ts';
import { formatManagedLabels } from '../nodelabels/diff-labels.ts';
import { signManagedLabels } from '../nodelabels/signed-managed-labels.ts';
import { type Cluster, type InstanceGroup, parseCluster } from '../statestore/kops-types.ts';
import { type PodInfo, validateCluster } from '../validation/validate-cluster.ts';
import {
  type FailureKey,
  failureKey,
  IncrementalValidation,
  type SlowInputs,
} from './incremental-validation.ts';
import { instanceGroupHealth, type LabelledNodeInfo } from './instance-group-health.ts';
import { countsOf } from './validation-metrics.ts';

/** The NodeController's signing key, when the slow inputs carry it. */
const labelsKey = new Uint8Array(32).fill(3);

const cluster: Cluster = parseCluster(`apiVersion: kops.k8s.io/v1alpha2
kind: Cluster
metadata:
  name: c.example.com
spec:
  kubernetesVersion: v1.32.0
  kubelet:
    nodeLabels:
      team: infra
`);

const igNames = ['cp', 'api', 'nodes', 'spot', 'bastion'];
const nodeNames = ['n0', 'n1', 'n2', 'n3', 'n4', 'n5', 'n6', 'n7'];
/** More providerIDs than members, so some Nodes are of no group; members may share one. */
const providerIDs = ['p0', 'p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7', 'p8', 'p9'].map((p) => `aws:///z/${p}`);
const podNames = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j'];
const apps = ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kube-proxy'];

const arbInstanceGroup: fc.Arbitrary<InstanceGroup> = fc
  .record({
    name: fc.constantFrom(...igNames),
    role: fc.constantFrom('ControlPlane', 'APIServer', 'Node', 'Bastion'),
    minSize: fc.option(fc.nat(3), { nil: undefined }),
    pool: fc.option(fc.constantFrom('a', 'b'), { nil: undefined }),
  })
  .map(
    ({ name, role, minSize, pool }) =>
      ({
        apiVersion: 'kops.k8s.io/v1alpha2',
        kind: 'InstanceGroup',
        metadata: { name },
        spec: {
          role,
          ...(minSize !== undefined ? { minSize } : {}),
          ...(pool ? { nodeLabels: { pool } } : {}),
        },
      }) as InstanceGroup,
  );

/** Some members are named like a Node (a metal host, a GCE instance), which a cloud may link them by. */
const arbMember: fc.Arbitrary<CloudGroupMember> = fc
  .record({
    providerID: fc.constantFrom(...providerIDs),
    nodeName: fc.option(fc.constantFrom(...nodeNames), { nil: undefined }),
    state: fc.constantFrom('pending', 'running', 'running', 'stopping', 'stopped', 'terminated', 'unknown'),
    warmPool: fc.boolean(),
    template: fc.option(fc.constantFrom('t1', 't2'), { nil: undefined }),
  })
  .map(({ providerID, nodeName, state, warmPool, template }) => ({
    instanceId: nodeName ?? providerID.slice('aws:///z/'.length),
    providerID,
    state,
    healthy: true,
    ...(warmPool ? { warmPool } : {}),
    ...(template ? { template } : {}),
  }));

const arbCloudGroup: fc.Arbitrary<CloudGroup> = fc
  .record({
    instanceGroup: fc.constantFrom(...igNames, 'unknown'),
    targetSize: fc.nat(4),
    template: fc.option(fc.constantFrom('t1', 't2'), { nil: undefined }),
    members: fc.array(arbMember, { maxLength: 4 }),
  })
  .map(({ instanceGroup, targetSize, template, members }) => ({
    instanceGroup,
    cloudName: `asg-${instanceGroup}`,
    minSize: targetSize,
    maxSize: targetSize,
    targetSize,
    ...(template ? { template } : {}),
    members,
  }));

const arbSlow: fc.Arbitrary<SlowInputs> = fc.record({
  instanceGroups: fc.array(arbInstanceGroup, { maxLength: 4 }),
  cloudGroups: fc.array(arbCloudGroup, { maxLength: 4 }),
  cluster: fc.option(fc.constant(cluster), { nil: undefined }),
  identifiesByNodeName: fc.boolean(),
  labelsKey: fc.option(fc.constant(labelsKey), { nil: undefined }),
});

const arbNode: fc.Arbitrary<LabelledNodeInfo> = fc
  .record({
    name: fc.constantFrom(...nodeNames),
    providerID: fc.option(fc.constantFrom(...providerIDs), { nil: undefined }),
    group: fc.option(fc.constantFrom(...igNames, 'unknown'), { nil: undefined }),
    controlPlane: fc.boolean(),
    role: fc.option(fc.constantFrom(...Object.values(roleLabels)), { nil: undefined }),
    team: fc.option(fc.constantFrom('infra', 'web'), { nil: undefined }),
    readyStatus: fc.constantFrom('True', 'True', 'False', 'Unknown'),
    networkUnavailable: fc.boolean(),
    old: fc.boolean(),
    managed: fc.constantFrom('none', 'signed', 'forged'),
    needsUpdate: fc.boolean(),
  })
  .map((n) => {
    const labels: Record<string, string> = {};
    if (n.group) labels[instanceGroupLabel] = n.group;
    if (n.controlPlane) labels['node-role.kubernetes.io/control-plane'] = '';
    if (n.role) labels[n.role] = '';
    if (n.team) labels.team = n.team;
    // A label no spec asks for: drift only where the controller signed it as its own.
    if (n.old) labels['old'] = 'x';
    const keys = [...Object.keys(labels), 'old'];
    return {
      name: n.name,
      ...(n.providerID ? { providerID: n.providerID } : {}),
      labels,
      readyStatus: n.readyStatus,
      networkUnavailable: n.networkUnavailable,
      uid: `uid-${n.name}`,
      ...(n.managed === 'none'
        ? {}
        : {
            managedLabels: formatManagedLabels(keys),
            // A forged set: the node added `old` to the set the controller signed.
            managedLabelsSignature: signManagedLabels(
              labelsKey,
              { name: n.name, uid: `uid-${n.name}` },
              n.managed === 'forged' ? keys.filter((k) => k !== 'old') : keys,
            ),
          }),
      ...(n.needsUpdate ? { needsUpdate: true } : {}),
    };
  });

const arbPod: fc.Arbitrary<PodInfo> = fc
  .record({
    namespace: fc.constantFrom('kube-system', 'default'),
    name: fc.constantFrom(...podNames),
    nodeName: fc.option(fc.constantFrom(...nodeNames), { nil: undefined }),
    priorityClassName: fc.option(fc.constantFrom('system-cluster-critical', 'system-node-critical', 'high'), {
      nil: undefined,
    }),
    phase: fc.option(fc.constantFrom('Running', 'Pending', 'Unknown', 'Succeeded', 'Failed'), {
      nil: undefined,
    }),
    app: fc.option(fc.constantFrom(...apps), { nil: undefined }),
    notReadyContainers: fc.subarray(['x', 'y', 'z']),
  })
  .map((p) => ({
    namespace: p.namespace,
    name: p.name,
    ...(p.nodeName ? { nodeName: p.nodeName } : {}),
    ...(p.priorityClassName ? { priorityClassName: p.priorityClassName } : {}),
    ...(p.phase ? { phase: p.phase } : {}),
    labels: (p.app ? { 'k8s-app': p.app } : {}) as Record<string, string>,
    notReadyContainers: p.notReadyContainers,
  }));

type Step =
  | { kind: 'slow'; slow: SlowInputs }
  | { kind: 'node'; node: LabelledNodeInfo }
  | { kind: 'delete-node'; name: string }
  | { kind: 'pod'; pod: PodInfo }
  | { kind: 'delete-pod'; namespace: string; name: string };

const arbStep: fc.Arbitrary<Step> = fc.oneof(
  { weight: 1, arbitrary: arbSlow.map((slow) => ({ kind: 'slow' as const, slow })) },
  { weight: 5, arbitrary: arbNode.map((node) => ({ kind: 'node' as const, node })) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(...nodeNames).map((name) => ({ kind: 'delete-node' as const, name })),
  },
  { weight: 5, arbitrary: arbPod.map((pod) => ({ kind: 'pod' as const, pod })) },
  {
    weight: 2,
    arbitrary: fc
      .record({ namespace: fc.constantFrom('kube-system', 'default'), name: fc.constantFrom(...podNames) })
      .map((p) => ({ kind: 'delete-pod' as const, ...p })),
  },
);

/** Sorted canonical texts, so two results compare regardless of order. */
const canonical = (items: readonly object[]) =>
  items.map((item) => JSON.stringify(item, Object.keys(item).sort())).sort();

/**
 * The cluster as an informer's cache holds it (a Map: an update keeps its place, a delete and add moves
 * to the end), fed to the incremental validation as the informer's handlers would be, and compared with
 * a from-scratch validation of the same cache after every step.
 */
function replay(initial: SlowInputs | undefined, steps: readonly Step[]): void {
  const nodes = new Map<string, LabelledNodeInfo>();
  const pods = new Map<string, PodInfo>();
  // Watch events may come before the first refresh has read the slow inputs.
  let slow = initial;
  const incremental = new IncrementalValidation();
  if (slow) incremental.setSlowInputs(slow);
  for (const [index, step] of [{ kind: 'start' as const }, ...steps].entries()) {
    if (step.kind === 'slow') {
      slow = step.slow;
      incremental.setSlowInputs(slow);
    } else if (step.kind === 'node') {
      const before = nodes.get(step.node.name);
      nodes.set(step.node.name, step.node);
      incremental.nodeChanged(before, step.node);
    } else if (step.kind === 'delete-node') {
      const before = nodes.get(step.name);
      nodes.delete(step.name);
      if (before) incremental.nodeChanged(before, undefined);
    } else if (step.kind === 'pod') {
      const key = `${step.pod.namespace}/${step.pod.name}`;
      const before = pods.get(key);
      pods.set(key, step.pod);
      incremental.podChanged(before, step.pod);
    } else if (step.kind === 'delete-pod') {
      const key = `${step.namespace}/${step.name}`;
      const before = pods.get(key);
      pods.delete(key);
      if (before) incremental.podChanged(before, undefined);
    }
    if (!slow) continue;
    const input = { ...slow, nodes: [...nodes.values()], pods: [...pods.values()] };
    const at = `after step ${index}`;
    let full: ReturnType<typeof validateCluster>;
    try {
      full = validateCluster(input);
    } catch (err) {
      assert.ok(err instanceof NotFoundError, at);
      assert.throws(() => incremental.counts(), { message: err.message }, at);
      assert.throws(() => incremental.result(), { message: err.message }, at);
      continue;
    }
    const result = incremental.result();
    assert.deepEqual(
      canonical(result.failures),
      canonical(full.failures.map(failureKey) as FailureKey[]),
      at,
    );
    assert.deepEqual(
      canonical(result.nodes),
      canonical(full.nodes.map((n) => ({ name: n.name, role: n.role, ready: n.ready, status: n.status }))),
      at,
    );
    assert.deepEqual(incremental.counts(), countsOf(full), at);
    assert.deepEqual(incremental.groups(), instanceGroupHealth(input), at);
    // The Nodes in another order (a re-listed cache, `validate` reading the API server): the same.
    const reordered = validateCluster({ ...input, nodes: [...input.nodes].reverse() });
    assert.deepEqual(countsOf(reordered), countsOf(full), `${at}, Nodes in another order`);
  }
}

describe('IncrementalValidation', () => {
  test('random event sequences: after every step, the same result as validating the cache from scratch', () => {
    fc.assert(
      fc.property(
        fc.option(arbSlow, { nil: undefined }),
        fc.array(arbStep, { maxLength: 60 }),
        (slow, steps) => replay(slow, steps),
      ),
      { numRuns: 400 },
    );
  });

  test('two Nodes naming one member: the last by name is the member’s, in whatever order they come', () => {
    const ig = {
      apiVersion: 'kops.k8s.io/v1alpha2',
      kind: 'InstanceGroup',
      metadata: { name: 'nodes' },
      spec: { role: 'Node' },
    } as InstanceGroup;
    const member = {
      instanceId: 'p0',
      providerID: providerIDs[0] as string,
      state: 'running' as const,
      healthy: true,
    };
    const node = (name: string, labels: Record<string, string>): LabelledNodeInfo => ({
      name,
      providerID: providerIDs[0] as string,
      labels,
      readyStatus: 'True',
      networkUnavailable: false,
    });
    const slow = {
      instanceGroups: [ig],
      cloudGroups: [
        { instanceGroup: 'nodes', cloudName: 'a', minSize: 1, maxSize: 1, targetSize: 1, members: [member] },
      ],
    };
    replay(slow, [
      { kind: 'node', node: node('first', {}) },
      { kind: 'node', node: node('second', { 'node-role.kubernetes.io/control-plane': '' }) },
      { kind: 'node', node: node('first', { team: 'x' }) },
      { kind: 'delete-node', name: 'second' },
      { kind: 'node', node: node('second', {}) },
      { kind: 'delete-node', name: 'first' },
    ]);
    // Arriving in the other order, the member's Node is still `second`.
    replay(slow, [
      { kind: 'node', node: node('second', { 'node-role.kubernetes.io/control-plane': '' }) },
      { kind: 'node', node: node('first', {}) },
    ]);
  });

  test('by name on metal: a Node without providerID is the member’s of its name, as its providerID changes', () => {
    const ig = (name: string, role: InstanceGroup['spec']['role']) =>
      ({
        apiVersion: 'kops.k8s.io/v1alpha2',
        kind: 'InstanceGroup',
        metadata: { name },
        spec: { role },
      }) as InstanceGroup;
    const host = (name: string, providerID = `metal://${name}`): CloudGroupMember => ({
      instanceId: name,
      providerID,
      state: 'unknown',
      healthy: true,
    });
    const hosts = (instanceGroup: string, members: CloudGroupMember[]): CloudGroup => ({
      instanceGroup,
      cloudName: `metal/${instanceGroup}`,
      minSize: members.length,
      maxSize: members.length,
      targetSize: members.length,
      members,
    });
    const node = (name: string, extra: Partial<LabelledNodeInfo> = {}): LabelledNodeInfo => ({
      name,
      labels: {},
      readyStatus: 'True',
      networkUnavailable: false,
      ...extra,
    });
    const metal: SlowInputs = {
      instanceGroups: [ig('cp', 'ControlPlane'), ig('nodes', 'Node')],
      cloudGroups: [hosts('cp', [host('n0')]), hosts('nodes', [host('n1'), host('n2', 'metal://rack4-u12')])],
      identifiesByNodeName: true,
    };
    const steps: Step[] = [
      { kind: 'node', node: node('n0', { labels: { 'node-role.kubernetes.io/control-plane': '' } }) },
      { kind: 'node', node: node('n1') },
      { kind: 'node', node: node('n2', { readyStatus: 'False' }) },
      // A Node that names another machine is no longer the host's of its name; then the host's again.
      { kind: 'node', node: node('n1', { providerID: 'metal://elsewhere' }) },
      { kind: 'node', node: node('n3', { providerID: 'metal://n1' }) },
      { kind: 'node', node: node('n1') },
      { kind: 'delete-node', name: 'n3' },
      // The inventory moves a host to another name, and the refresh says nodes are not named after all.
      {
        kind: 'slow',
        slow: {
          ...metal,
          cloudGroups: [hosts('cp', [host('n0')]), hosts('nodes', [host('n4', 'metal://n1')])],
        },
      },
      { kind: 'node', node: node('n4') },
      { kind: 'slow', slow: { ...metal, identifiesByNodeName: false } },
      { kind: 'slow', slow: metal },
      { kind: 'delete-node', name: 'n2' },
    ];
    replay(metal, steps);
    // The healthy metal cluster the audit found failing: no machine "not joined", no doubled node.
    const incremental = new IncrementalValidation();
    incremental.setSlowInputs(metal);
    for (const step of steps.slice(0, 2))
      if (step.kind === 'node') incremental.nodeChanged(undefined, step.node);
    incremental.nodeChanged(undefined, node('n2'));
    assert.deepEqual(incremental.counts(), {
      nodesReady: 3,
      nodesNotReady: 0,
      machinesNotJoined: 0,
      componentsMissing: 3,
      podsPending: 0,
      podsUnknown: 0,
      containersNotReady: 0,
    });
  });

  test('no instance group: the same refusal as a full validation, until the refresh brings one', () => {
    const incremental = new IncrementalValidation();
    incremental.setSlowInputs({ instanceGroups: [], cloudGroups: [] });
    assert.throws(() => incremental.counts(), NotFoundError);
    assert.throws(() => incremental.groups(), NotFoundError);
    incremental.setSlowInputs({
      instanceGroups: [
        {
          apiVersion: 'kops.k8s.io/v1alpha2',
          kind: 'InstanceGroup',
          metadata: { name: 'nodes' },
          spec: { role: 'Node', minSize: 2 },
        } as InstanceGroup,
      ],
      cloudGroups: [],
    });
    assert.deepEqual(incremental.groups(), [
      { instanceGroup: 'nodes', ready: 0, notReady: 0, desired: 2, missing: 2 },
    ]);
  });
});
