/**
 * The process runtime of `kops-controller run`: the operations endpoint on every replica, leader
 * election, and the leader-only components, which run only while this replica holds the lease.
 * Components are supervised: one that fails or returns while leading is restarted with backoff; when
 * leadership ends every component must stop before the lease is released, and before another replica
 * could see the lease expire: by 0.9 × leaseDuration after the last successful renewal. One that has
 * not stopped by then is fatal: the process exits with code 70 at once, without releasing the lease,
 * rather than run the controllers next to a new leader.
 */
import { Gauge, type Registry, register } from 'prom-client';
import type { Config } from '../config/schema.ts';
import { describeError, exitCodeOf, InternalError } from '../errors.ts';
import { LeaderElector, type LeaseClient } from '../kube/leader-election.ts';
import { sharedMetric } from '../kube/metrics.ts';
import { type Logger, RecurringFailureLog, silentLogger, writeLastLine } from '../log.ts';
import { Backoff } from './backoff.ts';
import { type Clock, sleep, systemClock } from './clock.ts';
import { type OpsServer, type ReadinessCheck, startOpsServer } from './ops-server.ts';

/** A part of the controller that must run on the leader only (node labelling, CSR signing, ...). */
export interface LeaderComponent {
  name: string;
  /** Runs until `signal` aborts, then stops all its work and resolves. */
  start(signal: AbortSignal): Promise<void>;
}

/** Options of a {@link ControllerRuntime}. */
export interface ControllerRuntimeOptions {
  /** The validated configuration; `leaderElection` and `metrics.listen` are used here. */
  config: Pick<Config, 'leaderElection' | 'metrics'>;
  /** The Lease API (a CoordinationV1Api). */
  leaseClient: LeaseClient;
  components?: readonly LeaderComponent[];
  /** Conditions `/readyz` waits for besides leader election, e.g. informers having synced. */
  readinessChecks?: readonly ReadinessCheck[];
  /** Served on `/metrics`; defaults to the process-wide prom-client registry. */
  registry?: Registry;
  /** How long one `/metrics` exposition answers every scrape (default the ops server's, 1 s). */
  metricsReuseMs?: number;
  /** This replica's lease holder identity; defaults to hostname plus a random suffix. */
  identity?: string;
  /**
   * A shorter limit on how long components may take to stop. With leader election they must stop by
   * 0.9 × leaseDuration after the last renewal anyway; without it, this defaults to renewDeadline.
   */
  componentStopTimeoutMs?: number;
  /** Restart delays of a failing component, in ms; default 1 s doubling to 30 s. */
  componentBackoff?: { initialMs: number; maxMs: number };
  clock?: Clock;
  logger?: Logger;
  random?: () => number;
  /**
   * Ends the process when a component has not stopped in time (with code 70). The default writes the
   * `kops-controller: <reason>` line on standard error and calls `process.exit`; only tests pass
   * another, to observe the exit without dying.
   */
  exit?: (code: number) => void;
}

/** A supervised component's run; `stopped` once it has returned for good. */
interface ComponentRun {
  name: string;
  done: Promise<void>;
  stopped: boolean;
}

/** A readiness check that passes once `informer` has completed its first list. */
export function informerSynced(informer: { name: string; hasSynced(): boolean }): ReadinessCheck {
  return {
    name: `informer-${informer.name}`,
    check: () => (informer.hasSynced() ? undefined : 'not synced yet'),
  };
}

/** The controller process: start it, then await {@link ControllerRuntime.done}; `stop` shuts it down. */
export class ControllerRuntime {
  readonly #options: ControllerRuntimeOptions;
  readonly #registry: Registry;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #elector: LeaderElector | undefined;
  readonly #checks: ReadinessCheck[];
  readonly #stop = new AbortController();
  readonly #running: Gauge;
  #componentRuns: ComponentRun[] = [];
  #fatal: Error | undefined;
  #server: OpsServer | undefined;
  #starting: Promise<OpsServer> | undefined;
  #done: Promise<void> | undefined;

