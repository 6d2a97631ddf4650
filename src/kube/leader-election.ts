/**
 * Leader election on a coordination.k8s.io/v1 Lease with client-go's semantics, so this controller can
 * share a lease with Go controllers and behave as operators expect:
 * - a candidate takes the lease when it is absent, released (no holder), already its own, or expired;
 *   expiry is measured from when this candidate last *saw the lease change*, on its own monotonic
 *   clock, never from the holder's timestamps nor on the wall clock, so neither clock offsets between
 *   machines nor a stepped system clock can cause two leaders (wall time is only written, as the
 *   Lease's MicroTimes);
 * - the leader renews every retryPeriod; when no renewal has succeeded for renewDeadline it steps
 *   down at once, and its work must have stopped by {@link stopDeadlineFraction} × leaseDuration after
 *   the last successful renewal, before any other candidate can see the lease expire; the remaining
 *   tenth is the margin for clocks that run at different rates (client-go's assumption: bounded rate
 *   skew, not synchronised clocks);
 * - every write is a replace carrying the resourceVersion read, so a 409 means "lost the race; retry";
 * - on shutdown the leader clears the holder, so the next candidate takes over without waiting.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { type CoordinationV1Api, type V1Lease, V1MicroTime } from '@kubernetes/client-node';
import { Counter, Gauge, type Registry } from 'prom-client';
import { retryJitterFactor, stopDeadlineFraction } from '../config/schema.ts';
import { ConfigError, describeError, TimeoutError } from '../errors.ts';
import { fieldsOf } from '../json-object.ts';
import { type Logger, RecurringFailureLog, silentLogger } from '../log.ts';
import { type Clock, sleep, systemClock } from '../runtime/clock.ts';
import { httpStatusOfApiError } from './api-errors.ts';
import { abortingWith } from './call-options.ts';
import { sharedMetric } from './metrics.ts';

/** The Lease calls leader election needs; a CoordinationV1Api has them. */
export type LeaseClient = Pick<
  CoordinationV1Api,
  'readNamespacedLease' | 'createNamespacedLease' | 'replaceNamespacedLease'
>;

/** What a leader election does, and what it calls when leadership changes. */
/** What one bounded attempt at the lease is cancelled by (see LeaderElector's #bounded). */
interface AttemptSignals {
  timedOut: AbortSignal;
  stopping: AbortSignal;
}

export interface LeaderElectionOptions {
  client: LeaseClient;
  namespace: string;
  name: string;
  /** This candidate's name in `holderIdentity`; defaults to {@link defaultIdentity}. */
  identity?: string;
  /** How long a lease is valid after its last renewal, in ms (client-go default 15 s). */
  leaseDurationMs: number;
  /** How long the leader keeps trying to renew before it steps down, in ms (default 10 s). */
  renewDeadlineMs: number;
  /** How often candidates try to acquire and the leader renews, in ms (default 2 s). */
  retryPeriodMs: number;
  /** Called on becoming leader; `signal` aborts when leadership ends. Work started here must stop then. */
  onStartedLeading: (signal: AbortSignal) => void;
  /**
   * Called after leadership ends (lost or shutting down), before the lease is released on shutdown.
   * The leader's work must have stopped by `deadline.stopBy`, or another candidate may lead while it
   * still runs; throwing means it did not stop, and the lease is then left to expire instead.
   */
  onStoppedLeading?: (deadline: StopDeadline) => void | Promise<void>;
  /** Called whenever the observed holder changes, including to this candidate. */
  onNewLeader?: (identity: string) => void;
  clock?: Clock;
  logger?: Logger;
  registry?: Registry;
  /** Random numbers in [0, 1) for retry jitter. */
  random?: () => number;
}

/** When a leader's work must have stopped, passed to {@link LeaderElectionOptions.onStoppedLeading}. */
export interface StopDeadline {
  /**
   * On the elector's `clock.monotonic()`: the last successful renewal plus
   * {@link stopDeadlineFraction} × leaseDuration, before any other candidate can see the lease expire.
   */
  stopBy: number;
}

/** The lease holder's facts, as read from a Lease. */
export interface LeaderRecord {
  holderIdentity: string;
  leaseDurationMs: number | undefined;
  acquireTime: number | undefined;
  renewTime: number | undefined;
  leaseTransitions: number;
}

/** `<hostname>_<random>`: unique even when two replicas share a hostname. */
export function defaultIdentity(): string {
  return `${hostname()}_${randomBytes(4).toString('hex')}`;
}

