import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, test } from 'node:test';
import { fixturePath } from '../statestore/fixtures.ts';
import {
  type Cluster,
  type InstanceGroup,
  parseCluster,
  parseInstanceGroup,
  parseKopsObjects,
} from '../statestore/kops-types.ts';
import {
  buildNodeLabels,
  explainNodeLabels,
  isGpuInstanceGroup,
  labelFeaturesOf,
} from './build-node-labels.ts';

const kopsCluster = parseCluster(`apiVersion: kops.k8s.io/v1alpha2
kind: Cluster
metadata:
  name: c.example.com
spec:
  kubernetesVersion: v1.32.0
  masterKubelet:
    nodeLabels:
      controlPlane1: controlPlane1
      controlPlane2: controlPlane2
  kubelet:
    nodeLabels:
      node1: node1
      node2: node2
`);

function group(name: string, role: string, extra = ''): InstanceGroup {
  return parseInstanceGroup(`apiVersion: kops.k8s.io/v1alpha2
kind: InstanceGroup
metadata:
  name: ${name}
spec:
  role: ${role}
  kubelet:
    nodeLabels:
      node1: override1
      node3: override3
${extra}`);
}

const cases: { name: string; cluster: Cluster; ig: InstanceGroup; expected: Record<string, string> }[] = [
  {
    // kops builder_test.go "RoleControlPlane": control-plane kubelet labels, not the node ones.
    name: 'Master: controlPlaneKubelet merged with the IG kubelet, plus the mandatory control-plane set',
    cluster: kopsCluster,
    ig: group('cp', 'Master'),
    expected: {
      'node-role.kubernetes.io/control-plane': '',
      'node.kubernetes.io/exclude-from-external-load-balancers': '',
      'kops.k8s.io/kops-controller-pki': '',
      'kops.k8s.io/instancegroup': 'cp',
      controlPlane1: 'controlPlane1',
      controlPlane2: 'controlPlane2',
      node1: 'override1',
      node3: 'override3',
    },
  },
  {
    name: 'ControlPlane (the v1alpha3 spelling) is the same role',
    cluster: kopsCluster,
    ig: group('cp', 'ControlPlane'),
    expected: {
      'node-role.kubernetes.io/control-plane': '',
      'node.kubernetes.io/exclude-from-external-load-balancers': '',
      'kops.k8s.io/kops-controller-pki': '',
      'kops.k8s.io/instancegroup': 'cp',
      controlPlane1: 'controlPlane1',
      controlPlane2: 'controlPlane2',
      node1: 'override1',
      node3: 'override3',
    },
  },
  {
    // kops builder_test.go "RoleNode".
    name: 'Node: cluster kubelet merged key by key with the IG kubelet, plus the node role',
    cluster: kopsCluster,
    ig: group('nodes', 'Node'),
    expected: {
      'node-role.kubernetes.io/node': '',
      'kops.k8s.io/instancegroup': 'nodes',
      node1: 'override1',
      node2: 'node2',
      node3: 'override3',
    },
  },
  {
    // kops builder_test.go "RoleControlPlaneWithAPIServerNodes" (an APIServer group): no kops-controller-pki.
    name: 'APIServer: node kubelet labels and the api-server role, nothing else',
    cluster: kopsCluster,
    ig: group('apiserver', 'APIServer'),
    expected: {
      'node-role.kubernetes.io/api-server': '',
      'kops.k8s.io/instancegroup': 'apiserver',
      node1: 'override1',
      node2: 'node2',
      node3: 'override3',
    },
  },
  {
    name: 'Bastion: no role labels, only kubelet labels and the instance group',
    cluster: kopsCluster,
    ig: group('bastions', 'Bastion'),
    expected: {
      'kops.k8s.io/instancegroup': 'bastions',
      node1: 'override1',
      node2: 'node2',
      node3: 'override3',
    },
  },
  {
    name: 'spec.nodeLabels comes last and overrides kubelet labels, role labels and the instance group',
    cluster: kopsCluster,
    ig: group(
      'nodes',
      'Node',
      '  nodeLabels:\n    node1: from-spec\n    node-role.kubernetes.io/node: custom\n    kops.k8s.io/instancegroup: nodes-us-test-1a\n',
    ),
    expected: {
      'node-role.kubernetes.io/node': 'custom',
      'kops.k8s.io/instancegroup': 'nodes-us-test-1a',
      node1: 'from-spec',
      node2: 'node2',
      node3: 'override3',
    },
  },
  {
    name: 'a control-plane IG cannot drop a mandatory label through kubelet nodeLabels',
    cluster: kopsCluster,
    ig: parseInstanceGroup(
      'apiVersion: kops.k8s.io/v1alpha2\nkind: InstanceGroup\nmetadata:\n  name: cp\nspec:\n  role: Master\n' +
        '  kubelet:\n    nodeLabels:\n      node-role.kubernetes.io/control-plane: "no"\n',
    ),
    expected: {
      'node-role.kubernetes.io/control-plane': '',
      'node.kubernetes.io/exclude-from-external-load-balancers': '',
      'kops.k8s.io/kops-controller-pki': '',
      'kops.k8s.io/instancegroup': 'cp',
      controlPlane1: 'controlPlane1',
      controlPlane2: 'controlPlane2',
    },
  },
  {
    name: 'no kubelet settings anywhere: just the role and the instance group',
    cluster: parseCluster(
      'apiVersion: kops.k8s.io/v1alpha2\nkind: Cluster\nmetadata:\n  name: c\nspec: {}\n',
    ),
    ig: parseInstanceGroup(
      'apiVersion: kops.k8s.io/v1alpha2\nkind: InstanceGroup\nmetadata:\n  name: n\nspec:\n  role: Node\n',
    ),
    expected: { 'node-role.kubernetes.io/node': '', 'kops.k8s.io/instancegroup': 'n' },
  },
];

