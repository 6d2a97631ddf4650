/** Registering metrics on a caller's prom-client registry, shared by every instance that uses them. */
import type { Metric, Registry } from 'prom-client';

/**
 * Returns the metric called `name` on `registry`, creating it with `create` the first time, so that
 * several work queues or informers report into one metric family told apart by labels.
 */
export function sharedMetric<M extends Metric>(registry: Registry, name: string, create: () => M): M {
  return (registry.getSingleMetric(name) as M | undefined) ?? create();
}
