import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadSampleCluster, sampleClusterNames } from './fixtures.ts';
import { parseCluster, parseInstanceGroup } from './kops-types.ts';

test('every sample cluster parses, and its groups belong to it', async () => {
  for (const name of sampleClusterNames) {
    const sample = await loadSampleCluster(name);
    const cluster = parseCluster(sample.cluster);
    assert.equal(cluster.metadata.name, sample.name);
    for (const text of sample.instanceGroups) {
      assert.equal(parseInstanceGroup(text).metadata.labels?.['kops.k8s.io/cluster'], sample.name);
    }
  }
});

test('the AWS sample has a control plane and two node groups', async () => {
  const sample = await loadSampleCluster('aws');
  const groups = sample.instanceGroups.map((t) => parseInstanceGroup(t));
  assert.deepEqual(
    groups.map((g) => [g.metadata.name, g.spec.role]),
    [
      ['control-plane-us-test-1a', 'ControlPlane'],
      ['high-memory-us-test-1b', 'Node'],
      ['nodes-us-test-1a', 'Node'],
    ],
  );
});