describe('buildNodeLabels', () => {
  for (const c of cases) {
    test(c.name, () => {
      assert.deepEqual(buildNodeLabels(c.cluster, c.ig), c.expected);
    });
  }

  test('does not modify its inputs', () => {
    const ig = group('nodes', 'Node', '  nodeLabels:\n    a: b\n');
    const before = structuredClone({ cluster: kopsCluster, ig });
    buildNodeLabels(kopsCluster, ig);
    assert.deepEqual({ cluster: kopsCluster, ig }, before);
  });

  test('the sample AWS cluster: every IG gets its labels', async () => {
    const read = (p: string) => readFile(fixturePath('aws', p), 'utf8');
    const cluster = parseCluster(await read('cluster.yaml'));
    const hm = parseInstanceGroup(await read('instancegroup/high-memory-us-test-1b.yaml'));
    assert.deepEqual(buildNodeLabels(cluster, hm), {
      'example.com/fleet': 'memory',
      'example.com/storage': 'ebs',
      'example.com/workload': 'analytics',
      'kops.k8s.io/instancegroup': 'high-memory-us-test-1b',
      'node-role.kubernetes.io/node': '',
    });
    const cp = parseInstanceGroup(await read('instancegroup/control-plane-us-test-1a.yaml'));
    assert.equal(buildNodeLabels(cluster, cp)['example.com/fleet'], 'control-plane');
  });

  test('the sample GCE cluster: arbitrary nodeLabels apply on GCE too (unlike kops)', async () => {
    const read = (p: string) => readFile(fixturePath('gce', p), 'utf8');
    const labels = buildNodeLabels(
      parseCluster(await read('cluster.yaml')),
      parseInstanceGroup(await read('instancegroup/nodes-us-test1-a.yaml')),
    );
    assert.equal(
      labels['example.com/long-label-value-that-gce-cloud-labels-cannot-carry'],
      'this.value_is-fine-for-kubernetes',
    );
    assert.equal(labels['cloud.google.com/metadata-proxy-ready'], 'true');
  });
});

describe('explainNodeLabels', () => {
  test('names the layer that decided each label, sorted by key', () => {
    const ig = group('nodes', 'Node', '  nodeLabels:\n    node1: from-spec\n');
    assert.deepEqual(explainNodeLabels(kopsCluster, ig), [
      { key: 'kops.k8s.io/instancegroup', value: 'nodes', source: 'instance group name' },
      { key: 'node-role.kubernetes.io/node', value: '', source: 'role' },
      { key: 'node1', value: 'from-spec', source: 'instance group nodeLabels' },
      { key: 'node2', value: 'node2', source: 'cluster kubelet' },
      { key: 'node3', value: 'override3', source: 'instance group kubelet' },
    ]);
  });
});

