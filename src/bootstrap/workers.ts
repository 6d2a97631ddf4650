/**
 * The bootstrap server on every core: N worker processes each serve the same port (SO_REUSEPORT, so
 * the kernel spreads connections and no process relays them), terminating TLS and answering requests
 * themselves. Each worker is a serving replica: it builds its own parts from a spec (src/cli's
 * `serveBootstrapWorker`), so what is already correct across the controller's replicas — the replay
 * markers and queued CSRs in the API server — is correct across workers. What a replica keeps in
 * memory and must hold for the whole process is kept here, in the primary, and the workers ask for it:
 *
 * - the connection caps (every source together and per source): a worker asks before it reads a
 *   byte of a new connection and reports its close;
 * - the per-source rate limit: a worker asks before it answers a request;
 * - the Node watch of the impersonation guard (`nodeGuard: watch`): a worker asks whether it is
 *   current and knows a node's name, instead of keeping a watch of every Node of its own (at 50,000
 *   Nodes, each such watch would be another full list on every start and a decode of every Node
 *   update); it reads the Node from the API server itself when the answer does not settle it;
 * - the metrics: a scrape of the primary's registry sums every worker's (one set of series), and
 *   what a worker that died had counted stays counted (src/bootstrap/workers-metrics.ts).
 *
 * A worker that dies is replaced, and what it held is released. Leader election and the controllers
 * stay in the primary.
 */
