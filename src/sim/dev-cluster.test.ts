import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { CoreV1Api } from '@kubernetes/client-node';
import { createAwsProvider } from '../cloud/aws/provider.ts';
import { loadConfigFile } from '../config/loader.ts';
import { buildNodeLabels } from '../nodelabels/build-node-labels.ts';
import { ClusterStore } from '../statestore/cluster-store.ts';
import { openVfs, vfsOptionsFromEnv } from '../statestore/open.ts';
import { toolPath } from '../testing/tools.ts';
import { startDevCluster } from './dev-cluster.ts';

const stateDir = await mkdtemp(join(tmpdir(), 'kc-dev-'));
const cluster = await startDevCluster({ stateDir, awsThrottling: true });
after(() => cluster.close());

describe('the simulated dev cluster', () => {
  test('registers a Ready node per running instance of every instance group', async () => {
    const core = cluster.api.server.kubeConfig().makeApiClient(CoreV1Api);
    const nodes = (await core.listNode()).items;
    const expected = [...cluster.nodesByGroup.values()].flat().sort();
    assert.deepEqual(nodes.map((n) => n.metadata?.name).sort(), expected);
    assert.deepEqual([...cluster.nodesByGroup.keys()].sort(), [
      'control-plane-us-test-1a',
      'high-memory-us-test-1b',
      'nodes-us-test-1a',
    ]);
    for (const node of nodes) {
      assert.match(node.spec?.providerID ?? '', /^aws:\/\/\/us-test-1[ab]\/i-[0-9a-f]{17}$/);
      assert.equal(node.status?.conditions?.find((c) => c.type === 'Ready')?.status, 'True');
    }
  });

  test('writes a valid controller config and an owner-only kubeconfig and env file', async () => {
    const config = await loadConfigFile(cluster.configPath);
    assert.equal(config.clusterName, 'minimal.example.com');
    assert.equal(config.configBase, cluster.configBase);
    assert.equal((await stat(join(stateDir, 'kubeconfig'))).mode & 0o777, 0o600);
    assert.equal((await stat(join(stateDir, 'env'))).mode & 0o777, 0o600);
    assert.match(await readFile(join(stateDir, 'env'), 'utf8'), /^export KUBECONFIG=.*kubeconfig$/m);
  });

  test('each node resolves through the AWS API to its group, whose definition the state store holds', async () => {
    const provider = await createAwsProvider({
      clusterName: cluster.clusterName,
      region: cluster.region,
      endpoint: cluster.env.AWS_ENDPOINT_URL,
      credentials: { ...cluster.aws.credentials },
    });
    const store = new ClusterStore(openVfs(cluster.configBase, vfsOptionsFromEnv(cluster.env)));
    const clusterSpec = await store.cluster();
    const core = cluster.api.server.kubeConfig().makeApiClient(CoreV1Api);
    const nodes = (await core.listNode()).items;
    const identities = await provider.nodeIdentifier.identify(nodes.map((n) => n.spec?.providerID ?? ''));
    for (const [group, names] of cluster.nodesByGroup) {
      for (const name of names) {
        const node = nodes.find((n) => n.metadata?.name === name);
        const result = identities.get(node?.spec?.providerID ?? '');
        assert.ok(result?.ok, `${name} identified`);
        assert.equal(result.identity.instanceGroup, group);
      }
      const labels = buildNodeLabels(clusterSpec, await store.instanceGroup(group));
      assert.equal(labels['kops.k8s.io/instancegroup'], group);
    }
    assert.equal(cluster.aws.calls.count('DescribeInstances'), 1, 'all nodes in one batched call');
  });

  test('kubectl describe node shows the Lease, system info and resource use, with no sentinel values', async () => {
    const node = cluster.nodesByGroup.get('control-plane-us-test-1a')?.[0] as string;
    const { stdout } = await promisify(execFile)(
      toolPath('kubectl'),
      ['--kubeconfig', join(stateDir, 'kubeconfig'), 'describe', 'node', node],
      { timeout: 30_000 },
    );
    // A percentage of a zero allocatable prints as the int64 minimum.
    assert.doesNotMatch(stdout, /-9223372036854775808/);
    assert.match(
      stdout,
      new RegExp(
        `^Lease:\\n  HolderIdentity:  ${node}\\n  AcquireTime:     <unset>\\n  RenewTime:       \\w{3}, `,
        'm',
      ),
    );
    for (const field of [
      'Machine ID',
      'System UUID',
      'Boot ID',
      'Kernel Version',
      'OS Image',
      'Operating System',
      'Architecture',
      'Container Runtime Version',
    ]) {
      assert.match(stdout, new RegExp(`^  ${field}: +\\S`, 'm'), `System Info ${field}`);
    }
    assert.match(stdout, /^Capacity:\n {2}cpu: +\d+\n/m);
    assert.match(stdout, /^Allocatable:\n {2}cpu: +\d+m?\n/m);
    // kops' control plane requests CPU for its static pods (apiserver 150m, controller-manager and scheduler 100m) and kube-proxy (100m).
    assert.match(stdout, /^ {2}cpu +450m \(\d+%\) +0 \(0%\)$/m);
    assert.match(stdout, /kube-apiserver-\S+ +150m \(\d+%\)/);
  });
});
