import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { CloudGroup, InstanceState } from '../cloud/types.ts';
import { roleLabels } from '../nodelabels/build-node-labels.ts';
import { formatManagedLabels } from '../nodelabels/diff-labels.ts';
import { signManagedLabels } from '../nodelabels/signed-managed-labels.ts';
import { type Cluster, type InstanceGroup, parseCluster } from '../statestore/kops-types.ts';
import { isReady } from '../validation/validate-cluster.ts';
import {
  type InstanceGroupHealth,
  instanceGroupHealth,
  type LabelledNodeInfo,
} from './instance-group-health.ts';

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

const ig = (name: string, role: InstanceGroup['spec']['role'], spec: Partial<InstanceGroup['spec']> = {}) =>
  ({
    apiVersion: 'kops.k8s.io/v1alpha2',
    kind: 'InstanceGroup',
    metadata: { name },
    spec: { role, ...spec },
  }) as InstanceGroup;

/** The NodeController's signing key in these tests. */
const labelsKey = new Uint8Array(32).fill(7);

/** A node's managed set as the controller writes it: the keys, signed for the node's name and UID. */
const signedSet = (name: string, keys: string[]) => ({
  uid: `uid-${name}`,
  managedLabels: formatManagedLabels(keys),
  managedLabelsSignature: signManagedLabels(labelsKey, { name, uid: `uid-${name}` }, keys),
});

/** The labels the node controller would have applied to a node of `nodes` (a Node group). */
const labelledNodes = {
  'kops.k8s.io/instancegroup': 'nodes',
  [roleLabels.node]: '',
  team: 'infra',
  pool: 'a',
};

