import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { toolPath } from '../testing/tools.ts';
import { bootstrapMetrics, unmarkedRenewalMetric } from './metrics.ts';

test('bootstrap metrics: decisions by policy and verdict, issuance latency, queue depth, dependency failures', async () => {
  const registry = new Registry();
  const metrics = bootstrapMetrics(registry);
  metrics.decision('aws', 'approve');
  bootstrapMetrics(registry).decision('none', 'deny');
  metrics.issued(0.02);
  metrics.queueDepth(3);
  metrics.decision('aws', 'error');
  metrics.dependencyFailure('sts');
  metrics.dependencyFailure('sts');
  const text = await registry.metrics();
  assert.match(text, /kops_controller_bootstrap_requests_total\{policy="aws",verdict="error"\} 1/);
  assert.match(text, /kops_controller_bootstrap_dependency_failures_total\{dependency="sts"\} 2/);
  assert.match(text, /kops_controller_bootstrap_requests_total\{policy="aws",verdict="approve"\} 1/);
  assert.match(text, /kops_controller_bootstrap_requests_total\{policy="none",verdict="deny"\} 1/);
  assert.match(text, /kops_controller_bootstrap_issue_seconds_bucket\{le="0.025"\} 1/);
  assert.match(text, /kops_controller_bootstrap_queue_depth 3/);
});

test('promtool accepts the exposition', async () => {
  const registry = new Registry();
  bootstrapMetrics(registry).queueDepth(0);
  bootstrapMetrics(registry).dependencyFailure('kubernetes-api');
  const check = spawnSync(toolPath('promtool'), ['check', 'metrics'], { input: await registry.metrics() });
  assert.equal(check.status, 0, String(check.stdout) + String(check.stderr));
});

test('the unmarked-renewal counter shows both verdicts at 0 from the start, so "flat" is not "absent"', async () => {
  const registry = new Registry();
  const count = unmarkedRenewalMetric(registry);
  const before = await registry.metrics();
  assert.match(before, /^kops_controller_bootstrap_unmarked_renewals_total\{verdict="approve"\} 0$/m);
  assert.match(before, /^kops_controller_bootstrap_unmarked_renewals_total\{verdict="deny"\} 0$/m);
  count('deny');
  unmarkedRenewalMetric(registry)('deny');
  const after = await registry.metrics();
  assert.match(after, /^kops_controller_bootstrap_unmarked_renewals_total\{verdict="deny"\} 2$/m);
  assert.match(after, /^kops_controller_bootstrap_unmarked_renewals_total\{verdict="approve"\} 0$/m);
});
