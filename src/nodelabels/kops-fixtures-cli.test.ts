/**
 * `kops-controller labels` against kops' own integration fixtures (testdata/, copied from
 * kubernetes/kops @ 268927e26409f861634e18f3632c9dd483c350cf): for every group, the labels kops
 * writes as `k8s.io/cluster-autoscaler/node-template/label/*` tags in the fixture's kubernetes.tf,
 * plus `kops.k8s.io/instancegroup`.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { parseKopsObjects } from '../statestore/kops-types.ts';

const root = new URL('../..', import.meta.url);
const dir = await mkdtemp(join(tmpdir(), 'kc-labels-kops-'));
after(() => rm(dir, { recursive: true, force: true }));

/** `labels -o json` for one group of a fixture, with `KOPS_FEATURE_FLAGS` as given. */
async function labelsOf(fixture: string, group: string, featureFlags = ''): Promise<Record<string, string>> {
  const text = await readFile(new URL(`./testdata/kops-${fixture}.yaml`, import.meta.url), 'utf8');
  const documents = text.split(/^---$/m);
  const cluster = documents.find((d) => /^kind: Cluster$/m.test(d)) as string;
  const ig = documents.find(
    (d) => new RegExp(`^  name: ${group}$`, 'm').test(d) && /kind: InstanceGroup/.test(d),
  );
  assert.ok(ig, `group ${group} in ${fixture}`);
  assert.equal(parseKopsObjects(ig).instanceGroups.length, 1);
  const clusterFile = join(dir, `${fixture}-cluster.yaml`);
  const igFile = join(dir, `${fixture}-${group}.yaml`);
  await writeFile(clusterFile, cluster);
  await writeFile(igFile, ig);
  const run = spawnSync(
    process.execPath,
    ['src/cli/main.ts', 'labels', '--cluster', clusterFile, '--instance-group', igFile, '-o', 'json'],
    { encoding: 'utf8', cwd: root, env: { ...process.env, KOPS_FEATURE_FLAGS: featureFlags } },
  );
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout) as Record<string, string>;
}

test('update_cluster/nvidia: the g4dn.xlarge Node group gets kops.k8s.io/gpu=1 (kubernetes.tf)', async () => {
  assert.deepEqual(await labelsOf('nvidia', 'nodes'), {
    'kops.k8s.io/gpu': '1',
    'kops.k8s.io/instancegroup': 'nodes',
    'node-role.kubernetes.io/node': '',
  });
  assert.equal((await labelsOf('nvidia', 'master-us-test-1a'))['kops.k8s.io/gpu'], undefined);
});

test('update_cluster/apiservernodes: the APIServer group gets the api-server role and nothing else', async () => {
  assert.deepEqual(await labelsOf('apiservernodes', 'apiserver', '+APIServerNodes'), {
    'kops.k8s.io/instancegroup': 'apiserver',
    'node-role.kubernetes.io/api-server': '',
  });
});

test('update_cluster/apiservernodes: with +APIServerNodes the control plane also gets api-server', async () => {
  assert.deepEqual(await labelsOf('apiservernodes', 'master-us-test-1a', '+APIServerNodes'), {
    'kops.k8s.io/instancegroup': 'master-us-test-1a',
    'kops.k8s.io/kops-controller-pki': '',
    'node-role.kubernetes.io/api-server': '',
    'node-role.kubernetes.io/control-plane': '',
    'node.kubernetes.io/exclude-from-external-load-balancers': '',
  });
});
