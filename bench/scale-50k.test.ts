import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatScale, runScale } from './scale-50k.ts';

describe('bench/scale-50k (smoke run)', () => {
  it('labels, scrapes, relabels after an edit, restarts and joins a small world; checks counts, not times', async () => {
    const result = await runScale({
      nodes: 120,
      pods: 1200,
      groupNodes: 20,
      scrapes: 5,
      joinNodes: 40,
      perNodeSample: 101,
      concurrency: 20,
    });
    // The dev cluster's own nodes (its sample instance groups) come on top of the seeded ones.
    assert.ok(result.size.apiNodes > 120);
    // Every dev node runs a kube-proxy, its control plane three static pods more.
    assert.equal(result.size.apiPods, 1200 + (result.size.apiNodes - 120) + 3);
    assert.deepEqual(result.labelled, { nodes: 120, of: 120 });
    assert.equal(result.first.reconciles['labelled'], result.size.apiNodes);
    assert.ok(result.first.cloud.describeById >= 1, 'the NodeController looked its instances up');
    assert.equal(
      result.first.cloud.describeById + result.first.cloud.describeListing,
      result.first.cloud.describeInstances,
    );
    assert.equal(result.restart.reconciles['unchanged'], result.size.apiNodes);
    assert.equal(result.restart.reconciles['labelled'] ?? 0, 0, 'a restart relabels nothing');
    assert.equal(result.scrape.apiRequests, 0, 'a scrape makes no API request');
    assert.equal(result.scrape.nodeReady, result.size.apiNodes);
    assert.equal(result.edit.relabelled, result.edit.nodes);
    assert.ok(result.edit.nodes >= 20);
    const join = result.join;
    assert.ok(join);
    assert.equal(join.batched.verified, 40);
    assert.equal(join.batched.cloud?.sts, 40);
    assert.ok((join.batched.cloud?.describeInstances ?? 0) <= 40);
    // A sample no smaller than the storm is the whole storm: nothing projected.
    assert.equal(join.perNodeSample.nodes, 40);
    assert.equal(join.perNodeSample.cloud?.describeInstances, 40);
    assert.equal(join.perNodeProjectedMs, join.perNodeSample.wallMs);
    const report = formatScale(result);
    for (const row of [
      /^controller RSS, cache synced +\d+ MiB +≤ 1536 MiB +\d+\.\d\d /m,
      /^scrape of \/metrics, p50 +\d+\.\d\d ms +≤ 20 ms /m,
      /^label storm after restart \(all labelled\): cloud calls +\d+ DescribeInstances +≤ 100 /m,
      /^IG edit → \d+ nodes relabelled +\d+\.\d s +≤ 15 s /m,
      /^join storm, 40 nodes, aws policy +\d+\.\dx faster +≥ 20x /m,
    ]) {
      assert.match(report, row);
    }
  });
});