describe("cloudLabels kops' identifiers read back from the instance's tags", () => {
  const cluster = (cloud: string, cloudLabels: string) =>
    parseCluster(`apiVersion: kops.k8s.io/v1alpha2
kind: Cluster
metadata:
  name: c.example.com
spec:
  cloudProvider: ${cloud}
  cloudLabels:
${cloudLabels}`);
  const template = 'k8s.io/cluster-autoscaler/node-template/label/';

  test('AWS and OpenStack: the node-template prefix, the group winning over the cluster, nodeLabels over both', () => {
    for (const cloud of ['aws', 'openstack']) {
      const c = cluster(cloud, `    ${template}team: cluster\n    ${template}tier: gold\n    Owner: me\n`);
      const ig = group(
        'nodes',
        'Node',
        `  cloudLabels:\n    ${template}team: group\n    ${template}zone: a\n  nodeLabels:\n    zone: spec\n`,
      );
      const explained = explainNodeLabels(c, ig).filter((l) =>
        ['team', 'tier', 'zone', 'Owner'].includes(l.key),
      );
      assert.deepEqual(explained, [
        { key: 'team', value: 'group', source: 'cloud labels' },
        { key: 'tier', value: 'gold', source: 'cloud labels' },
        { key: 'zone', value: 'spec', source: 'instance group nodeLabels' },
      ]);
    }
  });

  test('Hetzner and Linode read their own tag forms; a tag that is no valid label is left out', () => {
    const hetzner = cluster(
      'hetzner',
      '    node-label.kops.k8s.io.pool: fast\n    node-label.kops.k8s.io.bad: "a b"\n',
    );
    assert.equal(buildNodeLabels(hetzner, group('n', 'Node'))['pool'], 'fast');
    assert.equal(buildNodeLabels(hetzner, group('n', 'Node'))['bad'], undefined);
    const linode = cluster('linode', '    kops.k8s.io/pool: fast\n    other/pool: x\n');
    assert.equal(buildNodeLabels(linode, group('n', 'Node'))['kops.k8s.io/pool'], 'fast');
    assert.equal(buildNodeLabels(linode, group('n', 'Node'))['other/pool'], undefined);
  });

  test("Azure: the cluster's name, as kops' Azure identifier reads it from the cluster tag", () => {
    const azure = cluster('azure', `    ${template}team: x\n`);
    const labels = buildNodeLabels(azure, group('n', 'Node'));
    assert.equal(labels['kops.k8s.io/cluster'], 'c.example.com');
    assert.equal(labels['team'], undefined);
  });

  test('GCE and the other clouds: cloudLabels give no labels (their identifiers read none from tags)', () => {
    for (const cloud of ['gce', 'digitalocean', 'scaleway']) {
      const labels = buildNodeLabels(cluster(cloud, `    ${template}team: x\n`), group('n', 'Node'));
      assert.equal(labels['team'], undefined, cloud);
      assert.equal(labels['kops.k8s.io/cluster'], undefined, cloud);
    }
  });
});

/** A kops integration fixture (src/nodelabels/testdata, copied with its path and commit in its header). */
async function kopsFixture(name: string): Promise<{ cluster: Cluster; groups: Map<string, InstanceGroup> }> {
  const text = await readFile(new URL(`./testdata/kops-${name}.yaml`, import.meta.url), 'utf8');
  const objects = parseKopsObjects(text, name);
  return {
    cluster: objects.clusters[0] as Cluster,
    groups: new Map(objects.instanceGroups.map((ig) => [ig.metadata.name, ig])),
  };
}

/** The labels of every group of a fixture, by group name. */
function labelsByGroup(
  fixture: { cluster: Cluster; groups: Map<string, InstanceGroup> },
  features = {},
): Record<string, Record<string, string>> {
  return Object.fromEntries(
    [...fixture.groups].map(([name, ig]) => [name, buildNodeLabels(fixture.cluster, ig, features)]),
  );
}

