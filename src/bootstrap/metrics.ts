/**
 * Bootstrap metrics on a caller's prom-client registry, as the {@link BootstrapMetricsSink} the
 * bootstrap handlers report to: decisions by deciding policy and verdict, the time from request to
 * issued certificates, and how many requests wait in the queue; where the impersonation guard's
 * answers came from; and the requests a failing dependency left undecided (503), by dependency. The
 * calls themselves, each retry included, are counted by cloud and result in src/cloud/metrics.ts.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { sharedMetric } from '../kube/metrics.ts';
import type { BootstrapMetricsSink } from './context.ts';
import type { GuardReadSource } from './node-guard.ts';
import type { QueueMissSource } from './queue.ts';

/** Latency buckets from 1 ms (cached cloud facts) to 30 s (throttled cloud, slow STS). */
const issueBuckets = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** What the handlers report to, and where the impersonation guard's answers came from. */
export type BootstrapMetrics = BootstrapMetricsSink & {
  guardRead(source: GuardReadSource): void;
  queueMiss(source: QueueMissSource): void;
};

/** A counter of `registry`, registered once however many servers report into it. */
function sharedCounter<L extends string>(registry: Registry, name: string, help: string, labelNames: L[]) {
  return sharedMetric(registry, name, () => new Counter({ name, help, labelNames, registers: [registry] }));
}

/**
 * Counts the renewal policy's verdicts on presented certificates that name no machine where the cloud
 * names the machine of now: while some are approved, `unmarked: refuse` would send those nodes back
 * to their cloud proof.
 */
export function unmarkedRenewalMetric(registry: Registry): (verdict: 'approve' | 'deny') => void {
  const renewals = sharedCounter(
    registry,
    'kops_controller_bootstrap_unmarked_renewals_total',
    "Renewals that presented a certificate naming no machine (kops', the kube-controller-manager's, one issued without a cloud) where the cloud names the machine of now, by the renewal policy's verdict.",
    ['verdict'],
  );
  // Both series from the start: "stayed flat" must be told from "never scraped" (an absent series).
  for (const verdict of ['approve', 'deny'] as const) renewals.inc({ verdict }, 0);
  return (verdict) => renewals.inc({ verdict });
}

/** Registers (once per registry) and returns the bootstrap metrics. */
export function bootstrapMetrics(registry: Registry): BootstrapMetrics {
  const registers = [registry];
  const requests = sharedCounter(
    registry,
    'kops_controller_bootstrap_requests_total',
    'Bootstrap requests decided, by deciding policy (or refusing check) and verdict.',
    ['policy', 'verdict'],
  );
  const issueName = 'kops_controller_bootstrap_issue_seconds';
  const issue = sharedMetric(
    registry,
    issueName,
    () =>
      new Histogram({
        name: issueName,
        help: 'Time from receiving a bootstrap request to issuing its certificates.',
        buckets: issueBuckets,
        registers,
      }),
  );
  const depthName = 'kops_controller_bootstrap_queue_depth';
  const queueDepth = sharedMetric(
    registry,
    depthName,
    () =>
      new Gauge({
        name: depthName,
        help: 'Bootstrap requests waiting for a human to approve them.',
        registers,
      }),
  );
  const guardReads = sharedCounter(
    registry,
    'kops_controller_bootstrap_node_guard_reads_total',
    'Impersonation-guard lookups, by where the answer came from: a current Node watch or the API server.',
    ['source'],
  );
  const dependencyFailures = sharedCounter(
    registry,
    'kops_controller_bootstrap_dependency_failures_total',
    'Bootstrap requests answered 503 (retry) because a dependency failed, was throttled or did not answer in time, by dependency.',
    ['dependency'],
  );
  const queueMisses = sharedCounter(
    registry,
    'kops_controller_bootstrap_queue_misses_total',
    "Polls of a request id the queue's CSR cache does not hold, by how they were answered: api (read from the API server, within the read budget or created here in the last 10 s), watch (not found, from a current watch alone: the budget was spent; for a long-poll, at the end of its wait), refused (429 queue-read-budget: the budget was spent and the watch is not current, or lacks an id created here in the last 10 s, or a long-poll was released before its wait was up).",
    ['source'],
  );
  const dependencyPaused = sharedCounter(
    registry,
    'kops_controller_bootstrap_dependency_paused_total',
    'Of those requests, the ones answered 503 without calling the dependency, because it had failed every call for a while (its circuit is open), by dependency.',
    ['dependency'],
  );
  return {
    dependencyFailure: (dependency) => dependencyFailures.inc({ dependency }),
    dependencyPaused: (dependency) => dependencyPaused.inc({ dependency }),
    guardRead: (source) => guardReads.inc({ source }),
    queueMiss: (source) => queueMisses.inc({ source }),
    decision: (policy, verdict) => requests.inc({ policy, verdict }),
    issued: (seconds) => issue.observe(seconds),
    queueDepth: (pending) => queueDepth.set(pending),
  };
}
