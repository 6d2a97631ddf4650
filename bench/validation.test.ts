import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatValidationBench, runValidationBench } from './validation.ts';

test('bench/validation (smoke run): both designs report the same gauges; a cached scrape calls no API', async () => {
  const result = await runValidationBench({ nodes: 200, pods: 1200, scrapes: 1 });
  assert.deepEqual(result.ours.gauges, result.kops.gauges);
  assert.equal(result.ours.gauges.kops_node_ready, 199);
  assert.equal(result.ours.gauges.kops_node_notReady, 1);
  assert.equal(result.ours.gauges.kops_pod_pending, 1);
  assert.equal(result.ours.gauges.kops_component_healthy, 3);
  assert.equal(result.ours.apiRequests, 0);
  assert.ok(result.kops.apiRequests >= 3, `kops' scrape made ${result.kops.apiRequests} requests`);
  assert.match(formatValidationBench(result), /gauges identical/);
});
