import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { registerLogMetrics } from './log-metrics.ts';

test('the lines the logger dropped are exported as kops_controller_log_lines_dropped_total, read at each scrape', async () => {
  const registry = new Registry();
  let dropped = 0;
  registerLogMetrics(registry, () => dropped);
  registerLogMetrics(registry, () => -1); // a second registration changes nothing
  assert.match(await registry.metrics(), /^kops_controller_log_lines_dropped_total 0$/m);
  dropped = 42;
  assert.match(await registry.metrics(), /^# TYPE kops_controller_log_lines_dropped_total counter$/m);
  assert.match(await registry.metrics(), /^kops_controller_log_lines_dropped_total 42$/m);
});
