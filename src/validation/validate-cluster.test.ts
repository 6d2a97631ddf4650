import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { CloudGroup } from '../cloud/types.ts';
import { NotFoundError } from '../errors.ts';
import type { InstanceGroup, InstanceGroupRole } from '../statestore/kops-types.ts';
import {
  criticalPodTrouble,
  expectedToJoin,
  groupAndRoleByLabels,
  isListedRole,
  missingControlPlaneApps,
  type NodeInfo,
  nodeInfoOf,
  type PodInfo,
  podInfoOf,
  podInstanceGroup,
  runningComponentOf,
  type ValidationInput,
  validateCluster,
} from './validate-cluster.ts';

function ig(name: string, role: InstanceGroupRole): InstanceGroup {
  return {
    apiVersion: 'kops.k8s.io/v1alpha2',
    kind: 'InstanceGroup',
    metadata: { name },
    spec: { role },
  } as InstanceGroup;
}

function group(instanceGroup: string, ids: string[], targetSize = ids.length): CloudGroup {
  return {
    instanceGroup,
    cloudName: `${instanceGroup}.c`,
    minSize: targetSize,
    maxSize: targetSize,
    targetSize,
    members: ids.map((id) => ({
      instanceId: id,
      providerID: `aws:///z/${id}`,
      state: 'running',
      healthy: true,
    })),
  };
}

function node(id: string, options: Partial<NodeInfo> & { controlPlane?: boolean } = {}): NodeInfo {
  const { controlPlane, ...rest } = options;
  return {
    name: id,
    providerID: `aws:///z/${id}`,
    labels: {
      'kubernetes.io/hostname': id,
      'topology.kubernetes.io/zone': 'z',
      ...(controlPlane ? { 'node-role.kubernetes.io/control-plane': '' } : {}),
    },
    readyStatus: 'True',
    networkUnavailable: false,
    ...rest,
  };
}

function pod(name: string, options: Partial<PodInfo> = {}): PodInfo {
  return { namespace: 'kube-system', name, labels: {}, phase: 'Running', notReadyContainers: [], ...options };
}

/** The static pods a ready control-plane node runs. */
function staticPods(nodeName: string): PodInfo[] {
  return ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler'].map((app) =>
    pod(`${app}-${nodeName}`, {
      nodeName,
      labels: { 'k8s-app': app },
      priorityClassName: 'system-cluster-critical',
    }),
  );
}

/** An input the tests may change in place. */
interface Input extends ValidationInput {
  cloudGroups: CloudGroup[];
  nodes: NodeInfo[];
  pods: PodInfo[];
}

/** A healthy cluster: one control-plane node and two workers. */
function healthy(): Input {
  return {
    instanceGroups: [ig('control-plane', 'ControlPlane'), ig('nodes', 'Node'), ig('bastions', 'Bastion')],
    cloudGroups: [
      group('control-plane', ['i-cp']),
      group('nodes', ['i-1', 'i-2']),
      group('bastions', ['i-b']),
    ],
    nodes: [node('i-cp', { controlPlane: true }), node('i-1'), node('i-2')],
    pods: [
      ...staticPods('i-cp'),
      pod('kube-proxy-i-1', { nodeName: 'i-1', priorityClassName: 'system-node-critical' }),
    ],
  };
}

const messages = (input: ValidationInput) =>
  validateCluster(input).failures.map((f) => `${f.type}/${f.name}: ${f.message}`);

