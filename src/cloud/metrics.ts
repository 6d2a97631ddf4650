/**
 * The calls the controller makes to cloud APIs (EC2, Auto Scaling, STS, Compute Engine, Google's
 * identity-token keys, the other clouds' compute APIs, Microsoft's PKI repository for Azure's attestation intermediates) and to approval webhooks, counted where each request is sent: a throttled
 * or failing dependency shows up here before it shows up as slow bootstraps or stale labels.
 *
 * Labels stay bounded: `cloud` and `result` are fixed sets and `call` is an API operation named in
 * code (an SDK command, a compute method), never an instance id, a name or a URL.
 */
import { Counter, Histogram, type Registry } from 'prom-client';
import { sharedMetric } from '../kube/metrics.ts';

/** Who is called: a cloud's APIs (one name per provider), or an operator's approval webhook. */
export type CloudName =
  | 'aws'
  | 'gce'
  | 'openstack'
  | 'scaleway'
  | 'hetzner'
  | 'digitalocean'
  | 'linode'
  | 'azure'
  | 'webhook';

/**
 * How one request ended:
 * - `ok`: answered successfully;
 * - `throttled`: refused for rate or quota (HTTP 429, AWS throttling codes, Compute Engine's quota
 *   403); the callers retry;
 * - `rejected`: answered with another client error (not found, access denied, a node's bad signature);
 *   the API works, the request or a permission is wrong;
 * - `error`: no usable answer (5xx, unreachable, timed out, malformed).
 */
export type CloudCallResult = 'ok' | 'throttled' | 'rejected' | 'error';

/** Where the clients report their calls. */
export interface CloudCallRecorder {
  /** One request sent and how it ended; each retry is another request. */
  request(cloud: CloudName, call: string, result: CloudCallResult): void;
  /** How long a caller waited for one call, its retries included. */
  duration(cloud: CloudName, call: string, seconds: number): void;
}

/** Records nothing: for one-shot commands (`validate`, `explain`, `labels`) that export no metrics. */
export const noCloudCalls: CloudCallRecorder = {
  request: () => undefined,
  duration: () => undefined,
};

/** From a fast cached-connection read (5 ms) to a call that rode out throttling (30 s). */
const durationBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** Registers (once per registry) the cloud call metrics and returns a recorder reporting to them. */
export function cloudCallMetrics(registry: Registry): CloudCallRecorder {
  const registers = [registry];
  const requests = sharedMetric(
    registry,
    'kops_controller_cloud_requests_total',
    () =>
      new Counter({
        name: 'kops_controller_cloud_requests_total',
        help: 'Requests sent to cloud APIs and approval webhooks (retries included), by cloud, API call and result (ok, throttled, rejected, error).',
        labelNames: ['cloud', 'call', 'result'],
        registers,
      }),
  );
  const durations = sharedMetric(
    registry,
    'kops_controller_cloud_request_duration_seconds',
    () =>
      new Histogram({
        name: 'kops_controller_cloud_request_duration_seconds',
        help: 'Time a caller waited for one cloud API or webhook call, retries and throttling back-off included.',
        labelNames: ['cloud', 'call'],
        buckets: durationBuckets,
        registers,
      }),
  );
  return {
    request: (cloud, call, result) => requests.inc({ cloud, call, result }),
    duration: (cloud, call, seconds) => durations.observe({ cloud, call }, seconds),
  };
}

/** The result an HTTP status means; `undefined` (no answer at all) is an error. */
export function httpCallResult(status: number | undefined): CloudCallResult {
  if (status === undefined) return 'error';
  if (status >= 200 && status < 300) return 'ok';
  if (status === 429) return 'throttled';
  if (status >= 400 && status < 500) return 'rejected';
  return 'error';
}

/** Seconds since `started` (a `performance.now()` reading). */
export function secondsSince(started: number): number {
  return (performance.now() - started) / 1000;
}
