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
import { type Logger, RecurringFailureLog } from '../log.ts';

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

/** The longest wait a dependency fault asks for, whatever the dependency or the outage asked. */
const maxFaultRetryAfterSeconds = 60;

/** The Retry-After a dependency itself sent, when the cause carries one (at most 60 s). */
function upstreamRetryAfter(cause: unknown): number {
  const seconds = cause instanceof KopsError ? cause.retryAfterSeconds : undefined;
  return seconds !== undefined && seconds > 0 ? Math.min(Math.ceil(seconds), maxFaultRetryAfterSeconds) : 0;
}

/** What the node reads: what failed, then how long to wait. */
function faultMessage(told: string, retryAfterSeconds: number): string {
  return `${told}, so the request cannot be decided now; retry in ${retryAfterSeconds} s`;
}

/**
 * A request that cannot be decided now because `dependency` failed: 503 with Retry-After, reason
 * `dependency-unavailable`, the dependency named in the answer; `policy` is the policy that met it.
 */
export class DependencyFaultError extends UnavailableError {
  declare readonly retryAfterSeconds: number;
  readonly dependency: Dependency;
  readonly policy: string | undefined;
  /** What the node is told failed: the message without its wait. */
  readonly told: string;

  constructor(
    told: string,
    fault: { dependency: Dependency; policy?: string; retryAfterSeconds: number; cause: unknown },
  ) {
    super(faultMessage(told, fault.retryAfterSeconds), {
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
    this.told = told;
  }

  /** The same fault, asking the node to wait `seconds` if that is longer than it asks already. */
  waitingAtLeast(seconds: number): DependencyFaultError {
    if (seconds <= this.retryAfterSeconds) return this;
    return new DependencyFaultError(this.told, {
      dependency: this.dependency,
      ...(this.policy ? { policy: this.policy } : {}),
      retryAfterSeconds: seconds,
      cause: this.cause,
    });
  }
}

/** How the node is told `dependency` failed. */
function unavailableText(dependency: Dependency): string {
  return `${described[dependency] ?? `a dependency of policy ${dependency.slice('policy:'.length)}`} is unavailable`;
}

/**
 * The fault for a failed call to `dependency`. `cause` is kept for the log and the audit trail; the
 * message the node sees names only the dependency, or says `told` instead: what the node may know
 * of the cause because it is the node's own (its clock).
 */
export function dependencyFault(dependency: Dependency, cause: unknown, told?: string): DependencyFaultError {
  if (isDependencyFault(cause)) return cause;
  // Never sooner than the dependency asked, and spread even when it asked for the same second.
  const retryAfterSeconds = Math.max(upstreamRetryAfter(cause), defaultRetryAfterSeconds());
  return new DependencyFaultError(told ?? unavailableText(dependency), {
    dependency,
    retryAfterSeconds,
    cause,
  });
}

/** The same fault, saying which policy met it (for the audit trail and the log). */
export function faultOfPolicy(policy: string, err: unknown): DependencyFaultError {
  const fault = dependencyFault(`policy:${policy}`, err);
  return new DependencyFaultError(fault.told, {
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

/** The line of a request a dependency fault turned away (one per dependency and window: {@link DependencyOutages}). */
export const faultLogMessage =
  'bootstrap request not decided: a dependency failed; the node was told to retry';

/**
 * The wait for a fault met `elapsedMs` into its dependency's outage: 2–5 s in the first 20 s, then a
 * quarter of the outage so far, spread over the upper half of it (7–15 s a minute in, 30–60 s from
 * four minutes on). `randomInt(n)` is a whole number in [0, n).
 */
export function outageRetryAfterSeconds(elapsedMs: number, randomInt: (n: number) => number): number {
  const most = Math.min(maxFaultRetryAfterSeconds, Math.max(5, Math.round(elapsedMs / 4000)));
  const least = Math.max(2, Math.floor(most / 2));
  return least + randomInt(most - least + 1);
}

/**
 * How long past the longest wait it told a run of faults is still the same one: the slack of nodes
 * that wait longer than told (nodeup retries every 10 s whatever it is told; join backs off too).
 */
const faultGapMs = 30_000;

/** A run of faults of one dependency: its first and latest, and the longest wait it told. */
interface FaultRun {
  since: number;
  last: number;
  longestWaitMs: number;
}

/** Whether `run` still goes on at `now`: a fault came within the longest wait it told, plus the slack. */
function ongoing(run: FaultRun | undefined, now: number): run is FaultRun {
  return run !== undefined && now - run.last <= run.longestWaitMs + faultGapMs;
}

/** Adds a fault at `now` that was told `fault`'s wait to `run`. */
function extend(run: FaultRun, now: number, fault: DependencyFaultError): void {
  run.last = now;
  run.longestWaitMs = Math.max(run.longestWaitMs, fault.retryAfterSeconds * 1000);
}

/** Options of {@link DependencyOutages}. */
export interface DependencyOutagesOptions {
  logger: Logger;
  /** Milliseconds, monotonic (default `performance.now`). */
  now?: () => number;
  /** A whole number in [0, n) (default `crypto.randomInt`), to spread the waits. */
  randomInt?: (n: number) => number;
}

/**
 * The outages of a bootstrap server's dependencies, as its requests meet them. A run of faults of a
 * dependency goes on while requests keep meeting them; once none has for longer than the longest
 * wait it told plus 30 s (the nodes it turned away came back and got through, or no one asks), it is
 * over, and the next fault begins another.
 *
 * - **The wait grows with the outage** ({@link outageRetryAfterSeconds}): a node turned away an
 *   hour into an STS outage is told 30–60 s, not 2–5 s, so 5,000 joining nodes that honour it cost
 *   STS about 110 calls a second instead of 1,450, and a blip still costs a node only seconds. (kops'
 *   nodeup ignores Retry-After: it retries every 10 s or so whatever it is told.) A fault whose cause
 *   asked its own wait (a dependency's Retry-After, EC2 not listing a new instance yet, a spent lookup
 *   budget) is about that request and keeps its wait, as does a node's own callback server failing:
 *   neither begins an outage or makes one longer.
 * - **One line per dependency and window**: the first fault of a run, then one every ten minutes
 *   with how many requests the run turned away (a RecurringFailureLog keyed by the dependency, not
 *   the cause, which names nodes and ids and would make each request a new line). Every request
 *   still has its audit record, and `kops_controller_bootstrap_dependency_failures_total` counts each.
 */
export class DependencyOutages {
  readonly #logger: Logger;
  readonly #now: () => number;
  readonly #randomInt: (n: number) => number;
  /** By dependency: the run of faults the log counts, and the outage the waits grow with. */
  readonly #faults = new Map<string, { run: FaultRun & { log: RecurringFailureLog }; outage?: FaultRun }>();

  constructor(options: DependencyOutagesOptions) {
    this.#logger = options.logger;
    this.#now = options.now ?? (() => performance.now());
    this.#randomInt = options.randomInt ?? ((n) => randomInt(n));
  }

  /**
   * One more request turned away by `fault`: logged (`fields` on its line, when one is written),
   * and answered with the fault returned, whose wait has grown with the outage.
   */
  failed(fault: DependencyFaultError, fields: Record<string, unknown> = {}): DependencyFaultError {
    const now = this.#now();
    const { dependency } = fault;
    let faults = this.#faults.get(dependency);
    if (!faults || !ongoing(faults.run, now)) {
      const log = new RecurringFailureLog(this.#logger, { message: faultLogMessage, now: this.#now });
      faults = { run: { since: now, last: now, longestWaitMs: 0, log } };
      this.#faults.set(dependency, faults);
    }
    let told = fault;
    if (dependency !== 'node-callback' && upstreamRetryAfter(fault.cause) === 0) {
      if (!ongoing(faults.outage, now)) faults.outage = { since: now, last: now, longestWaitMs: 0 };
      told = fault.waitingAtLeast(outageRetryAfterSeconds(now - faults.outage.since, this.#randomInt));
      extend(faults.outage, now, told);
    }
    extend(faults.run, now, told);
    faults.run.log.failed(unavailableText(dependency), {
      ...fields,
      dependency,
      detail: faultDetail(fault),
      retryAfterSeconds: told.retryAfterSeconds,
    });
    return told;
  }
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
