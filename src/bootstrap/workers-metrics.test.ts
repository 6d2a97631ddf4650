/**
 * The arithmetic behind the workers' summed `/metrics` (src/bootstrap/workers-metrics.ts): what a
 * dead worker leaves behind is its counters and histograms, added series by series.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { addSnapshots, type MetricsSnapshot, monotonicMetrics } from './workers-metrics.ts';

/** A worker's registry after it counted `requests` and observed `seconds`, as it reports it. */
async function workerSnapshot(requests: number, seconds: number[], open: number): Promise<MetricsSnapshot> {
  const registry = new Registry();
  const counter = new Counter({
    name: 'requests_total',
    help: 'r',
    labelNames: ['policy', 'verdict'],
    registers: [registry],
  });
  counter.inc({ verdict: 'approve', policy: 'aws' }, requests);
  const histogram = new Histogram({
    name: 'issue_seconds',
    help: 'i',
    buckets: [0.1, 1],
    registers: [registry],
  });
  for (const s of seconds) histogram.observe(s);
  new Gauge({ name: 'connections_open', help: 'c', registers: [registry] }).set(open);
  return registry.getMetricsAsJSON();
}

/** `name` or `name{labels}` → value, over every sample. */
function samples(snapshot: MetricsSnapshot): Record<string, number> {
  const out: Record<string, number> = {};
  for (const metric of snapshot) {
    for (const value of metric.values) {
      const { metricName } = value as { metricName?: string };
      const labels = Object.entries(value.labels)
        .map(([k, v]) => `${k}=${v}`)
        .sort()
        .join(',');
      out[`${metricName ?? metric.name}${labels ? `{${labels}}` : ''}`] = value.value;
    }
  }
  return out;
}

describe('workers metrics arithmetic', () => {
  test('a dead worker leaves its counters and histograms, not its gauges', async () => {
    const kept = monotonicMetrics(await workerSnapshot(3, [0.05], 7));
    assert.deepEqual(
      kept.map((metric) => metric.name),
      ['requests_total', 'issue_seconds'],
    );
  });

  test('snapshots add up series by series, whatever the order of the labels', async () => {
    const first = await workerSnapshot(3, [0.05, 0.5], 1);
    const second = await workerSnapshot(2, [5], 1);
    // The same series with its labels in another order is the same series.
    const requests = second[0] as MetricsSnapshot[number];
    const [sample] = requests.values as [MetricsSnapshot[number]['values'][number]];
    requests.values = [{ ...sample, labels: { verdict: 'approve', policy: 'aws' } }];
    const sum = samples(addSnapshots([monotonicMetrics(first), monotonicMetrics(second)]));
    assert.deepEqual(sum, {
      'requests_total{policy=aws,verdict=approve}': 5,
      'issue_seconds_bucket{le=0.1}': 1,
      'issue_seconds_bucket{le=1}': 2,
      'issue_seconds_bucket{le=+Inf}': 3,
      issue_seconds_sum: 5.55,
      issue_seconds_count: 3,
    });
  });

  test('nothing added to nothing is nothing', () => {
    assert.deepEqual(addSnapshots([[], []]), []);
  });
});