describe("label parity with kops' own fixtures (kubernetes/kops @ 268927e26409f861634e18f3632c9dd483c350cf)", () => {
  test('update_cluster/apiservernodes (run with +APIServerNodes): the node-template labels of kubernetes.tf', async () => {
    // kubernetes.tf: apiserver → api-server; master-us-test-1a → api-server, control-plane,
    // kops-controller-pki, exclude-from-external-load-balancers; nodes → node. Plus the instance group.
    assert.deepEqual(labelsByGroup(await kopsFixture('apiservernodes'), labelFeaturesOf('+APIServerNodes')), {
      apiserver: { 'node-role.kubernetes.io/api-server': '', 'kops.k8s.io/instancegroup': 'apiserver' },
      'master-us-test-1a': {
        'kops.k8s.io/kops-controller-pki': '',
        'node-role.kubernetes.io/api-server': '',
        'node-role.kubernetes.io/control-plane': '',
        'node.kubernetes.io/exclude-from-external-load-balancers': '',
        'kops.k8s.io/instancegroup': 'master-us-test-1a',
      },
      nodes: { 'node-role.kubernetes.io/node': '', 'kops.k8s.io/instancegroup': 'nodes' },
    });
  });

  test('without the flag the control plane has no api-server label; APIServer groups still do', async () => {
    const labels = labelsByGroup(await kopsFixture('apiservernodes'));
    assert.equal(labels['master-us-test-1a']?.['node-role.kubernetes.io/api-server'], undefined);
    assert.equal(labels['apiserver']?.['node-role.kubernetes.io/api-server'], '');
  });

  test('update_cluster/nvidia: the g4dn group gets kops.k8s.io/gpu=1, the m3 control plane does not', async () => {
    // kubernetes.tf: nodes → kops.k8s.io/gpu=1, node; master-us-test-1a → the control-plane set.
    assert.deepEqual(labelsByGroup(await kopsFixture('nvidia')), {
      nodes: {
        'kops.k8s.io/gpu': '1',
        'node-role.kubernetes.io/node': '',
        'kops.k8s.io/instancegroup': 'nodes',
      },
      'master-us-test-1a': {
        'kops.k8s.io/kops-controller-pki': '',
        'node-role.kubernetes.io/control-plane': '',
        'node.kubernetes.io/exclude-from-external-load-balancers': '',
        'kops.k8s.io/instancegroup': 'master-us-test-1a',
      },
    });
  });
});

describe('GPU and gVisor groups (populate_instancegroup_spec.go)', () => {
  const cluster = (extra: string) =>
    parseCluster(`apiVersion: kops.k8s.io/v1alpha2\nkind: Cluster\nmetadata:\n  name: c\nspec:\n${extra}`);
  const ig = (extra: string) =>
    parseInstanceGroup(
      `apiVersion: kops.k8s.io/v1alpha2\nkind: InstanceGroup\nmetadata:\n  name: g\nspec:\n  role: Node\n${extra}`,
    );
  const nvidia = '  containerd:\n    nvidiaGPU:\n      enabled: true\n';

  test('AWS: NVIDIA on (cluster or group) and a GPU machine type; either alone is not a GPU group', () => {
    const aws = cluster('  cloudProvider: aws\n');
    assert.equal(isGpuInstanceGroup(aws, ig(`  machineType: p4d.24xlarge\n${nvidia}`)), true);
    assert.equal(
      isGpuInstanceGroup(cluster(`  cloudProvider: aws\n${nvidia}`), ig('  machineType: g5g.xlarge\n')),
      true,
    );
    assert.equal(isGpuInstanceGroup(aws, ig('  machineType: g4dn.xlarge\n')), false);
    assert.equal(isGpuInstanceGroup(aws, ig(`  machineType: m5.large\n${nvidia}`)), false);
  });

  test('OpenStack: the group enabling NVIDIA is enough; other clouds never', () => {
    assert.equal(isGpuInstanceGroup(cluster('  cloudProvider: openstack\n'), ig(nvidia)), true);
    assert.equal(
      isGpuInstanceGroup(
        cluster(`  cloudProvider: gce\n${nvidia}`),
        ig(`  machineType: a2-highgpu-1g\n${nvidia}`),
      ),
      false,
    );
  });

  test('the GPU label overrides a nodeLabels value; gVisor Node groups get kops.k8s.io/gvisor=1', () => {
    const labels = explainNodeLabels(
      cluster('  cloudProvider: openstack\n'),
      ig(`${nvidia}    gvisor:\n      enabled: true\n  nodeLabels:\n    kops.k8s.io/gpu: "0"\n`),
    );
    assert.deepEqual(
      labels.filter((l) => l.key.startsWith('kops.k8s.io/g')),
      [
        { key: 'kops.k8s.io/gpu', value: '1', source: 'GPU instance group' },
        { key: 'kops.k8s.io/gvisor', value: '1', source: 'gVisor instance group' },
      ],
    );
  });
});

test('KOPS_FEATURE_FLAGS is read as kops reads it: +/- prefixes, the last mention wins', () => {
  assert.deepEqual(labelFeaturesOf(undefined), { apiServerNodes: false });
  assert.deepEqual(labelFeaturesOf('APIServerNodes'), { apiServerNodes: true });
  assert.deepEqual(labelFeaturesOf('+Foo, +APIServerNodes'), { apiServerNodes: true });
  assert.deepEqual(labelFeaturesOf('+APIServerNodes,-APIServerNodes'), { apiServerNodes: false });
});
