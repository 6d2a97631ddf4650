/**
 * Dependency faults: what the bootstrap server answers when something it must ask in order to decide
 * — the API server, STS, EC2, the compute API, Google's token keys, a webhook, the state store —
 * fails, is throttled or does not answer in time. That is not a decision about the node: the answer
 * is 503 with `Retry-After`, never a 403, and never a certificate. Only a decision on verified facts
 * is a denial. A fault is a {@link DependencyFaultError} that names the dependency, so that it is
 * classified once here and mapped once at the HTTP edge (http.ts, kops-handler.ts).
 */
import { randomInt } from 'node:crypto';
import { describeError, KopsError, UnavailableError } from '../errors.ts';

/** What the bootstrap server depends on; the `dependency` label of the metric. */
export type Dependency =
  | 'kubernetes-api'
  | 'sts'
  | 'ec2'
  | 'gce-compute'
  | 'gce-identity-keys'
  | 'openstack-compute'
  | 'scaleway-api'
  | 'azure-arm'
  | 'hetzner-api'
  | 'digitalocean-api'
  | 'linode-api'
  | 'node-callback'
  | 'webhook'
  | 'state-store'
  /** A policy that failed transiently without naming what it called: its name is used. */
  | `policy:${string}`;

/** The machine-readable reason of every dependency fault. */
export const dependencyFaultReason = 'dependency-unavailable';

/** What the node is told, by dependency (the cause goes to the log and the audit trail only). */
const described: Record<string, string> = {
  'kubernetes-api': 'the Kubernetes API server',
  sts: 'AWS STS',
  ec2: 'the EC2 API',
  'gce-compute': 'the Compute Engine API',
  'gce-identity-keys': "Google's identity-token keys",
  'openstack-compute': 'the OpenStack compute API',
  'scaleway-api': 'the Scaleway API',
  'azure-arm': "the Azure Resource Manager API or Microsoft's PKI repository",
  'hetzner-api': 'the Hetzner Cloud API',
  'digitalocean-api': 'the DigitalOcean API',
  'linode-api': 'the Linode API',
  'node-callback': "the node's callback-challenge server",
  webhook: 'the approval webhook',
  'state-store': 'the state store',
};

/**
 * The seconds a node is asked to wait: 2 to 5, spread so that the nodes a fault turned away do not
 * all come back in the same second.
 */
export function defaultRetryAfterSeconds(): number {
  return 2 + randomInt(4);
}

/** The Retry-After a dependency itself sent, when the cause carries one (at most 60 s). */
function upstreamRetryAfter(cause: unknown): number {
  const seconds = cause instanceof KopsError ? cause.retryAfterSeconds : undefined;
  return seconds !== undefined && seconds > 0 ? Math.min(Math.ceil(seconds), 60) : 0;
}

/**
 * A request that cannot be decided now because `dependency` failed: 503 with Retry-After, reason
 * `dependency-unavailable`, the dependency named in the answer; `policy` is the policy that met it.
 */
export class DependencyFaultError extends UnavailableError {
  declare readonly retryAfterSeconds: number;
  readonly dependency: Dependency;
  readonly policy: string | undefined;

  constructor(
    message: string,
    fault: { dependency: Dependency; policy?: string; retryAfterSeconds: number; cause: unknown },
  ) {
    super(message, {
      cause: fault.cause,
      reason: dependencyFaultReason,
      retryAfterSeconds: fault.retryAfterSeconds,
      // Also in `details`, where the policies' tests look for the dependency.
      details: fault.policy
        ? { dependency: fault.dependency, policy: fault.policy }
        : { dependency: fault.dependency },
    });
    this.dependency = fault.dependency;
    this.policy = fault.policy;
  }
}

/**
 * The fault for a failed call to `dependency`. `cause` is kept for the log and the audit trail; the
 * message the node sees names only the dependency, or says `told` instead: what the node may know
 * of the cause because it is the node's own (its clock).
 */
export function dependencyFault(dependency: Dependency, cause: unknown, told?: string): DependencyFaultError {
  if (isDependencyFault(cause)) return cause;
  const what = described[dependency] ?? `a dependency of policy ${dependency.slice('policy:'.length)}`;
  // Never sooner than the dependency asked, and spread even when it asked for the same second.
  const retryAfterSeconds = Math.max(upstreamRetryAfter(cause), defaultRetryAfterSeconds());
  return new DependencyFaultError(
    `${told ?? `${what} is unavailable`}, so the request cannot be decided now; retry in ${retryAfterSeconds} s`,
    { dependency, retryAfterSeconds, cause },
  );
}

/** The same fault, saying which policy met it (for the audit trail and the log). */
export function faultOfPolicy(policy: string, err: unknown): DependencyFaultError {
  const fault = dependencyFault(`policy:${policy}`, err);
  return new DependencyFaultError(fault.message, {
    dependency: fault.dependency,
    retryAfterSeconds: fault.retryAfterSeconds,
    cause: fault.cause,
    policy,
  });
}

/** Whether `err` is a dependency fault (made by {@link dependencyFault}). */
export function isDependencyFault(err: unknown): err is DependencyFaultError {
  return err instanceof DependencyFaultError;
}

/**
 * The dependency a fault names. (Takes any UnavailableError because the audit trail of context.ts
 * types its faults so; every fault passed to it comes from {@link dependencyFault}.)
 */
export function dependencyOf(err: UnavailableError): string {
  return err instanceof DependencyFaultError ? err.dependency : 'unknown';
}

/** The policy that met a fault, when the chain says (faultOfPolicy). */
export function policyOf(err: DependencyFaultError): string | undefined {
  return err.policy;
}

/** What went wrong underneath a fault, for the log and the audit trail (never sent to the node). */
export function faultDetail(err: UnavailableError): string {
  return describeError(err.cause ?? err);
}

/**
 * Whether an error is a dependency failing rather than a verdict: unavailable, throttled or timed
 * out. A policy that throws one of these could not decide; anything else it throws is a bug.
 */
export function isTransientFailure(err: unknown): boolean {
  return (
    err instanceof KopsError &&
    (err.kind === 'unavailable' || err.kind === 'rate-limited' || err.kind === 'timeout')
  );
}

/**
 * Whether a cloud lookup's error is the cloud's verdict on the instance — it does not exist, is not
 * ours, is not running, the id is malformed — as opposed to the cloud API failing. An API refusal of
 * the controller's own call (HTTP 401/403: a missing permission, rejected credentials) is a failure:
 * it says nothing about the node, and the operator can fix it while the node retries.
 */
export function isCloudVerdict(err: unknown): boolean {
  if (!(err instanceof KopsError)) return false;
  if (err.upstreamStatus === 401 || err.upstreamStatus === 403) return false;
  return err.kind === 'not-found' || err.kind === 'forbidden' || err.kind === 'invalid';
}

/** How long a policy waits for one cloud lookup (EC2, Compute Engine), retries included (default). */
export const defaultCloudLookupTimeoutMs = 10_000;