describe('validateCluster', () => {
  test('a healthy cluster has no failures and lists its nodes with their roles (a bastion needs no node)', () => {
    const result = validateCluster(healthy());
    assert.deepEqual(result.failures, []);
    assert.deepEqual(
      result.nodes.map((n) => [n.name, n.role, n.zone, n.hostname, n.status]),
      [
        ['i-cp', 'control-plane', 'z', 'i-cp', 'True'],
        ['i-1', 'node', 'z', 'i-1', 'True'],
        ['i-2', 'node', 'z', 'i-2', 'True'],
      ],
    );
  });

  test("an API name still on kops' placeholder address is the only failure; real addresses pass", () => {
    for (const placeholder of ['203.0.113.123', 'FD00:DEAD:ADD::']) {
      const input = {
        ...healthy(),
        apiServer: { host: 'api.c.example.com', addresses: ['10.0.0.9', placeholder] },
      };
      input.nodes[1] = node('i-1', { readyStatus: 'False' });
      const result = validateCluster(input);
      assert.deepEqual(
        result.failures.map((f) => [f.type, f.name]),
        [['dns', 'apiserver']],
      );
      assert.match(
        result.failures[0]?.message ?? '',
        /api\.c\.example\.com still resolves to kops' placeholder/,
      );
      assert.deepEqual(result.nodes, []);
    }
    const published = { ...healthy(), apiServer: { host: 'api.c.example.com', addresses: ['10.0.0.9'] } };
    assert.deepEqual(validateCluster(published).failures, []);
  });

  test('a group below its target size, a machine that has not joined, a group the cloud lacks', () => {
    const input = healthy();
    input.cloudGroups = [group('control-plane', ['i-cp']), group('nodes', ['i-1', 'i-2', 'i-3'], 4)];
    assert.deepEqual(messages(input), [
      'InstanceGroup/nodes: InstanceGroup "nodes" did not have enough nodes 3 vs 4',
      'Machine/i-3: machine "i-3" has not yet joined cluster',
      'InstanceGroup/bastions: InstanceGroup "bastions" is missing from the cloud provider',
    ]);
  });

  // kops' pkg/validation/validate_cluster.go validateNodes: every member but a detached one counts
  // towards the target size; a member without a Node is excused only in a bastion group, in the warm
  // pool (cloudinstances.WarmPool) or detached. upup/pkg/fi/cloudup/awsup/aws_cloud.go lists the warm
  // pool (DescribeWarmPool) and drops only lifecycle state `Terminating`.
  test('a warm-pool instance counts towards the target size and is not expected to join, as in kops', () => {
    const input = healthy();
    const nodes = group('nodes', ['i-1', 'i-2', 'i-warm-stopped', 'i-warm-running'], 4);
    Object.assign(nodes.members[2] as object, { state: 'stopped', warmPool: true });
    Object.assign(nodes.members[3] as object, { state: 'running', warmPool: true });
    input.cloudGroups = [group('control-plane', ['i-cp']), nodes, group('bastions', ['i-b'])];
    assert.deepEqual(messages(input), [], 'four members for a target of four; the warm two need no Node');
    input.nodes = input.nodes.filter((n) => n.name !== 'i-2');
    assert.deepEqual(
      messages({ ...input, maxUnreadyNodes: 1 }),
      [],
      'the warm pool is not among the unready that --max-unready-nodes counts',
    );
  });

  test('an instance held in Terminating:Wait is a member expected to have joined, as in kops', () => {
    const input = healthy();
    const nodes = group('nodes', ['i-1', 'i-2', 'i-hook']);
    Object.assign(nodes.members[2] as object, { state: 'stopping' });
    input.cloudGroups = [group('control-plane', ['i-cp']), nodes, group('bastions', ['i-b'])];
    assert.deepEqual(messages(input), ['Machine/i-hook: machine "i-hook" has not yet joined cluster']);
    input.nodes.push(node('i-hook'));
    assert.deepEqual(messages(input), [], 'with its Node it is an ordinary member');
  });

  test('a stopped instance outside a warm pool is expected to join, as kops; a terminated one is not seen', () => {
    const input = healthy();
    const nodes = group('nodes', ['i-1', 'i-2', 'i-stopped', 'i-gone'], 3);
    Object.assign(nodes.members[2] as object, { state: 'stopped' });
    Object.assign(nodes.members[3] as object, { state: 'terminated' });
    input.cloudGroups = [group('control-plane', ['i-cp']), nodes, group('bastions', ['i-b'])];
    assert.deepEqual(
      messages(input),
      ['Machine/i-stopped: machine "i-stopped" has not yet joined cluster'],
      'three visible members for three; the stopped one has no Node; the terminated one is not seen',
    );
  });

  test('a node that is not Ready, or whose network is unavailable, fails with its role', () => {
    const input = healthy();
    input.nodes = [
      node('i-cp', { controlPlane: true }),
      node('i-1', { readyStatus: 'False' }),
      node('i-2', { networkUnavailable: true }),
    ];
    assert.deepEqual(messages(input), [
      'Node/i-1: node "i-1" of role "node" is not ready',
      'Node/i-2: node "i-2" of role "node" is not ready',
    ]);
    assert.deepEqual(
      validateCluster(input).nodes.map((n) => n.status),
      ['True', 'False', 'True'],
    );
  });

  test('--max-unready-nodes forgives worker nodes and their pods, only while their number is within it', () => {
    const input = healthy();
    input.nodes = [
      node('i-cp', { controlPlane: true }),
      node('i-1', { readyStatus: 'Unknown' }),
      node('i-2'),
    ];
    input.pods.push(
      pod('cni-i-1', { nodeName: 'i-1', priorityClassName: 'system-node-critical', phase: 'Pending' }),
    );
    assert.equal(messages(input).length, 2, 'not tolerated by default');
    assert.deepEqual(messages({ ...input, maxUnreadyNodes: 1 }), []);
    // Two unready workers are more than one: neither is forgiven.
    input.nodes[2] = node('i-2', { readyStatus: 'False' });
    assert.equal(messages({ ...input, maxUnreadyNodes: 1 }).length, 3);
  });

  test('an unready control-plane node is never tolerated', () => {
    const input = healthy();
    input.nodes[0] = node('i-cp', { controlPlane: true, readyStatus: 'False' });
    assert.deepEqual(messages({ ...input, maxUnreadyNodes: 5 }), [
      'Node/i-cp: node "i-cp" of role "control-plane" is not ready',
    ]);
  });

  test('critical pods pending, of unknown phase or with unready containers fail; others are ignored', () => {
    const input = healthy();
    input.pods.push(
      pod('dns-1', { priorityClassName: 'system-cluster-critical', phase: 'Pending' }),
      pod('agent-1', { priorityClassName: 'system-node-critical', phase: 'Unknown', nodeName: 'i-2' }),
      pod('cni-1', {
        priorityClassName: 'system-node-critical',
        notReadyContainers: ['cni', 'init'],
        nodeName: 'i-1',
      }),
      pod('job-1', {
        priorityClassName: 'system-cluster-critical',
        phase: 'Succeeded',
        notReadyContainers: ['job'],
      }),
      pod('app-1', { namespace: 'default', phase: 'Pending' }),
      pod('failed-1', { priorityClassName: 'system-cluster-critical', phase: 'Failed' }),
    );
    const result = validateCluster(input);
    assert.deepEqual(
      result.failures.map((f) => [f.name, f.message, f.instanceGroup?.metadata.name]),
      [
        ['kube-system/dns-1', 'system-cluster-critical pod "dns-1" is pending', undefined],
        ['kube-system/agent-1', 'system-node-critical pod "agent-1" is unknown phase', 'nodes'],
        ['kube-system/cni-1', 'system-node-critical pod "cni-1" is not ready (cni,init)', 'nodes'],
      ],
    );
  });

  test('a ready control-plane node must run the three static pods, matched by k8s-app in kube-system', () => {
    const input = healthy();
    input.pods = input.pods.filter((p) => p.labels['k8s-app'] !== 'kube-scheduler');
    // A scheduler in another namespace does not count.
    input.pods.push(
      pod('kube-scheduler-x', {
        namespace: 'default',
        nodeName: 'i-cp',
        labels: { 'k8s-app': 'kube-scheduler' },
      }),
    );
    assert.deepEqual(messages(input), ['Node/i-cp: control-plane node "i-cp" is missing kube-scheduler pod']);
  });

  test('Node and Pod objects are read as kops reads them', () => {
    const info = nodeInfoOf({
      metadata: { name: 'n', labels: { a: 'b' } },
      spec: { providerID: 'aws:///z/i-1' },
      status: {
        conditions: [
          { type: 'Ready', status: 'True' },
          { type: 'NetworkUnavailable', status: 'True' },
        ],
      },
    });
    assert.deepEqual(info, {
      name: 'n',
      providerID: 'aws:///z/i-1',
      labels: { a: 'b' },
      readyStatus: 'True',
      networkUnavailable: true,
    });
    assert.equal(nodeInfoOf({ metadata: { name: 'm' } }).readyStatus, 'Unknown');
    const podInfo = podInfoOf({
      metadata: { name: 'p', namespace: 'kube-system', labels: { 'k8s-app': 'x' } },
      spec: { nodeName: 'n', priorityClassName: 'system-node-critical', containers: [] },
      status: {
        phase: 'Running',
        containerStatuses: [
          { name: 'a', ready: true, image: 'a', imageID: '', restartCount: 0 },
          { name: 'b', ready: false, image: 'b', imageID: '', restartCount: 1 },
        ],
      },
    });
    assert.deepEqual(podInfo.notReadyContainers, ['b']);
    assert.equal(podInfo.priorityClassName, 'system-node-critical');
  });
});