/**
 * Reads a MicroTime. client-node 2.0.1 types these fields as V1MicroTime but hands over the raw
 * string ("2026-11-22T01:02:03.456789Z") at runtime; both forms are accepted.
 */
export function parseMicroTime(value: unknown): number | undefined {
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? undefined : value.getTime();
  if (typeof value !== 'string') return undefined;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? undefined : ms;
}

/** A count the API server could have sent (an int32 ≥ 0, or > 0), else undefined. */
function countOf(value: unknown, minimum: number): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= minimum ? value : undefined;
}

/**
 * The holder facts of a Lease. client-node hands the fields over as the API server's JSON had them,
 * whatever their type, so each is read for what it can be: a `leaseDurationSeconds` that is not a
 * positive integer (negative, zero, `"abc"`, an object) is no duration at all, and the candidate's own
 * applies; read as it came, it made a renewed lease expired at once (NaN or a negative validity), and
 * a candidate took over from a live holder. A `leaseTransitions` that is not a count is none (written
 * back, `"x" + 1` was `"x1"`, which the API server refuses: no candidate could take the lease). A
 * holder that is not a string is someone, not no one.
 */
export function leaderRecordOf(lease: V1Lease): LeaderRecord {
  const spec = fieldsOf(lease.spec);
  const holder = spec['holderIdentity'];
  const seconds = countOf(spec['leaseDurationSeconds'], 1);
  return {
    holderIdentity:
      typeof holder === 'string'
        ? holder
        : holder === undefined || holder === null
          ? ''
          : JSON.stringify(holder),
    leaseDurationMs: seconds === undefined ? undefined : seconds * 1000,
    acquireTime: parseMicroTime(spec['acquireTime']),
    renewTime: parseMicroTime(spec['renewTime']),
    leaseTransitions: countOf(spec['leaseTransitions'], 0) ?? 0,
  };
}

/**
 * What tells one version of a Lease from another: its resourceVersion and its leader record, as
 * client-go compares the whole record it read. The resourceVersion alone is not enough from an API
 * server that leaves it out or does not move it: a holder's renewals would go unseen, its lease would
 * look expired after leaseDuration, and two candidates would take it from each other for ever.
 */
function leaseVersionOf(lease: V1Lease): string {
  const spec = (lease.spec ?? {}) as Record<string, unknown>;
  return JSON.stringify([
    lease.metadata?.resourceVersion,
    spec['holderIdentity'],
    spec['leaseDurationSeconds'],
    spec['acquireTime'],
    spec['renewTime'],
    spec['leaseTransitions'],
  ]);
}

interface ElectionMetrics {
  leading: Gauge;
  changes: Counter;
  renewFailures: Counter;
  errors: Counter;
}

function electionMetrics(registry: Registry): ElectionMetrics {
  const registers = [registry];
  const labelNames = ['name'] as const;
  return {
    leading: sharedMetric(
      registry,
      'leader_election_master_status',
      () =>
        new Gauge({
          name: 'leader_election_master_status',
          help: '1 while this process holds the lease, else 0.',
          labelNames,
          registers,
        }),
    ),
    changes: sharedMetric(
      registry,
      'leader_election_leadership_changes_total',
      () =>
        new Counter({
          name: 'leader_election_leadership_changes_total',
          help: 'Times this process became or stopped being the leader.',
          labelNames: ['name', 'change'],
          registers,
        }),
    ),
    renewFailures: sharedMetric(
      registry,
      'leader_election_renew_failures_total',
      () =>
        new Counter({
          name: 'leader_election_renew_failures_total',
          help: 'Lease renewals that failed (the leader steps down when they fail for renewDeadline).',
          labelNames,
          registers,
        }),
    ),
    errors: sharedMetric(
      registry,
      'leader_election_lease_errors_total',
      () =>
        new Counter({
          name: 'leader_election_lease_errors_total',
          help: 'Lease reads and writes that failed or got no answer in time, on the leader and on standbys alike (losing a race to another candidate is not one).',
          labelNames,
          registers,
        }),
    ),
  };
}

