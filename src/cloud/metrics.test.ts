import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { cloudCallsTimed, cloudRequests } from '../testing/cloud-calls.ts';
import { toolPath } from '../testing/tools.ts';
import { cloudCallMetrics, httpCallResult } from './metrics.ts';

test('cloud call metrics: requests by cloud, call and result, call durations by cloud and call', async () => {
  const registry = new Registry();
  const calls = cloudCallMetrics(registry);
  calls.request('aws', 'DescribeInstances', 'throttled');
  // A second recorder on the same registry reports into the same families (leader and bootstrap share one).
  cloudCallMetrics(registry).request('aws', 'DescribeInstances', 'ok');
  calls.request('gce', 'instances.get', 'rejected');
  calls.duration('aws', 'DescribeInstances', 0.3);
  assert.deepEqual(await cloudRequests(registry), {
    'aws DescribeInstances throttled': 1,
    'aws DescribeInstances ok': 1,
    'gce instances.get rejected': 1,
  });
  assert.equal(await cloudCallsTimed(registry, 'aws', 'DescribeInstances'), 1);
  const text = await registry.getSingleMetricAsString('kops_controller_cloud_request_duration_seconds');
  assert.match(
    text,
    /kops_controller_cloud_request_duration_seconds_bucket\{le="0.5",cloud="aws",call="DescribeInstances"\} 1/,
  );
});

test('an HTTP status is ok, throttled, rejected or an error; no answer is an error', () => {
  assert.deepEqual([200, 204, 429, 400, 403, 404, 500, 503, undefined].map(httpCallResult), [
    'ok',
    'ok',
    'throttled',
    'rejected',
    'rejected',
    'rejected',
    'error',
    'error',
    'error',
  ]);
});

test('promtool accepts the exposition', async () => {
  const registry = new Registry();
  const calls = cloudCallMetrics(registry);
  calls.request('webhook', 'BootstrapReview', 'error');
  calls.duration('webhook', 'BootstrapReview', 5);
  const check = spawnSync(toolPath('promtool'), ['check', 'metrics'], { input: await registry.metrics() });
  assert.equal(check.status, 0, String(check.stdout) + String(check.stderr));
});