/**
 * Validation must never say "ready" wrongly: a cluster called ready that kops would not call ready is
 * a false all-clear. Each rule cites the kops code it follows (kubernetes/kops @ 268927e2).
 */
describe('validateCluster never says ready wrongly', () => {
  test('no instance groups at all is an error, not a ready cluster (kops: "no InstanceGroup objects found")', () => {
    // pkg/validation/validate_cluster.go NewClusterValidator and cmd/kops/validate_cluster.go
    // RunValidateCluster both refuse an empty instance-group list.
    const input = { ...healthy(), instanceGroups: [] };
    assert.throws(
      () => validateCluster(input),
      (err) => err instanceof NotFoundError && /^no InstanceGroup objects found/.test(err.message),
    );
  });

  /**
   * A metal cluster as src/cloud/metal's MetalCloudGroups lists it: each inventory host a member named
   * like its Node, with providerID `metal://<name>` unless the inventory gives another; its Nodes carry
   * no providerID (kops' nodeup sets one on AWS and Azure only, and no cloud controller runs on metal).
   */
  function metal(): Input {
    const hosts = (instanceGroup: string, names: [string, string?][]): CloudGroup => ({
      ...group(instanceGroup, []),
      minSize: names.length,
      maxSize: names.length,
      targetSize: names.length,
      members: names.map(([name, providerID]) => ({
        instanceId: name,
        providerID: providerID ?? `metal://${name}`,
        state: 'unknown',
        healthy: true,
      })),
    });
    const input = healthy();
    input.identifiesByNodeName = true;
    input.cloudGroups = [
      hosts('control-plane', [['cp-1']]),
      hosts('nodes', [['node-1'], ['node-2', 'metal://rack4-u12']]),
      hosts('bastions', [['bastion-1']]),
    ];
    const bare = (name: string, options: Partial<NodeInfo> & { controlPlane?: boolean } = {}) => {
      const { providerID: _none, ...info } = node(name, options);
      return info;
    };
    input.nodes = [bare('cp-1', { controlPlane: true }), bare('node-1'), bare('node-2')];
    input.pods = staticPods('cp-1');
    return input;
  }

  test('on a cloud that identifies nodes by name (metal), a member is the Node of its name without providerID', () => {
    // kops' metal GetCloudGroups (upup/pkg/fi/cloudup/metal/cloud.go) takes the Nodes themselves, by
    // name, as the group's instances; the inventory's members are named like their Nodes.
    const input = metal();
    const result = validateCluster(input);
    assert.deepEqual(result.failures, []);
    assert.deepEqual(
      result.nodes.map((n) => [n.name, n.role, n.status]),
      [
        ['cp-1', 'control-plane', 'True'],
        ['node-1', 'node', 'True'],
        ['node-2', 'node', 'True'],
      ],
    );
    // A member's Node that is not Ready fails as the member's, in its group, and is forgiven as one.
    input.nodes[2] = { ...(input.nodes[2] as NodeInfo), readyStatus: 'False' };
    const unready = validateCluster(input).failures;
    assert.deepEqual(
      unready.map((f) => [f.reason, f.name, f.instanceGroup?.metadata.name]),
      [['node-not-ready', 'node-2', 'nodes']],
    );
    assert.deepEqual(messages({ ...input, maxUnreadyNodes: 1 }), []);
    // The member whose host has no Node yet has not joined.
    input.nodes.pop();
    assert.deepEqual(messages(input), ['Machine/node-2: machine "node-2" has not yet joined cluster']);
  });

  test('by name only where the cloud identifies nodes by name, and only for a Node without providerID', () => {
    // Elsewhere (a GCE instance is named like its Node too) the providerID alone links them.
    const input = metal();
    assert.deepEqual(messages({ ...input, identifiesByNodeName: false }), [
      'Machine/cp-1: machine "cp-1" has not yet joined cluster',
      'Machine/node-1: machine "node-1" has not yet joined cluster',
      'Machine/node-2: machine "node-2" has not yet joined cluster',
    ]);
    // A Node that names another machine by providerID is that machine's, not the host's of its name.
    input.nodes[1] = { ...(input.nodes[1] as NodeInfo), providerID: 'metal://elsewhere' };
    assert.deepEqual(messages(input), ['Machine/node-1: machine "node-1" has not yet joined cluster']);
    // A Node with the member's own providerID is the member's, whatever its name.
    input.nodes[1] = { ...(input.nodes[1] as NodeInfo), name: 'renamed', providerID: 'metal://node-1' };
    assert.deepEqual(messages(input), []);
    assert.deepEqual(
      validateCluster(input).nodes.map((n) => [n.name, n.role]),
      [
        ['cp-1', 'control-plane'],
        ['renamed', 'node'],
        ['node-2', 'node'],
      ],
    );
  });

  test('a NotReady node of no cloud group (a detached instance, a machine joined outside any group) fails', () => {
    // kops lists and checks the node of every member of a group, detached ones included
    // (pkg/validation/validate_cluster.go validateNodes; Detached in pkg/cloudinstances/cloud_instance.go).
    const input = healthy();
    input.nodes.push(
      node('i-extra', { readyStatus: 'False', labels: { 'kops.k8s.io/instancegroup': 'nodes' } }),
      node('i-extra-ok'),
    );
    const result = validateCluster(input);
    assert.deepEqual(messages(input), ['Node/i-extra: node "i-extra" of role "node" is not ready']);
    assert.equal(result.failures[0]?.instanceGroup?.metadata.name, 'nodes');
    assert.deepEqual(
      result.nodes.map((n) => [n.name, n.role, n.status]),
      [
        ['i-cp', 'control-plane', 'True'],
        ['i-1', 'node', 'True'],
        ['i-2', 'node', 'True'],
        ['i-extra', 'node', 'False'],
        ['i-extra-ok', 'node', 'True'],
      ],
    );
  });

  test('every failure has a typed reason and the objects it concerns, whatever its message says', () => {
    const input = healthy();
    input.cloudGroups = [group('control-plane', ['i-cp']), group('nodes', ['i-1', 'i-2', 'i-3'], 4)];
    input.nodes[1] = node('i-1', { readyStatus: 'False' });
    input.pods = input.pods.filter((p) => p.labels['k8s-app'] !== 'kube-scheduler');
    input.pods.push(
      pod('dns', { priorityClassName: 'system-cluster-critical', phase: 'Pending' }),
      pod('agent', { priorityClassName: 'system-node-critical', phase: 'Unknown', nodeName: 'i-2' }),
      pod('cni', {
        priorityClassName: 'system-node-critical',
        notReadyContainers: ['a', 'b'],
        nodeName: 'i-2',
      }),
    );
    assert.deepEqual(
      validateCluster(input).failures.map((f) => ({
        reason: f.reason,
        name: f.name,
        instanceGroup: f.instanceGroup?.metadata.name,
        node: f.node,
        app: f.app,
        containers: f.notReadyContainers,
      })),
      [
        {
          reason: 'group-too-small',
          name: 'nodes',
          instanceGroup: 'nodes',
          node: undefined,
          app: undefined,
          containers: undefined,
        },
        {
          reason: 'node-not-ready',
          name: 'i-1',
          instanceGroup: 'nodes',
          node: 'i-1',
          app: undefined,
          containers: undefined,
        },
        {
          reason: 'machine-not-joined',
          name: 'i-3',
          instanceGroup: 'nodes',
          node: undefined,
          app: undefined,
          containers: undefined,
        },
        {
          reason: 'group-missing-from-cloud',
          name: 'bastions',
          instanceGroup: 'bastions',
          node: undefined,
          app: undefined,
          containers: undefined,
        },
        {
          reason: 'pod-pending',
          name: 'kube-system/dns',
          instanceGroup: undefined,
          node: undefined,
          app: undefined,
          containers: undefined,
        },
        {
          reason: 'pod-unknown-phase',
          name: 'kube-system/agent',
          instanceGroup: 'nodes',
          node: 'i-2',
          app: undefined,
          containers: undefined,
        },
        {
          reason: 'pod-not-ready',
          name: 'kube-system/cni',
          instanceGroup: 'nodes',
          node: 'i-2',
          app: undefined,
          containers: ['a', 'b'],
        },
        {
          reason: 'static-pod-missing',
          name: 'i-cp',
          instanceGroup: 'control-plane',
          node: 'i-cp',
          app: 'kube-scheduler',
          containers: undefined,
        },
      ],
    );
  });

  test('an instance the cloud reports terminated is not counted towards the target size', () => {
    // kops reads members only among instances in state pending, running, stopping or stopped
    // (upup/pkg/fi/cloudup/awsup/aws_cloud.go findInstances, buildCloudInstance).
    const input = healthy();
    const nodes = group('nodes', ['i-1', 'i-2']);
    nodes.members.push({
      instanceId: 'i-old',
      providerID: 'aws:///z/i-old',
      state: 'terminated',
      healthy: false,
    });
    nodes.targetSize = 3;
    input.cloudGroups = [group('control-plane', ['i-cp']), nodes, group('bastions', ['i-b'])];
    assert.deepEqual(messages(input), [
      'InstanceGroup/nodes: InstanceGroup "nodes" did not have enough nodes 2 vs 3',
    ]);
  });

  test("a node's zone comes from its zone label, else from its providerID", () => {
    const input = healthy();
    input.nodes[1] = node('i-1', { labels: {}, providerID: 'aws:///us-test-1a/i-0123456789abcdef0' });
    input.cloudGroups[1] = {
      ...group('nodes', ['i-1', 'i-2']),
      members: [
        {
          instanceId: 'i-0123456789abcdef0',
          providerID: 'aws:///us-test-1a/i-0123456789abcdef0',
          state: 'running',
          healthy: true,
        },
        { instanceId: 'i-2', providerID: 'aws:///z/i-2', state: 'running', healthy: true },
      ],
    };
    assert.deepEqual(
      validateCluster(input).nodes.map((n) => [n.name, n.zone]),
      [
        ['i-cp', 'z'],
        ['i-1', 'us-test-1a'],
        ['i-2', 'z'],
      ],
    );
  });

  test('an instance-group filter validates those groups only; an unknown name is an error', () => {
    const input = healthy();
    input.nodes[0] = node('i-cp', { controlPlane: true, readyStatus: 'False' });
    input.cloudGroups = [group('control-plane', ['i-cp']), group('nodes', ['i-1', 'i-2', 'i-3'])];
    assert.deepEqual(messages({ ...input, instanceGroupFilter: ['nodes'] }), [
      'Machine/i-3: machine "i-3" has not yet joined cluster',
    ]);
    assert.deepEqual(
      validateCluster({ ...input, instanceGroupFilter: ['nodes'] }).nodes.map((n) => n.name),
      ['i-1', 'i-2'],
    );
    assert.throws(
      () => validateCluster({ ...input, instanceGroupFilter: ['nodes', 'workers'] }),
      (err) =>
        err instanceof NotFoundError &&
        err.message === 'instance group "workers" not found; the cluster has: bastions, control-plane, nodes',
    );
  });
});

