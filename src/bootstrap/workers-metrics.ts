/**
 * The workers' metrics in the primary's `/metrics` (src/bootstrap/workers.ts): a scrape of the
 * primary's registry sums each metric over the primary and every worker (prom-client's cluster
 * aggregation), so each series appears once.
 *
 * A worker's counters and histograms are cumulative since it started; when it dies they would leave
 * the sum, and every summed counter would drop — which Prometheus reads as a reset, and `rate()` over
 * it as requests that un-happened. So the primary keeps each worker's last reported values (from
 * every scrape, and from a report the worker sends on a short period), and when a worker has gone,
 * its last counters and histograms are added for good to what the dead workers counted. Gauges are
 * not kept: they describe the living.
 */
import {
  AggregatorRegistry,
  type MetricObjectWithValues,
  type MetricValue,
  type Registry,
} from 'prom-client';

/** One process's metrics, as `Registry.getMetricsAsJSON()` gives them. */
export type MetricsSnapshot = MetricObjectWithValues<MetricValue<string>>[];

/** How often a worker reports its metrics between scrapes: what a worker killed outright may leave uncounted. */
export const metricsReportMs = 1_000;

/** The metrics whose samples only grow while their process lives: counters and histograms. */
export function monotonicMetrics(snapshot: MetricsSnapshot): MetricsSnapshot {
  // At run time `type` is prom-client's name of the type, not its declared enum.
  return snapshot.filter((metric) => ['counter', 'histogram'].includes(metric.type as unknown as string));
}

/** A sample's series within its metric: the sample's name (a histogram's `_bucket`, `_sum`, `_count`) and labels. */
function seriesOf(value: MetricValue<string>): string {
  const { metricName } = value as { metricName?: string };
  const labels = Object.entries(value.labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify([metricName ?? '', labels]);
}

/**
 * The snapshots' samples added series by series: one metric per name, one sample per series.
 * Synchronous (prom-client's own aggregation reads its result back asynchronously), so that a dead
 * worker's last report moves into the retired sum in one step and no scrape misses it.
 */
export function addSnapshots(snapshots: MetricsSnapshot[]): MetricsSnapshot {
  const metrics = new Map<
    string,
    { metric: MetricObjectWithValues<MetricValue<string>>; series: Map<string, MetricValue<string>> }
  >();
  for (const snapshot of snapshots) {
    for (const metric of snapshot) {
      let sum = metrics.get(metric.name);
      if (!sum) {
        sum = { metric: { ...metric, values: [] }, series: new Map() };
        metrics.set(metric.name, sum);
      }
      for (const value of metric.values) {
        const key = seriesOf(value);
        const known = sum.series.get(key);
        sum.series.set(key, known ? { ...known, value: known.value + value.value } : { ...value });
      }
    }
  }
  return [...metrics.values()].map(({ metric, series }) => ({ ...metric, values: [...series.values()] }));
}

/**
 * What the primary knows of its workers' metrics, and the scrape of its registry that includes them.
 * Workers are known by any object that stands for them (the pool's record of each).
 */
export class WorkerMetrics {
  readonly #registry: Registry;
  /** Asks every living worker to report; resolves once each has, or has taken too long. */
  readonly #askReports: () => Promise<unknown>;
  /** Each living worker's last report. */
  readonly #last = new Map<object, MetricsSnapshot>();
  /** The counters and histograms of every worker that has gone, added up. */
  #retired: MetricsSnapshot = [];

  constructor(registry: Registry, askReports: () => Promise<unknown>) {
    this.#registry = registry;
    this.#askReports = askReports;
  }

  /** A worker's report: newer than any before it (a worker's messages arrive in order). */
  reported(worker: object, snapshot: MetricsSnapshot): void {
    this.#last.set(worker, snapshot);
  }

  /** A worker has gone: its last counters and histograms stay in every scrape from now on. */
  retire(worker: object): void {
    const last = this.#last.get(worker);
    this.#last.delete(worker);
    if (last) this.#retired = addSnapshots([this.#retired, monotonicMetrics(last)]);
  }

  /**
   * From now on, a scrape of the registry (what the operations port serves, `registry.metrics()`)
   * includes the workers'. The registry itself keeps only the primary's own metrics: a metric the
   * primary registers later (the operations port's own connection gauges, which share names with
   * the workers') is registered as usual and summed like the others.
   */
  attach(): void {
    const registry = this.#registry;
    // An own property in front of the prototype's method; detach() deletes it.
    registry.metrics = async () => {
      const [own] = await Promise.all([registry.getMetricsAsJSON(), this.#askReports()]);
      // Read once every report is in: a worker that died meanwhile counts once, among the retired.
      const summed = AggregatorRegistry.aggregate([own, ...this.#last.values(), this.#retired]);
      summed.setContentType(registry.contentType);
      return summed.metrics();
    };
  }

  /** A scrape of the registry is the primary's alone again. */
  detach(): void {
    delete (this.#registry as Partial<Pick<Registry, 'metrics'>>).metrics;
  }
}
