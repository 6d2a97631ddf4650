/**
 * Bootstrap metrics on a caller's prom-client registry: decisions by deciding policy and verdict,
 * the time from request to issued certificates, and how many requests wait in the queue. The
 * bootstrap server updates them through the small API below.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { sharedMetric } from '../kube/metrics.ts';
import type { ChainDecision } from './types.ts';

/** The bootstrap metrics, as the server updates them. */
export interface BootstrapMetrics {
  /** Counts one decision: `policy` = the deciding policy (`none` when all abstained). */
  recordDecision(chain: Pick<ChainDecision, 'decidedBy' | 'decision'>): void;
  /** Starts timing an issuance; call the returned function when the certificates are issued. */
  startIssueTimer(): () => void;
  /** Sets how many requests are pending approval. */
  setQueueDepth(depth: number): void;
}

/** Latency buckets from 1 ms (cached cloud facts) to 30 s (throttled cloud, slow STS). */
const issueBuckets = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** Registers (once per registry) and returns the bootstrap metrics. */
export function bootstrapMetrics(registry: Registry): BootstrapMetrics {
  const registers = [registry];
  const requests = sharedMetric(
    registry,
    'kops_controller_bootstrap_requests_total',
    () =>
      new Counter({
        name: 'kops_controller_bootstrap_requests_total',
        help: 'Bootstrap requests decided, by deciding policy and verdict.',
        labelNames: ['policy', 'verdict'],
        registers,
      }),
  );
  const issue = sharedMetric(
    registry,
    'kops_controller_bootstrap_issue_seconds',
    () =>
      new Histogram({
        name: 'kops_controller_bootstrap_issue_seconds',
        help: 'Time from receiving a bootstrap request to issuing its certificates.',
        buckets: issueBuckets,
        registers,
      }),
  );
  const queueDepth = sharedMetric(
    registry,
    'kops_controller_bootstrap_queue_depth',
    () =>
      new Gauge({
        name: 'kops_controller_bootstrap_queue_depth',
        help: 'Bootstrap requests waiting for a human to approve them.',
        registers,
      }),
  );
  return {
    recordDecision: (chain) =>
      requests.inc({ policy: chain.decidedBy ?? 'none', verdict: chain.decision.verdict }),
    startIssueTimer: () => {
      const end = issue.startTimer();
      return () => {
        end();
      };
    },
    setQueueDepth: (depth) => queueDepth.set(depth),
  };
}
