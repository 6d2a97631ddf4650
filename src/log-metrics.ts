/** The logger's own metric: the lines it dropped because standard error was not read (src/log-sink.ts). */
import { Counter, type Registry } from 'prom-client';
import { logLinesDropped } from './log.ts';

const name = 'kops_controller_log_lines_dropped_total';

/**
 * Adds `kops_controller_log_lines_dropped_total` to `registry` once, read at each scrape from
 * `dropped` (default: this process's count). Each serving worker adds its own to its registry; the
 * primary's scrape sums them.
 */
export function registerLogMetrics(registry: Registry, dropped: () => number = logLinesDropped): void {
  if (registry.getSingleMetric(name)) return;
  new Counter({
    name,
    help: 'Log lines dropped because standard error was not read fast enough (a stalled container log pipe), or not at all.',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(dropped());
    },
  });
}
