/**
 * The process runtime of `kops-controller run`: the operations endpoint on every replica, leader
 * election, and the leader-only components, which run only while this replica holds the lease.
 * Components are supervised: one that fails or returns while leading is restarted with backoff; when
 * leadership ends every component must stop before the lease is released, and one that does not stop
 * in time is fatal (the process exits and restarts rather than risk two active controllers).
 */
import { Gauge, type Registry, register } from 'prom-client';
import type { Config } from '../config/schema.ts';
import { describeError, InternalError } from '../errors.ts';
import { LeaderElector, type LeaseClient } from '../kube/leader-election.ts';
import { sharedMetric } from '../kube/metrics.ts';
import { type Logger, silentLogger } from '../log.ts';
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
  /** This replica's lease holder identity; defaults to hostname plus a random suffix. */
  identity?: string;
  /** How long components may take to stop after leadership ends; defaults to renewDeadline. */
  componentStopTimeoutMs?: number;
  /** Restart delays of a failing component, in ms; default 1 s doubling to 30 s. */
  componentBackoff?: { initialMs: number; maxMs: number };
  clock?: Clock;
  logger?: Logger;
  random?: () => number;
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
  #componentRuns: Promise<void>[] = [];
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
          onStoppedLeading: () => this.#awaitComponents(),
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
        liveness: () => (this.#fatal ? describeError(this.#fatal) : undefined),
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
    this.#componentRuns = (this.#options.components ?? []).map((component) =>
      this.#supervise(component, signal),
    );
  }

  async #supervise(component: LeaderComponent, signal: AbortSignal): Promise<void> {
    const logger = this.#logger.child({ component: component.name });
    const backoff = new Backoff({
      ...(this.#options.componentBackoff ?? { initialMs: 1000, maxMs: 30_000 }),
      random: this.#options.random ?? Math.random,
    });
    while (!signal.aborted) {
      logger.info('starting');
      this.#running.set({ component: component.name }, 1);
      try {
        await component.start(signal);
        if (!signal.aborted) logger.warn('returned while still leading; restarting');
      } catch (err) {
        if (!signal.aborted) logger.error({ err: describeError(err) }, 'failed; restarting');
      }
      this.#running.set({ component: component.name }, 0);
      if (!signal.aborted) await sleep(this.#clock, backoff.next(), signal);
    }
    logger.info('stopped');
  }

  /** Waits for the components to stop; one that overruns the timeout makes the runtime fail. */
  async #awaitComponents(): Promise<void> {
    const runs = this.#componentRuns;
    this.#componentRuns = [];
    const timeoutMs =
      this.#options.componentStopTimeoutMs ?? this.#options.config.leaderElection.renewDeadline;
    let cancel = () => {};
    const timedOut = new Promise<boolean>((resolve) => {
      cancel = this.#clock.setTimer(() => resolve(true), timeoutMs);
    });
    const overran = await Promise.race([Promise.all(runs).then(() => false), timedOut]);
    cancel();
    if (overran) {
      this.#fatal = new InternalError(
        `a leader-only component did not stop within ${timeoutMs} ms after leadership ended; ` +
          'exiting without releasing the lease so that no two replicas act as leader',
      );
      this.#stop.abort();
      throw this.#fatal;
    }
  }
}