  constructor(options: ControllerRuntimeOptions) {
    this.#options = options;
    this.#registry = options.registry ?? register;
    this.#logger = options.logger ?? silentLogger;
    this.#clock = options.clock ?? systemClock;
    const le = options.config.leaderElection;
    this.#elector = le.enabled
      ? new LeaderElector({
          client: options.leaseClient,
          namespace: le.namespace,
          name: le.name,
          identity: options.identity,
          leaseDurationMs: le.leaseDuration,
          renewDeadlineMs: le.renewDeadline,
          retryPeriodMs: le.retryPeriod,
          onStartedLeading: (signal) => this.#startComponents(signal),
          onStoppedLeading: ({ stopBy }) => this.#awaitComponents(stopBy),
          onNewLeader: (identity) => this.#logger.info({ leader: identity }, 'leader observed'),
          clock: this.#clock,
          logger: this.#logger,
          registry: this.#registry,
          random: options.random,
        })
      : undefined;
    this.#checks = [
      {
        name: 'leader-election',
        check: () =>
          !this.#elector || this.#elector.stateKnown ? undefined : 'the leader lease has not been read yet',
      },
      ...(options.readinessChecks ?? []),
    ];
    this.#running = sharedMetric(
      this.#registry,
      'controller_component_running',
      () =>
        new Gauge({
          name: 'controller_component_running',
          help: '1 while a leader-only component runs on this replica.',
          labelNames: ['component'],
          registers: [this.#registry],
        }),
    );
    for (const component of options.components ?? []) this.#running.set({ component: component.name }, 0);
  }

  /** Whether this replica runs the leader-only components now. */
  get isLeader(): boolean {
    return this.#elector ? this.#elector.isLeader : !this.#stop.signal.aborted;
  }

  /** This replica's lease holder identity (undefined when leader election is disabled). */
  get identity(): string | undefined {
    return this.#elector?.identity;
  }

  /** Adds a `/readyz` condition, e.g. {@link informerSynced}. */
  addReadinessCheck(check: ReadinessCheck): void {
    this.#checks.push(check);
  }

  /** Serves the operations endpoint and starts campaigning (or the components, without election). */
  start(): Promise<OpsServer> {
    if (this.#starting) throw new InternalError('controller runtime already started');
    this.#starting = (async () => {
      const server = await startOpsServer({
        listen: this.#options.config.metrics.listen,
        registry: this.#registry,
        readinessChecks: () => this.#checks,
        ...(this.#options.metricsReuseMs === undefined
          ? {}
          : { metricsReuseMs: this.#options.metricsReuseMs }),
        // No liveness condition: a fatal error ends the process at once instead of failing /healthz.
        logger: this.#logger,
      });
      this.#server = server;
      this.#logger.info({ url: server.url }, 'serving /healthz, /readyz and /metrics');
      this.#done = this.#run();
      return server;
    })();
    return this.#starting;
  }

  /** Resolves after a clean shutdown; rejects if a component could not be stopped. */
  get done(): Promise<void> {
    if (!this.#done) throw new InternalError('controller runtime not started');
    return this.#done;
  }

  /**
   * Stops the components, releases the lease, closes the server; resolves when all of that is done,
   * also when called while {@link ControllerRuntime.start} is still in progress.
   */
  async stop(): Promise<void> {
    this.#stop.abort();
    await this.#starting?.catch(() => {});
    await this.#done?.catch(() => {});
  }

  async #run(): Promise<void> {
    try {
      if (this.#elector) {
        await this.#elector.run(this.#stop.signal);
      } else {
        this.#startComponents(this.#stop.signal);
        const stop = this.#stop.signal;
        if (!stop.aborted)
          await new Promise((resolve) => stop.addEventListener('abort', resolve, { once: true }));
        await this.#awaitComponents().catch(() => {});
      }
    } finally {
      await this.#server?.close();
      this.#logger.info('stopped');
    }
    if (this.#fatal) throw this.#fatal;
  }

  #startComponents(signal: AbortSignal): void {
    this.#componentRuns = (this.#options.components ?? []).map((component) => {
      const run: ComponentRun = { name: component.name, done: Promise.resolve(), stopped: false };
      run.done = this.#supervise(component, signal).finally(() => {
        run.stopped = true;
      });
      return run;
    });
  }

  async #supervise(component: LeaderComponent, signal: AbortSignal): Promise<void> {
    const logger = this.#logger.child({ component: component.name });
    const backoff = new Backoff({
      ...(this.#options.componentBackoff ?? { initialMs: 1000, maxMs: 30_000 }),
      random: this.#options.random ?? Math.random,
    });
    // A component that fails for good (a permission RBAC does not grant) restarts with the backoff
    // for as long as this replica leads: its line is written when it starts failing and every ten
    // minutes after, not at every restart.
    const failures = new RecurringFailureLog(logger, {
      message: 'failed; restarting',
      level: 'error',
      now: () => this.#clock.monotonic(),
    });
    while (!signal.aborted) {
      if (failures.failures === 0) logger.info('starting');
      else logger.debug('starting');
      this.#running.set({ component: component.name }, 1);
      const startedAt = this.#clock.monotonic();
      // A run that lasted a minute worked: what ends it is a new failure, written at once.
      const ranLong = () => this.#clock.monotonic() - startedAt >= 60_000;
      try {
        await component.start(signal);
        if (ranLong()) failures.succeeded();
        if (!signal.aborted) logger.warn('returned while still leading; restarting');
      } catch (err) {
        if (ranLong()) failures.succeeded();
        if (!signal.aborted) failures.failed(err);
      }
      this.#running.set({ component: component.name }, 0);
      if (!signal.aborted) await sleep(this.#clock, backoff.next(), signal);
    }
    logger.info('stopped');
  }

  /**
   * Waits for the components to stop, by `stopBy` (monotonic) with leader election. One that has not
   * stopped by then ends the process at once (exit code 70), without releasing the lease: with leader
   * election, another replica may take the lease over soon after.
   */
  async #awaitComponents(stopBy?: number): Promise<void> {
    const runs = this.#componentRuns;
    this.#componentRuns = [];
    const now = this.#clock.monotonic();
    const cap = this.#options.componentStopTimeoutMs;
    let deadline = stopBy ?? now + (cap ?? this.#options.config.leaderElection.renewDeadline);
    if (cap !== undefined) deadline = Math.min(deadline, now + cap);
    const budgetMs = Math.max(0, Math.floor(deadline - now));
    let cancel = () => {};
    const timedOut = new Promise<boolean>((resolve) => {
      cancel = this.#clock.setTimer(() => resolve(true), budgetMs);
    });
    const overran = await Promise.race([Promise.all(runs.map((r) => r.done)).then(() => false), timedOut]);
    cancel();
    const late = runs.filter((r) => !r.stopped).map((r) => r.name);
    if (!overran || late.length === 0) return;
    const which = `leader-only component${late.length > 1 ? 's' : ''} ${late.join(', ')}`;
    this.#fatal = new InternalError(
      stopBy === undefined
        ? `${which} did not stop within ${budgetMs} ms after shutdown began; exiting`
        : `${which} did not stop within ${budgetMs} ms after leadership ended, before another replica ` +
            'could take the lease over; exiting without releasing the lease so that no two replicas act as leader',
    );
    const reason = describeError(this.#fatal);
    this.#logger.fatal({ components: late, err: reason }, 'exiting');
    const exit =
      this.#options.exit ??
      ((code: number) => {
        // At once, not after the usual cleanup: the deadline is what keeps two leaders apart. The
        // exit writes out the log's waiting lines, then this one (at most 2 s in all, running
        // nothing else), so it comes last.
        writeLastLine(`kops-controller: ${reason}\n`);
        process.exit(code);
      });
    exit(exitCodeOf(this.#fatal));
    // Reached only when `exit` returns (tests): stop campaigning and fail `done`.
    this.#stop.abort();
    throw this.#fatal;
  }
}
