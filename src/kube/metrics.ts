/** Registering metrics on a caller's prom-client registry, shared by every instance that uses them. */
import type { Metric, Registry } from 'prom-client';

/**
 * Returns the metric called `name` on `registry`, creating it with `create` the first time, so that
 * several work queues or informers report into one metric family told apart by labels.
 */
export function sharedMetric<M extends Metric>(registry: Registry, name: string, create: () => M): M {
  return (registry.getSingleMetric(name) as M | undefined) ?? create();
}

/** The live members of each registry's scrape-time gauges, by gauge name. */
const membersByRegistry = new WeakMap<Registry, Map<string, Set<unknown>>>();

/**
 * The set of live objects a gauge called `name` reads at each scrape (running informers, polling
 * stores), created with the gauge (`register(members)`) the first time. Members join while they run
 * and leave when they stop, so a stopped one leaves no sample behind; the hot path stores a number
 * on the member, and the gauge computes its samples only when scraped.
 */
export function liveMembers<T>(
  registry: Registry,
  name: string,
  register: (members: Set<T>) => void,
): Set<T> {
  let byName = membersByRegistry.get(registry);
  if (!byName) {
    byName = new Map();
    membersByRegistry.set(registry, byName);
  }
  let members = byName.get(name) as Set<T> | undefined;
  if (!members) {
    members = new Set<T>();
    byName.set(name, members as Set<unknown>);
    register(members);
  }
  return members;
}
