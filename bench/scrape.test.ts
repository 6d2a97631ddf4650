import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatScrapeBench, runScrapeBench } from './scrape.ts';

test('bench/scrape (smoke run): both designs report the same values; a scrape calls no API', async () => {
  const result = await runScrapeBench({ nodes: 200, pods: 1200, scrapes: 8 });
  assert.ok(result.gauges, 'the kept counts and a validation from scratch differ');
  assert.equal(result.gauges.kops_node_ready, 199);
  assert.equal(result.gauges.kops_node_notReady, 1);
  assert.equal(result.gauges.kops_pod_pending, 1);
  assert.equal(result.gauges.kops_pod_missing, 0);
  assert.equal(result.kept.apiRequests, 0);
  assert.equal(result.fromScratch.apiRequests, 0);
  const report = formatScrapeBench(result);
  assert.match(report, /^counts kept from watch events +\d/m);
  assert.match(report, /values identical/);
});
