import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { fixturePath } from './fixtures.ts';
import { parseCluster, parseInstanceGroup, parseKopsObjects } from './kops-types.ts';

const ig = (spec: string, extra = '') =>
  `apiVersion: kops.k8s.io/v1alpha2\nkind: InstanceGroup\nmetadata:\n  name: nodes\n${extra}spec:\n${spec}`;

function invalid(pattern: RegExp) {
  return (err: unknown) => err instanceof InvalidInputError && pattern.test(err.message);
}

describe('kops v1alpha2 parsing', () => {
  test('reads the AWS fixture cluster, normalising masterKubelet to controlPlaneKubelet', async () => {
    const cluster = parseCluster(await readFile(fixturePath('aws', 'cluster.yaml'), 'utf8'));
    assert.equal(cluster.metadata.name, 'minimal.example.com');
    assert.equal(cluster.spec.cloudProvider, 'aws');
    assert.equal(cluster.spec.configBase, 's3://kops-state-example/minimal.example.com');
    assert.equal(cluster.spec.kubernetesVersion, 'v1.33.0');
    assert.deepEqual(cluster.spec.kubelet?.nodeLabels, { 'example.com/fleet': 'general' });
    assert.deepEqual(cluster.spec.controlPlaneKubelet?.nodeLabels, { 'example.com/fleet': 'control-plane' });
    assert.deepEqual(cluster.spec.cloudLabels, { team: 'platform', 'cost-center': '4711' });
    assert.deepEqual(
      cluster.spec.subnets?.map((s) => [s.name, s.zone]),
      [
        ['us-test-1a', 'us-test-1a'],
        ['us-test-1b', 'us-test-1b'],
      ],
    );
    // Fields this controller does not read are kept as they are.
    assert.deepEqual((cluster.spec as Record<string, unknown>)['topology'], { dns: { type: 'Public' } });
  });

  test('reads role Master as ControlPlane and type-checks the known IG fields', async () => {
    const cp = parseInstanceGroup(
      await readFile(fixturePath('aws', 'instancegroup', 'control-plane-us-test-1a.yaml'), 'utf8'),
    );
    assert.equal(cp.spec.role, 'ControlPlane');
    assert.equal(cp.metadata.labels?.['kops.k8s.io/cluster'], 'minimal.example.com');
    const hm = parseInstanceGroup(
      await readFile(fixturePath('aws', 'instancegroup', 'high-memory-us-test-1b.yaml'), 'utf8'),
    );
    assert.equal(hm.spec.role, 'Node');
    assert.equal(hm.spec.minSize, 0);
    assert.equal(hm.spec.maxSize, 5);
    assert.equal(hm.spec.manager, 'CloudGroup');
    assert.deepEqual(hm.spec.taints, ['dedicated=analytics:NoSchedule']);
    assert.deepEqual(hm.spec.kubelet?.taints, ['example.com/maintenance=planned:PreferNoSchedule']);
    assert.equal(hm.spec.kubelet?.['maxPods'], 58);
    assert.deepEqual(hm.spec.subnets, ['us-test-1b']);
    assert.equal(hm.spec.machineType, 'r6i.2xlarge');
  });

  test('reads the GCE fixtures', async () => {
    const cluster = parseCluster(await readFile(fixturePath('gce', 'cluster.yaml'), 'utf8'));
    assert.equal(cluster.spec.cloudProvider, 'gce');
    const nodes = parseInstanceGroup(
      await readFile(fixturePath('gce', 'instancegroup', 'nodes-us-test1-a.yaml'), 'utf8'),
    );
    assert.deepEqual(nodes.spec.zones, ['us-test1-a']);
  });

  test('parses a multi-document in-v1alpha2.yaml, as in kops integration tests', () => {
    const text = [
      'apiVersion: kops.k8s.io/v1alpha2\nkind: Cluster\nmetadata:\n  creationTimestamp: null\n  name: c.example.com\nspec:\n  cloudProvider: aws\n',
      ig('  role: Master\n  minSize: 1\n  maxSize: 1\n'),
      ig('  role: Node\n'),
      '',
    ].join('\n---\n');
    const objects = parseKopsObjects(text, 'in-v1alpha2.yaml');
    assert.equal(objects.clusters.length, 1);
    assert.deepEqual(
      objects.instanceGroups.map((g) => g.spec.role),
      ['ControlPlane', 'Node'],
    );
  });

  test('accepts the v1alpha3 spellings', () => {
    const cluster = parseCluster(
      'apiVersion: kops.k8s.io/v1alpha3\nkind: Cluster\nmetadata:\n  name: c\nspec:\n' +
        '  cloudProvider:\n    gce:\n      project: p\n  controlPlaneKubelet:\n    nodeLabels:\n      a: b\n' +
        '  networking:\n    subnets:\n    - name: s1\n      region: r1\n',
    );
    assert.equal(cluster.spec.cloudProvider, 'gce');
    assert.deepEqual(cluster.spec.controlPlaneKubelet?.nodeLabels, { a: 'b' });
    assert.deepEqual(
      cluster.spec.subnets?.map((s) => s.name),
      ['s1'],
    );
    assert.equal(
      parseInstanceGroup(ig('  role: ControlPlane\n').replace('v1alpha2', 'v1alpha3')).spec.role,
      'ControlPlane',
    );
  });

  test('errors name the source, the field path and the fix', () => {
    assert.throws(
      () => parseInstanceGroup(ig('  role: Worker\n'), 'instancegroup/nodes'),
      invalid(
        /^instancegroup\/nodes: spec\.role: unknown role "Worker": use one of Master \(or ControlPlane\), APIServer, Node, Bastion$/,
      ),
    );
    assert.throws(
      () => parseInstanceGroup(ig('  role: Node\n  minSize: two\n')),
      invalid(/spec\.minSize: expected number, received string/),
    );
    assert.throws(
      () => parseInstanceGroup(ig('  role: Node\n  minSize: 3\n  maxSize: 1\n')),
      invalid(/spec\.maxSize: must be at least minSize \(3\)/),
    );
    assert.throws(
      () => parseInstanceGroup(ig('  role: Node\n  nodeLabels:\n    gpu: 1\n')),
      invalid(/spec\.nodeLabels\.gpu: expected string, received number/),
    );
    assert.throws(
      () => parseInstanceGroup(ig('  role: Node\n  nodeLabels:\n    bad key: x\n')),
      invalid(/spec\.nodeLabels\.bad key: label key "bad key"/),
    );
    assert.throws(
      () => parseInstanceGroup(ig('  role: Node\n  kubelet:\n    nodeLabels:\n      a: "not/valid"\n')),
      invalid(/spec\.kubelet\.nodeLabels\.a: label value "not\/valid"/),
    );
    assert.throws(
      () => parseInstanceGroup(ig('  role: Node\n  manager: Terraform\n')),
      invalid(/spec\.manager/),
    );
    assert.throws(() => parseInstanceGroup(ig('  minSize: 1\n')), invalid(/spec\.role/));
    assert.throws(
      () => parseInstanceGroup(ig('  role: Node\n').replace('name: nodes', 'name: ""')),
      invalid(/metadata\.name: must not be empty/),
    );
  });

  test('empty fields read as unset, as kops reads them', () => {
    const group = parseInstanceGroup(
      ig('  role: Node\n  nodeLabels:\n  taints:\n  kubelet: ~\n', '  creationTimestamp: null\n'),
    );
    assert.equal(group.spec.nodeLabels, undefined);
    assert.equal(group.spec.kubelet, undefined);
    assert.equal(group.metadata.creationTimestamp, undefined);
  });

  test('unknown fields are allowed, wrong kinds and versions are not', () => {
    assert.equal(parseInstanceGroup(ig('  role: Node\n  someFutureField: {x: 1}\n')).spec.role, 'Node');
    assert.throws(
      () => parseInstanceGroup(ig('  role: Node\n').replace('v1alpha2', 'v1')),
      invalid(/apiVersion/),
    );
    assert.throws(
      () => parseKopsObjects('apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n'),
      invalid(/kind "ConfigMap" \(apiVersion "v1"\) is not a kops Cluster or InstanceGroup/),
    );
    assert.throws(() => parseCluster(ig('  role: Node\n')), invalid(/expected exactly one Cluster, found 0/));
    assert.throws(() => parseKopsObjects('- a\n- b\n'), invalid(/expected a kops object/));
  });

  test('YAML syntax errors give a line and column; duplicate keys are refused', () => {
    assert.throws(
      () => parseInstanceGroup('kind: InstanceGroup\nspec: [a\n', 'f.yaml'),
      invalid(/^f\.yaml: line \d+, column \d+/),
    );
    assert.throws(() => parseInstanceGroup(ig('  role: Node\n  role: Master\n')), InvalidInputError);
  });

  test('collections nested thousands deep are invalid input naming the file, not a stack overflow', () => {
    // The fuzzing campaign's shape (tmp/fuzz-s11): a line of block sequences under a sequence's
    // mapping overflows the yaml library's parser, which throws instead of reporting.
    const deep = `kind: InstanceGroup\nspec:\n  - name: a\n    role: Node\n${'- '.repeat(3_000)}x\n    other: 1\n`;
    assert.throws(
      () => parseInstanceGroup(deep, 'deep.yaml'),
      invalid(/^deep\.yaml: collections nested too deeply/),
    );
  });

  test('an alias bomb or an unresolved alias is invalid input naming the file, not an internal error', () => {
    // Eleven levels of ten aliases each: 10^11 nodes if expanded; the YAML library refuses to expand
    // it (its alias-count guard throws a ReferenceError of its own).
    const levels = ['a0: &a0 [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 1; i < 12; i++)
      levels.push(
        `a${i}: &a${i} [${Array(10)
          .fill(`*a${i - 1}`)
          .join(', ')}]`,
      );
    const bomb = ig(`  role: Node\n  x:\n${levels.map((line) => `    ${line}`).join('\n')}\n`);
    assert.throws(() => parseInstanceGroup(bomb, 'bomb-ig.yaml'), invalid(/^bomb-ig\.yaml: .*alias/i));
    assert.throws(
      () => parseKopsObjects(`${ig('  role: Node\n')}---\n${bomb}`, 'two.yaml'),
      invalid(/^two\.yaml \(document 2\): .*alias/i),
    );
    assert.throws(
      () => parseInstanceGroup(ig('  role: Node\n  x: *nowhere\n'), 'f.yaml'),
      invalid(/^f\.yaml: .*alias/i),
    );
  });
});