// The rules validateCluster is made of, exported so that the gauges' incremental validation
// (src/metrics/incremental-validation.ts) applies the same ones object by object.
describe("validation's rules, one object at a time", () => {
  const bare: NodeInfo = { name: 'n', labels: {}, readyStatus: 'True', networkUnavailable: false };
  const cpLabel = { 'node-role.kubernetes.io/control-plane': '' };

  test('members: bastions, warm pools and terminated instances are not expected to join', () => {
    const member = {
      instanceId: 'i-1',
      providerID: 'aws:///z/i-1',
      state: 'stopped' as const,
      healthy: true,
    };
    assert.equal(expectedToJoin(ig('nodes', 'Node'), member), true, 'a stopped member outside a warm pool');
    assert.equal(expectedToJoin(ig('bastions', 'Bastion'), member), false);
    assert.equal(expectedToJoin(ig('nodes', 'Node'), { ...member, warmPool: true }), false);
    assert.equal(expectedToJoin(ig('nodes', 'Node'), { ...member, state: 'terminated' }), false);
  });

  test('roles: listed for control-plane, apiserver and node; by label for a Node of no member', () => {
    assert.deepEqual(['control-plane', 'apiserver', 'node', 'bastion'].map(isListedRole), [
      true,
      true,
      true,
      false,
    ]);
    const groups = new Map([['api', ig('api', 'APIServer')]]);
    const labelled = { ...bare, labels: { 'kops.k8s.io/instancegroup': 'api' } };
    assert.deepEqual(groupAndRoleByLabels(labelled, groups), { ig: groups.get('api'), role: 'apiserver' });
    assert.deepEqual(groupAndRoleByLabels({ ...bare, labels: cpLabel }, groups), {
      ig: undefined,
      role: 'control-plane',
    });
    assert.deepEqual(
      groupAndRoleByLabels({ ...bare, labels: { 'kops.k8s.io/instancegroup': 'gone' } }, groups),
      {
        ig: undefined,
        role: 'node',
      },
    );
  });

  test('pods: a critical pod in trouble, the group its failure names, the component it stands for', () => {
    const critical = (phase: string, notReadyContainers: string[] = []): PodInfo => ({
      namespace: 'kube-system',
      name: 'p',
      nodeName: 'n',
      priorityClassName: 'system-node-critical',
      phase,
      labels: { 'k8s-app': 'kube-scheduler' },
      notReadyContainers,
    });
    assert.deepEqual(
      [
        critical('Pending'),
        critical('Unknown'),
        critical('Running', ['c']),
        critical('Running'),
        critical('Succeeded', ['c']),
      ].map(criticalPodTrouble),
      ['pod-pending', 'pod-unknown-phase', 'pod-not-ready', undefined, undefined],
    );
    assert.equal(criticalPodTrouble({ ...critical('Pending'), priorityClassName: 'high' }), undefined);
    assert.equal(podInstanceGroup(critical('Pending'), 'nodes'), 'nodes');
    assert.equal(
      podInstanceGroup({ ...critical('Pending'), priorityClassName: 'system-cluster-critical' }, 'nodes'),
      undefined,
    );
    assert.deepEqual(runningComponentOf(critical('Pending')), { node: 'n', app: 'kube-scheduler' });
    assert.equal(runningComponentOf({ ...critical('Running'), namespace: 'default' }), undefined);
  });

  test('static pods: a ready control-plane node lacks the components not found on it', () => {
    const cp = { ...bare, labels: cpLabel };
    assert.deepEqual(missingControlPlaneApps(cp, true, new Set(['kube-scheduler'])), [
      'kube-apiserver',
      'kube-controller-manager',
    ]);
    assert.deepEqual(missingControlPlaneApps(cp, false, undefined), [], 'a node not ready is judged as such');
    assert.deepEqual(missingControlPlaneApps(bare, true, undefined), [], 'a worker runs none');
  });
});