describe('instanceGroupHealth', () => {
  const groups = [
    ig('cp', 'ControlPlane'),
    ig('nodes', 'Node', { nodeLabels: { pool: 'a' } }),
    ig('bastions', 'Bastion'),
  ];
  const member = (id: string, state: InstanceState = 'running') => ({
    instanceId: id,
    providerID: `aws:///z/${id}`,
    state,
    healthy: true,
  });
  const cloudGroup = (instanceGroup: string, targetSize: number, ids: string[]): CloudGroup => ({
    instanceGroup,
    cloudName: instanceGroup,
    minSize: targetSize,
    maxSize: targetSize,
    targetSize,
    members: ids.map((id) => member(id)),
  });
  const node = (
    id: string,
    ready: boolean,
    labels: Record<string, string>,
    managed: string[] = [],
  ): LabelledNodeInfo => ({
    name: id,
    providerID: `aws:///z/${id}`,
    labels,
    readyStatus: ready ? ('True' as const) : ('False' as const),
    networkUnavailable: false,
    ...signedSet(id, managed),
  });

  test('ready, not ready and missing against the target size; drift against the spec’s labels', () => {
    const managed = Object.keys(labelledNodes);
    const nodes: LabelledNodeInfo[] = [
      node('c1', true, { [roleLabels.controlPlane]: '' }),
      node('n1', true, labelledNodes, managed),
      // Drifted: the spec's pool changed to `a`; the node still says `b`.
      node('n2', false, { ...labelledNodes, pool: 'b' }, managed),
      // A spot instance: the lifecycle label the cloud implies is managed but not drift.
      node('n3', true, { ...labelledNodes, 'node-role.kubernetes.io/spot-worker': 'true' }, [
        ...managed,
        'node-role.kubernetes.io/spot-worker',
      ]),
      // A label the spec no longer asks for, still managed: drift.
      node('n4', true, { ...labelledNodes, old: 'x' }, [...managed, 'old']),
      // Joined outside any cloud group; its label places it.
      { ...node('x1', true, labelledNodes, managed), providerID: 'aws:///z/x1' },
    ];
    const input = {
      instanceGroups: groups,
      cloudGroups: [
        cloudGroup('cp', 3, ['c1']),
        cloudGroup('nodes', 5, ['n1', 'n2', 'n3', 'n4', 'n5']),
        cloudGroup('bastions', 1, ['b1']),
      ],
      nodes,
      cluster,
      labelsKey,
    };
    assert.deepEqual(instanceGroupHealth(input), [
      // c1 lacks the control-plane labels the spec asks for.
      { instanceGroup: 'cp', ready: 1, notReady: 0, desired: 3, missing: 2, labelDrift: 1 },
      { instanceGroup: 'nodes', ready: 4, notReady: 1, desired: 5, missing: 0, labelDrift: 2 },
    ]);
  });

  test('drift prunes only from a managed set the controller signed for that node, as the controller does', () => {
    const managed = Object.keys(labelledNodes);
    // Each node carries a label `old` that the spec does not ask for.
    const labels = { ...labelledNodes, old: 'x' };
    const signed = node('n1', true, labels, [...managed, 'old']);
    const nodes: LabelledNodeInfo[] = [
      // Signed with `old`: the controller would remove it, so the node drifts.
      signed,
      // The kubelet added `old` to its own set (the signature no longer matches): no drift, the
      // controller would not remove it either.
      { ...node('n2', true, labels, managed), managedLabels: formatManagedLabels([...managed, 'old']) },
      // No signature at all.
      { ...node('n3', true, labels), managedLabels: formatManagedLabels([...managed, 'old']) },
      // n1's signed set copied onto n4: bound to n1's name and UID.
      { ...node('n4', true, labels), ...signedSet('n1', [...managed, 'old']) },
    ];
    const input = {
      instanceGroups: [ig('nodes', 'Node', { nodeLabels: { pool: 'a' } })],
      cloudGroups: [cloudGroup('nodes', 4, ['n1', 'n2', 'n3', 'n4'])],
      nodes,
      cluster,
    };
    assert.equal(instanceGroupHealth({ ...input, labelsKey })[0]?.labelDrift, 1, 'only n1');
    // Without the key no set is believed (the controller then prunes only kops' role labels).
    assert.equal(instanceGroupHealth(input)[0]?.labelDrift, 0);
    // Another key (a key Secret replaced): n1's signature no longer verifies.
    assert.equal(instanceGroupHealth({ ...input, labelsKey: new Uint8Array(32) })[0]?.labelDrift, 0);
  });

  test('no cloud group: the spec’s minSize is the desired size, else no desired or missing count', () => {
    const input = {
      instanceGroups: [ig('a', 'Node', { minSize: 2 }), ig('b', 'Node')],
      cloudGroups: [],
      nodes: [],
    };
    assert.deepEqual(instanceGroupHealth(input), [
      { instanceGroup: 'a', ready: 0, notReady: 0, desired: 2, missing: 2 },
      { instanceGroup: 'b', ready: 0, notReady: 0 },
    ]);
  });

  test('instances needing a rolling update: an older template, or a Node annotated kops.k8s.io/needs-update', () => {
    const withTemplates = (
      instanceGroup: string,
      template: string | undefined,
      members: [string, string?][],
    ) => ({
      ...cloudGroup(instanceGroup, members.length, []),
      ...(template ? { template } : {}),
      members: members.map(([id, memberTemplate]) => ({
        ...member(id),
        ...(memberTemplate ? { template: memberTemplate } : {}),
      })),
    });
    const input = {
      instanceGroups: groups,
      cloudGroups: [
        // n2 runs version 6 of the launch template, n3 names none (kops: out of date too); n4 is
        // current but its Node asks for an update; the terminated n5 is no member kops sees.
        withTemplates('nodes', 'lt-1:7', [['n1', 'lt-1:7'], ['n2', 'lt-1:6'], ['n3'], ['n4', 'lt-1:7']]),
        {
          ...withTemplates('nodes', 'lt-1:7', []),
          members: [{ ...member('n5', 'terminated'), template: 'lt-1:5' }],
        },
        // The control plane's group says nothing of what it launches from: no count at all.
        withTemplates('cp', undefined, [['c1', 'lt-2:1']]),
      ],
      nodes: [
        { ...node('n1', true, {}), needsUpdate: false },
        { ...node('n2', true, {}), needsUpdate: true },
        { ...node('n4', true, {}), needsUpdate: true },
      ],
    };
    const health = instanceGroupHealth(input);
    assert.equal(
      health.find((g) => g.instanceGroup === 'nodes')?.needingUpdate,
      3,
      'n2, n3 and n4, each once',
    );
    assert.equal(health.find((g) => g.instanceGroup === 'cp')?.needingUpdate, undefined);
  });

  test("a Node whose instance is terminated is no member of its old group: it goes by its label, as validation's", () => {
    const input = {
      instanceGroups: groups,
      cloudGroups: [
        { ...cloudGroup('cp', 1, []), members: [member('c1', 'terminated')] },
        cloudGroup('nodes', 1, ['n1']),
      ],
      nodes: [node('c1', true, labelledNodes), node('n1', true, labelledNodes)],
    };
    assert.deepEqual(
      instanceGroupHealth(input).map((g) => [g.instanceGroup, g.ready, g.missing]),
      [
        ['cp', 0, 1],
        ['nodes', 2, 0],
      ],
    );
  });

  test('random clusters: the counts match a straightforward count of the nodes', () => {
    let seed = 17;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
    const roles = ['ControlPlane', 'APIServer', 'Node', 'Bastion'] as const;
    const states: InstanceState[] = ['pending', 'running', 'stopped', 'terminated'];
    for (let round = 0; round < 300; round++) {
      const instanceGroups = Array.from({ length: 1 + Math.floor(random() * 4) }, (_, i) =>
        ig(`g${i}`, pick(roles), random() < 0.5 ? { minSize: Math.floor(random() * 4) } : {}),
      );
      const names = [...instanceGroups.map((g) => g.metadata.name), 'unknown'];
      const cloudGroups: CloudGroup[] = [];
      const nodes: LabelledNodeInfo[] = [];
      const trusted = new Map<LabelledNodeInfo, string[]>();
      let next = 0;
      for (const name of names) {
        if (random() < 0.25) continue;
        const ids = Array.from({ length: Math.floor(random() * 5) }, () => `i${next++}`);
        cloudGroups.push({
          ...cloudGroup(name, Math.floor(random() * 6), ids),
          members: ids.map((id) => member(id, pick(states))),
        });
      }
      const extra = Array.from({ length: Math.floor(random() * 3) }, () => `x${next++}`);
      for (const id of [...cloudGroups.flatMap((g) => g.members.map((m) => m.instanceId)), ...extra]) {
        if (random() < 0.3) continue;
        const labels: Record<string, string> = {};
        const label = pick([...names, undefined]);
        if (label) labels['kops.k8s.io/instancegroup'] = label;
        if (random() < 0.5) labels.team = pick(['infra', 'web']);
        if (random() < 0.5) labels[pick(Object.values(roleLabels))] = '';
        const managed = random() < 0.5 ? [...Object.keys(labels), 'old'] : [];
        if (random() < 0.5) labels['old'] = 'x';
        const record: LabelledNodeInfo = {
          ...node(id, random() < 0.6, labels, managed),
          networkUnavailable: random() < 0.1,
        };
        // A third of the sets are the node's own writing: an annotation without a good signature.
        const forged = random() < 0.33;
        if (forged) record.managedLabelsSignature = random() < 0.5 ? 'v1:AAAA' : undefined;
        else trusted.set(record, managed);
        nodes.push(record);
      }
      const input = { instanceGroups, cloudGroups, nodes, cluster, labelsKey };
      const actual = instanceGroupHealth(input);
      assert.deepEqual(actual, straightforwardCount(input, trusted), `round ${round}`);
    }
  });
});