import { type ChildProcess, fork } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { Registry } from 'prom-client';
import { ConfigError, describeError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import {
  type Admission,
  type ConnectionLimits,
  defaultConnectionLimits,
  type HardenedServer,
  SourceConnectionCounter,
  type TlsKeyPair,
} from '../net/hardened-server.ts';
import { parseListenAddress, urlOf } from '../runtime/listen-address.ts';
import type { WatchedPresence } from './node-guard.ts';
import { defaultRateLimit, type RateDecision, type RateLimit, SourceRateLimiter } from './rate-limit.ts';
import { batchedSender } from './workers-channel.ts';
import { servingWorkerFlag } from './workers-child.ts';
import { type MetricsSnapshot, metricsReportMs, WorkerMetrics } from './workers-metrics.ts';

/** Messages from the primary to a worker (sent in arrays, src/bootstrap/workers-channel.ts). */
export type ToWorker =
  | { type: 'start'; spec: unknown; listen: string; tls: TlsKeyPair; metricsReportMs: number }
  | { type: 'tls'; tls: TlsKeyPair }
  | { type: 'admitted'; id: number; admission: Admission }
  | { type: 'took'; id: number; decision: RateDecision }
  | { type: 'presence'; id: number; presence: WatchedPresence }
  | { type: 'metrics'; id: number }
  | { type: 'stop' };

/** Messages from a worker to the primary (sent in arrays). */
export type FromWorker =
  | { type: 'ready'; address: AddressInfo }
  | { type: 'failed'; kind: string; error: string }
  | { type: 'admit'; id: number; source: string }
  | { type: 'release'; source: string }
  | { type: 'take'; id: number; source: string }
  | { type: 'presence'; id: number; name: string }
  /** With `id`: the answer to a scrape; without: the worker's periodic report. */
  | { type: 'metrics'; id?: number; metrics: MetricsSnapshot };

/** Options of {@link startServingWorkers}. */
export interface ServingWorkersOptions {
  /** How many workers serve (at least 2; one is today's single process, without this module). */
  count: number;
  /**
   * The worker's main module (a file URL): it calls `runWorker` (src/bootstrap/workers-child.ts) with
   * the function that builds and starts its server when it runs as a worker (`isServingWorker()`).
   */
  entry: string;
  /** What the entry builds the server from; sent to each worker as JSON. */
  spec: unknown;
  /** What every worker serves, until `setSecureContext` replaces it in each one and in those started after. */
  tls: TlsKeyPair;
  /** Listen address; port 0 picks one port that every worker then shares. */
  listen: string;
  limits?: Partial<ConnectionLimits>;
  rateLimit?: RateLimit;
  /**
   * What the primary's Node watch says of a name, for the workers' impersonation guard; without it,
   * every answer is "not current" and the workers read each Node from the API server.
   */
  nodePresence?: (name: string) => WatchedPresence;
  /** The primary's registry: a scrape of it includes the workers' metrics, summed. */
  registry?: Registry;
  /** How often each worker reports its metrics between scrapes (default {@link metricsReportMs}). */
  metricsReportMs?: number;
  /** Node options of the workers (default: this process's). */
  execArgv?: string[];
  logger?: Logger;
}

/** The workers serving one port: a server, as a single process's would be, and the workers' process ids. */
export interface ServingWorkers extends HardenedServer {
  /** The process ids of the workers serving now (a replacement once it serves). */
  pids(): number[];
}

/** The primary's view of one worker. */
interface Worker {
  child: ChildProcess;
  /** Whether it has said it serves. */
  serving: boolean;
  /** Connections it holds, by source: released if it dies. */
  held: Map<string, number>;
  /** Sends to it, batched per turn of the event loop. */
  send: (message: ToWorker) => void;
  /** Its scrapes waiting for its report. */
  metricsWaiters: Map<number, () => void>;
}

/** How long a scrape waits for a worker's metrics before it uses its last report. */
const metricsTimeoutMs = 2_000;
/** How long a worker may take to stop before it is killed. */
const stopTimeoutMs = 15_000;
/** A worker that died is replaced after this, doubled for each replacement that died before serving. */
const restartDelayMs = 100;
const maxRestartDelayMs = 10_000;

/** `listen` with its port replaced by `port`, in the same form. */
function withPort(listen: string, port: number): string {
  const { host } = parseListenAddress(listen);
  if (host === undefined) return `:${port}`;
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** The error a worker reported when it could not start. */
function startFailure(message: { kind: string; error: string }): Error {
  return message.kind === 'config' ? new ConfigError(message.error) : new Error(message.error);
}

/** Starts `count` workers on one port; resolves once every one serves, rejects (and stops them) if one cannot. */
export async function startServingWorkers(options: ServingWorkersOptions): Promise<ServingWorkers> {
  const pool = new WorkerPool(options);
  try {
    await pool.start();
  } catch (err) {
    await pool.close();
    throw err;
  }
  return {
    url: pool.url,
    address: pool.address,
    openConnections: () => pool.connections.total,
    setSecureContext: (tls) => pool.setSecureContext(tls),
    close: () => pool.close(),
    pids: () => pool.pids(),
  };
}

class WorkerPool {
  readonly connections: SourceConnectionCounter;
  readonly #options: ServingWorkersOptions;
  readonly #limiter: SourceRateLimiter;
  readonly #logger: Logger;
  readonly #workers = new Set<Worker>();
  #listen: string;
  #tls: TlsKeyPair;
  #address: AddressInfo | undefined;
  #started = false;
  #stopping = false;
  #restartDelay = restartDelayMs;
  #restartTimer: NodeJS.Timeout | undefined;
  #nextId = 0;
  readonly #metrics: WorkerMetrics | undefined;

  constructor(options: ServingWorkersOptions) {
    this.#options = options;
    this.connections = new SourceConnectionCounter({ ...defaultConnectionLimits, ...options.limits });
    this.#limiter = new SourceRateLimiter(options.rateLimit ?? defaultRateLimit);
    this.#logger = (options.logger ?? silentLogger).child({ component: 'bootstrap-workers' });
    this.#listen = options.listen;
    this.#tls = options.tls;
    if (options.registry) this.#metrics = new WorkerMetrics(options.registry, () => this.#askReports());
  }

  get address(): AddressInfo {
    if (!this.#address) throw new Error('the workers have not started');
    return this.#address;
  }

  get url(): string {
    return urlOf(this.address, 'https');
  }

  pids(): number[] {
    return [...this.#workers].filter((worker) => worker.serving).map((worker) => worker.child.pid as number);
  }

  /** Every worker serves new connections with `tls`, and so does every worker started after. */
  setSecureContext(tls: TlsKeyPair): void {
    this.#tls = tls;
    for (const worker of this.#workers) worker.send({ type: 'tls', tls });
  }

  /** The first worker binds (and picks the port when it is 0), then the others join its port. */
  async start(): Promise<void> {
    this.#address = await this.#spawn();
    this.#listen = withPort(this.#options.listen, this.#address.port);
    const others = Array.from({ length: this.#options.count - 1 }, () => this.#spawn());
    await Promise.all(others);
    this.#started = true;
    this.#metrics?.attach();
  }

  /** Forks one worker and resolves with its address once it serves. */
  #spawn(): Promise<AddressInfo> {
    const child = fork(fileURLToPath(this.#options.entry), [servingWorkerFlag], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      // Structured clone: the config is sent as it is, not as JSON.
      serialization: 'advanced',
      // This process's Node options, without a test runner's: a worker serves, it runs no tests.
      execArgv: this.#options.execArgv ?? process.execArgv.filter((arg) => !arg.startsWith('--test')),
    });
    const worker: Worker = {
      child,
      serving: false,
      held: new Map(),
      metricsWaiters: new Map(),
      // A worker that is going away asks nothing more; what it held is released when it has gone.
      send: batchedSender((messages: ToWorker[]) => {
        if (child.connected) child.send(messages);
      }),
    };
    this.#workers.add(worker);
    return new Promise((resolve, reject) => {
      child.on('message', (messages: FromWorker[]) => {
        for (const message of messages) receive(message);
      });
      const receive = (message: FromWorker) => {
        if (message.type === 'ready') {
          worker.serving = true;
          this.#restartDelay = restartDelayMs;
          resolve(message.address);
        } else if (message.type === 'failed') {
          reject(startFailure(message));
        } else if (this.#workers.has(worker)) this.#answer(worker, message);
        // Otherwise it has gone (its messages may arrive after its exit): answered, a question
        // would hold a connection no one releases, and a report would count it twice.
      };
      child.once('exit', (code, signal) => {
        this.#forget(worker);
        if (!worker.serving)
          reject(new Error(`a bootstrap worker exited before it served (${signal ?? code})`));
        // Once the pool serves, a worker that dies, even before it served, is replaced.
        if (this.#started && !this.#stopping) this.#replace(worker, code, signal);
      });
      worker.send({
        type: 'start',
        spec: this.#options.spec,
        listen: this.#listen,
        tls: this.#tls,
        metricsReportMs: this.#options.metricsReportMs ?? metricsReportMs,
      });
    });
  }

  /** Answers what a worker asks of the state they share. */
  #answer(worker: Worker, message: FromWorker): void {
    if (message.type === 'admit') {
      const admission = this.connections.admit(message.source);
      if (admission === 'admitted')
        worker.held.set(message.source, (worker.held.get(message.source) ?? 0) + 1);
      worker.send({ type: 'admitted', id: message.id, admission });
    } else if (message.type === 'release') {
      const held = worker.held.get(message.source) ?? 0;
      if (held === 0) return;
      if (held > 1) worker.held.set(message.source, held - 1);
      else worker.held.delete(message.source);
      this.connections.release(message.source);
    } else if (message.type === 'take') {
      worker.send({ type: 'took', id: message.id, decision: this.#limiter.take(message.source) });
    } else if (message.type === 'presence') {
      const presence = this.#options.nodePresence?.(message.name) ?? { current: false, known: false };
      worker.send({ type: 'presence', id: message.id, presence });
    } else if (message.type === 'metrics') {
      this.#metrics?.reported(worker, message.metrics);
      if (message.id !== undefined) worker.metricsWaiters.get(message.id)?.();
    }
  }

  /** A worker has gone: what it held is released, what it counted kept, its scrapes answered without it. */
  #forget(worker: Worker): void {
    this.#workers.delete(worker);
    for (const [source, count] of worker.held) {
      for (let i = 0; i < count; i++) this.connections.release(source);
    }
    worker.held.clear();
    this.#metrics?.retire(worker);
    for (const waiter of worker.metricsWaiters.values()) waiter();
  }

  /** Forks a replacement for a worker that died; one that dies again before serving waits longer. */
  #replace(worker: Worker, code: number | null, signal: NodeJS.Signals | null): void {
    this.#logger.error(
      { pid: worker.child.pid, code, signal, restartInMs: this.#restartDelay },
      'a bootstrap worker died; replacing it',
    );
    const delay = this.#restartDelay;
    this.#restartDelay = Math.min(maxRestartDelayMs, this.#restartDelay * 2);
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined;
      if (this.#stopping) return;
      this.#spawn().then(
        () => this.#logger.info({ workers: this.#workers.size }, 'a bootstrap worker was replaced'),
        (err) => this.#logger.error({ err: describeError(err) }, 'a replacement bootstrap worker failed'),
      );
    }, delay);
  }

  /** Asks every worker to report its metrics now; resolves once each has, or has taken too long. */
  #askReports(): Promise<unknown> {
    return Promise.all(
      [...this.#workers].map(
        (worker) =>
          new Promise<void>((resolve) => {
            const id = this.#nextId++;
            const done = () => {
              clearTimeout(timer);
              worker.metricsWaiters.delete(id);
              resolve();
            };
            const timer = setTimeout(done, metricsTimeoutMs);
            worker.metricsWaiters.set(id, done);
            worker.send({ type: 'metrics', id });
          }),
      ),
    );
  }

  /** Stops every worker (each closes its server gracefully), killing any that takes too long. */
  async close(): Promise<void> {
    this.#stopping = true;
    clearTimeout(this.#restartTimer);
    this.#metrics?.detach();
    await Promise.all(
      [...this.#workers].map(({ child, send }) => {
        if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
        const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
        const kill = setTimeout(() => child.kill('SIGKILL'), stopTimeoutMs);
        if (child.connected) send({ type: 'stop' });
        else child.kill('SIGTERM');
        return gone.finally(() => clearTimeout(kill));
      }),
    );
  }
}