/** One candidate in a leader election. Start it with {@link LeaderElector.run}. */
export class LeaderElector {
  readonly identity: string;
  readonly #options: LeaderElectionOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #metrics: ElectionMetrics | undefined;
  readonly #random: () => number;
  /**
   * Lease reads and writes that fail: retried every retryPeriod, on every replica, for as long as the
   * API server is down, so written when they start failing, every ten minutes, and when they work
   * again (`leader_election_lease_errors_total` counts each).
   */
  readonly #failures: RecurringFailureLog;
  /**
   * The last Lease read or written, and when this candidate first saw that version of it (monotonic).
   * Every instant below is on `clock.monotonic()`; `clock.now()` only dates what is written.
   */
  #observed: V1Lease | undefined;
  /** {@link leaseVersionOf} the observed Lease. */
  #observedVersion: string | undefined;
  #observedAt = 0;
  #leader = '';
  #attempted = false;
  /** When the last successful acquire or renewal started. */
  #renewedAt = 0;
  /** `#renewedAt` + renewDeadline: this candidate leads until then unless it renews again. */
  #leadingUntil = 0;
  #leading = false;

  constructor(options: LeaderElectionOptions) {
    const { leaseDurationMs, renewDeadlineMs } = options;
    // As client-go's NewLeaderElector, refuse timings that leave no room to stop before expiry.
    if (!(renewDeadlineMs < leaseDurationMs * stopDeadlineFraction)) {
      throw new ConfigError(
        `leader election: renewDeadline (${renewDeadlineMs} ms) must be shorter than ` +
          `${stopDeadlineFraction} × leaseDuration (${leaseDurationMs * stopDeadlineFraction} ms): ` +
          "the leader's work stops in between, before another replica can take the lease",
      );
    }
    this.#options = options;
    this.identity = options.identity ?? defaultIdentity();
    this.#clock = options.clock ?? systemClock;
    this.#logger = (options.logger ?? silentLogger).child({
      lease: `${options.namespace}/${options.name}`,
      identity: this.identity,
    });
    this.#metrics = options.registry ? electionMetrics(options.registry) : undefined;
    this.#random = options.random ?? Math.random;
    this.#failures = new RecurringFailureLog(this.#logger, {
      message: 'lease request failed',
      recoveredMessage: 'lease requests answered again',
      now: () => this.#clock.monotonic(),
    });
    this.#metrics?.leading.set({ name: options.name }, 0);
  }

  /** Whether this candidate leads now: it has renewed within renewDeadline and has not stepped down. */
  get isLeader(): boolean {
    return this.#leading && this.#clock.monotonic() < this.#leadingUntil;
  }

  /** The holder last observed on the lease ('' when none). */
  get leader(): string {
    return this.#leader;
  }

  /**
   * Whether the API server has told this candidate the lease's state (read it, or answered that it
   * does not exist), so `isLeader` and `leader` reflect the lease. A read that failed or got no
   * answer tells nothing: the state stays unknown (and the replica not ready) until one succeeds.
   */
  get stateKnown(): boolean {
    return this.#attempted;
  }

  /**
   * Campaigns until `signal` aborts: acquires the lease, leads while renewals succeed, campaigns again
   * after losing it. On abort, a leader stops leading and releases the lease before this resolves.
   */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      if (!(await this.#acquire(signal))) break;
      if (signal.aborted) {
        // Shutdown began while the lease was being acquired: hand it straight back, start nothing.
        await this.#release();
        break;
      }
      await this.#lead(signal);
    }
  }

  async #acquire(signal: AbortSignal): Promise<boolean> {
    const { retryPeriodMs } = this.#options;
    this.#logger.info('trying to acquire the leader lease');
    while (!signal.aborted) {
      const startedAt = this.#clock.monotonic();
      if (
        await this.#bounded(
          (signals) => this.#tryAcquireOrRenew(startedAt, signals),
          this.#options.renewDeadlineMs,
          signal,
        )
      ) {
        this.#renewed(startedAt);
        return true;
      }
      await sleep(this.#clock, retryPeriodMs + this.#random() * retryJitterFactor * retryPeriodMs, signal);
    }
    return false;
  }

  /** Records a successful acquire or renewal that started at `startedAt`. */
  #renewed(startedAt: number): void {
    this.#renewedAt = startedAt;
    this.#leadingUntil = startedAt + this.#options.renewDeadlineMs;
  }

  async #lead(signal: AbortSignal): Promise<void> {
    const { name, retryPeriodMs, renewDeadlineMs, leaseDurationMs } = this.#options;
    const leadership = new AbortController();
    const stop = (reason: string) => {
      if (!leadership.signal.aborted) leadership.abort(new Error(reason));
    };
    let cancelWatchdog = () => {};
    // Steps down the moment renewDeadline passes without a renewal, even while a renewal hangs.
    const armWatchdog = () => {
      cancelWatchdog();
      cancelWatchdog = this.#clock.setTimer(
        () => stop(`no successful renewal for ${renewDeadlineMs} ms`),
        this.#leadingUntil - this.#clock.monotonic(),
      );
    };
    const onShutdown = () => stop('shutting down');
    signal.addEventListener('abort', onShutdown, { once: true });
    this.#leading = true;
    armWatchdog();
    this.#metrics?.leading.set({ name }, 1);
    this.#metrics?.changes.inc({ name, change: 'started' });
    this.#logger.info('became leader');
    try {
      this.#options.onStartedLeading(leadership.signal);
    } catch (err) {
      this.#logger.error({ err: describeError(err) }, 'onStartedLeading failed');
    }

    while (!leadership.signal.aborted) {
      await sleep(this.#clock, retryPeriodMs, leadership.signal);
      if (leadership.signal.aborted) break;
      const startedAt = this.#clock.monotonic();
      const remaining = this.#leadingUntil - startedAt;
      if (
        await this.#bounded(
          (signals) => this.#tryAcquireOrRenew(startedAt, signals),
          remaining,
          leadership.signal,
        )
      ) {
        this.#renewed(startedAt);
        armWatchdog();
      } else {
        this.#metrics?.renewFailures.inc({ name });
        if (this.#leader && this.#leader !== this.identity) stop(`lease taken over by ${this.#leader}`);
      }
    }

    cancelWatchdog();
    signal.removeEventListener('abort', onShutdown);
    this.#leading = false;
    this.#metrics?.leading.set({ name }, 0);
    this.#metrics?.changes.inc({ name, change: 'stopped' });
    // Another candidate may take the lease one leaseDuration after it saw the last renewal, on its clock.
    const stopBy = this.#renewedAt + leaseDurationMs * stopDeadlineFraction;
    this.#logger.warn(
      {
        reason: describeError(leadership.signal.reason),
        stopWithinMs: Math.max(0, Math.round(stopBy - this.#clock.monotonic())),
      },
      'stopped leading',
    );
    let stoppedCleanly = true;
    try {
      await this.#options.onStoppedLeading?.({ stopBy });
    } catch (err) {
      // The leader's work may still be running: keep the lease until it expires rather than hand it over.
      stoppedCleanly = false;
      this.#logger.error({ err: describeError(err) }, 'onStoppedLeading failed; not releasing the lease');
    }
    if (signal.aborted && stoppedCleanly) await this.#release();
  }

  /**
   * Runs `attempt` until a timeout on the clock (a late answer counts as failure, and its requests are
   * cancelled). It is given `timedOut`, and `stopping`, which also aborts when `stop` does (shutdown,
   * or the term ending): an attempt gives up its read on `stopping`, so that a silent API server holds
   * no stop, and lets a write already sent finish, so that a lease it takes is known, and released.
   */
  async #bounded(
    attempt: (signals: AttemptSignals) => Promise<boolean>,
    timeoutMs: number,
    stop?: AbortSignal,
  ): Promise<boolean> {
    if (timeoutMs <= 0) return false;
    const timedOut = new AbortController();
    const cancelTimer = this.#clock.setTimer(() => {
      // No answer in time: an error of the API server, whether this replica leads or waits; counted
      // here once, not again where the request it cut short fails.
      this.#metrics?.errors.inc({ name: this.#options.name });
      // One summary whatever the timeout (a leader's shrinks to its deadline), so one line an outage.
      this.#failures.failed(new TimeoutError('the API server did not answer in time'), {
        timeoutMs: Math.round(timeoutMs),
      });
      timedOut.abort();
    }, timeoutMs);
    const stopping = stop ? AbortSignal.any([timedOut.signal, stop]) : timedOut.signal;
    const late = new Promise<boolean>((resolve) =>
      timedOut.signal.addEventListener('abort', () => resolve(false)),
    );
    try {
      return await Promise.race([attempt({ timedOut: timedOut.signal, stopping }), late]);
    } finally {
      cancelTimer();
      timedOut.abort();
    }
  }

  /**
   * One acquire-or-renew round that started at `now` (monotonic); true when this candidate holds the
   * lease as of then. The Lease's MicroTimes get the wall time.
   */
  async #tryAcquireOrRenew(now: number, { timedOut, stopping }: AttemptSignals): Promise<boolean> {
    const { client, namespace, name } = this.#options;
    const wallNow = this.#clock.now();
    const writing = abortingWith(timedOut);
    let current: V1Lease;
    try {
      current = await client.readNamespacedLease({ name, namespace }, abortingWith(stopping));
    } catch (err) {
      if (stopping.aborted) return false;
      if (httpStatusOfApiError(err) !== 404) return this.#failed('read', err);
      // No lease: a state known as well as a lease read.
      this.#attempted = true;
      this.#failures.succeeded();
      return this.#write(
        'create',
        () =>
          client.createNamespacedLease({ namespace, body: this.#desiredLease(undefined, wallNow) }, writing),
        timedOut,
      );
    }
    if (stopping.aborted) return false;
    // Dated when the answer came, as client-go: a read that stalled may return a renewal made long
    // after the attempt started, and dating it from the start would shorten the holder's lease.
    this.#observe(current, this.#clock.monotonic());
    const record = leaderRecordOf(current);
    if (record.holderIdentity && record.holderIdentity !== this.identity) {
      const validFor = record.leaseDurationMs ?? this.#options.leaseDurationMs;
      if (this.#observedAt + validFor > now) return false;
      this.#logger.info({ previous: record.holderIdentity }, 'lease expired; taking over');
    }
    return this.#write(
      'update',
      () =>
        client.replaceNamespacedLease(
          { name, namespace, body: this.#desiredLease(current, wallNow) },
          writing,
        ),
      timedOut,
    );
  }

  async #write(action: string, write: () => Promise<V1Lease>, timedOut: AbortSignal): Promise<boolean> {
    try {
      const written = await write();
      this.#observe(written, this.#clock.monotonic());
      return true;
    } catch (err) {
      // Cut short by the attempt's deadline: already counted (and the late answer is no news).
      if (timedOut.aborted) return false;
      return this.#failed(action, err);
    }
  }

  #failed(action: string, err: unknown): false {
    if (httpStatusOfApiError(err) === 409) {
      // The normal outcome of a race with another candidate, not worth a warning; and an answer of
      // the API server, so it ends a run of failures.
      this.#logger.debug({ err: describeError(err) }, `lease ${action} failed`);
      this.#failures.succeeded();
      return false;
    }
    this.#metrics?.errors.inc({ name: this.#options.name });
    this.#failures.failed(err, { action });
    return false;
  }

  #observe(lease: V1Lease, now: number): void {
    this.#failures.succeeded();
    const version = leaseVersionOf(lease);
    if (version !== this.#observedVersion || !this.#observed) this.#observedAt = now;
    this.#observed = lease;
    this.#observedVersion = version;
    this.#attempted = true;
    const holder = leaderRecordOf(lease).holderIdentity;
    if (holder !== this.#leader) {
      this.#leader = holder;
      if (holder) this.#options.onNewLeader?.(holder);
    }
  }

  /** The Lease this candidate writes to hold it; `now` is wall time. */
  #desiredLease(current: V1Lease | undefined, now: number): V1Lease {
    const { namespace, name, leaseDurationMs } = this.#options;
    const record = current ? leaderRecordOf(current) : undefined;
    const keep = record?.holderIdentity === this.identity;
    // A new holder counts one more transition; the first holder of a new Lease starts at none.
    let leaseTransitions = 0;
    if (record) leaseTransitions = keep ? record.leaseTransitions : record.leaseTransitions + 1;
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { ...current?.metadata, name, namespace },
      spec: {
        holderIdentity: this.identity,
        leaseDurationSeconds: Math.max(1, Math.ceil(leaseDurationMs / 1000)),
        acquireTime: new V1MicroTime(keep && record?.acquireTime !== undefined ? record.acquireTime : now),
        renewTime: new V1MicroTime(now),
        leaseTransitions,
      },
    };
  }

  /** Clears the holder (as client-go's ReleaseOnCancel does) so another candidate need not wait. */
  async #release(): Promise<void> {
    const { client, namespace, name, renewDeadlineMs } = this.#options;
    const lease = this.#observed;
    if (!lease || lease.spec?.holderIdentity !== this.identity) return;
    const now = this.#clock.now();
    const released: V1Lease = {
      ...lease,
      spec: {
        ...lease.spec,
        holderIdentity: '',
        leaseDurationSeconds: 1,
        acquireTime: new V1MicroTime(now),
        renewTime: new V1MicroTime(now),
      },
    };
    const ok = await this.#bounded(
      ({ timedOut }) =>
        this.#write(
          'release',
          () => client.replaceNamespacedLease({ name, namespace, body: released }, abortingWith(timedOut)),
          timedOut,
        ),
      renewDeadlineMs,
    );
    this.#logger.info(
      ok ? 'released the leader lease' : 'could not release the leader lease; it will expire',
    );
  }
}