/**
 * The same counts, the long way: every node is placed by the cloud group listing its instance (unless
 * terminated: kops sees no such member), else by its instance-group label; drift is any desired label
 * absent or different, or a role label or a label of the node's `trusted` managed set (the ones the test
 * signed) present that the spec does not ask for.
 */
function straightforwardCount(
  input: {
    instanceGroups: InstanceGroup[];
    cloudGroups: CloudGroup[];
    nodes: LabelledNodeInfo[];
    cluster: Cluster;
  },
  trusted: Map<LabelledNodeInfo, string[]>,
): InstanceGroupHealth[] {
  const out: InstanceGroupHealth[] = [];
  const sorted = [...input.instanceGroups].sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1));
  for (const group of sorted) {
    if (group.spec.role === 'Bastion') continue;
    const name = group.metadata.name;
    const desiredLabels: Record<string, string> = {
      team: 'infra',
      'kops.k8s.io/instancegroup': name,
      ...(group.spec.role === 'ControlPlane'
        ? {
            [roleLabels.controlPlane]: '',
            'kops.k8s.io/kops-controller-pki': '',
            'node.kubernetes.io/exclude-from-external-load-balancers': '',
          }
        : group.spec.role === 'APIServer'
          ? { [roleLabels.apiServer]: '' }
          : { [roleLabels.node]: '' }),
    };
    let ready = 0;
    let notReady = 0;
    let drift = 0;
    for (const node of input.nodes) {
      const cloud = input.cloudGroups.find((g) =>
        g.members.some((m) => m.providerID === node.providerID && m.state !== 'terminated'),
      );
      const of = cloud ? cloud.instanceGroup : node.labels['kops.k8s.io/instancegroup'];
      if (of !== name) continue;
      if (isReady(node)) ready++;
      else notReady++;
      const removable = new Set([...(trusted.get(node) ?? []), ...Object.values(roleLabels)]);
      const drifted =
        Object.entries(desiredLabels).some(([k, v]) => node.labels[k] !== v) ||
        Object.keys(node.labels).some((k) => removable.has(k) && !(k in desiredLabels));
      if (drifted) drift++;
    }
    const desired = input.cloudGroups.find((g) => g.instanceGroup === name)?.targetSize ?? group.spec.minSize;
    out.push({
      instanceGroup: name,
      ready,
      notReady,
      ...(desired !== undefined ? { desired, missing: Math.max(0, desired - ready - notReady) } : {}),
      labelDrift: drift,
    });
  }
  return out;
}
