/**
 * A serving worker's side (src/bootstrap/workers.ts forks the entry module, which calls
 * {@link runWorker}): its server is started with services that ask the primary for what the workers
 * share — the connection caps, the rate limit and the guard's Node watch — and a registry of its own, which the primary
 * scrapes and which the worker also reports on a short period, so that what it counted is known to
 * the primary should it die between scrapes (src/bootstrap/workers-metrics.ts). It stops when told,
 * and at once when the primary has gone: a worker never outlives it.
 */
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { describeError, KopsError } from '../errors.ts';
import type { Admission, ConnectionGate, TlsKeyPair } from '../net/hardened-server.ts';
import type { PresenceQuestion, WatchedPresence } from './node-guard.ts';
import type { RateDecision, RequestLimiter } from './rate-limit.ts';
import type { FromWorker, ToWorker } from './workers.ts';
import { batchedSender } from './workers-channel.ts';

/** What a worker's server is started with. */
export interface WorkerServices {
  /** The address to serve (a fixed port, shared with the other workers). */
  listen: string;
  /** What to serve, until the primary sends another (the server's `setSecureContext`). */
  tls: TlsKeyPair;
  /** Always true: the workers share the port. */
  reusePort: true;
  /** The connection caps of every worker together. */
  gate: ConnectionGate;
  /** The per-source rate limit of every worker together. */
  limiter: RequestLimiter;
  /** Asks the primary's Node watch about a name, for the impersonation guard. */
  nodePresence: PresenceQuestion;
  /** The worker's metrics: the primary serves them summed with the other workers'. */
  registry: Registry;
}

/** A server a worker runs: what the entry returns. */
export interface WorkerServer {
  address: AddressInfo;
  setSecureContext(tls: TlsKeyPair): void;
  close(): Promise<void>;
}

/** What builds and starts a worker's server from the primary's spec. */
export type WorkerServe = (spec: unknown, services: WorkerServices) => Promise<WorkerServer>;

const send = batchedSender((messages: FromWorker[]) => process.send?.(messages));

/** Questions sent to the primary, answered by id. */
function askPrimary() {
  let nextId = 0;
  const admissions = new Map<number, (admission: Admission) => void>();
  const decisions = new Map<number, (decision: RateDecision) => void>();
  const presences = new Map<number, (presence: WatchedPresence) => void>();
  const answer = (message: ToWorker) => {
    if (message.type === 'admitted') {
      admissions.get(message.id)?.(message.admission);
      admissions.delete(message.id);
    } else if (message.type === 'took') {
      decisions.get(message.id)?.(message.decision);
      decisions.delete(message.id);
    } else if (message.type === 'presence') {
      presences.get(message.id)?.(message.presence);
      presences.delete(message.id);
    }
  };
  const gate: ConnectionGate = {
    admit: (source) =>
      new Promise<Admission>((resolve) => {
        const id = nextId++;
        admissions.set(id, resolve);
        send({ type: 'admit', id, source });
      }),
    release: (source) => send({ type: 'release', source }),
  };
  const limiter: RequestLimiter = {
    take: (source) =>
      new Promise<RateDecision>((resolve) => {
        const id = nextId++;
        decisions.set(id, resolve);
        send({ type: 'take', id, source });
      }),
  };
  const nodePresence: PresenceQuestion = (name) =>
    new Promise<WatchedPresence>((resolve) => {
      const id = nextId++;
      presences.set(id, resolve);
      send({ type: 'presence', id, name });
    });
  return { gate, limiter, nodePresence, answer };
}

/** The argument a worker is forked with: its entry module runs {@link runWorker} instead of its usual main. */
export const servingWorkerFlag = '--kops-controller-serving-worker';

/** Whether this process was forked as a serving worker. */
export function isServingWorker(): boolean {
  return process.argv.includes(servingWorkerFlag);
}

/** Runs the worker: serves with `serve` once told to start, answers scrapes and reports, stops when told. */
export function runWorker(serve: WorkerServe): void {
  const registry = new Registry();
  const primary = askPrimary();
  let server: WorkerServer | undefined;
  // What the primary sent last: one that arrives while the server starts is applied once it serves.
  let tls: TlsKeyPair | undefined;
  // Without its primary, the worker's caps and limits have no one to ask: it ends at once.
  process.on('disconnect', () => process.exit(0));
  // Ctrl-C in a terminal reaches the whole process group: the primary decides when its workers stop
  // (it tells them), so that a worker is not replaced while the primary is shutting down.
  process.on('SIGINT', () => undefined);
  process.on('message', (messages: ToWorker[]) => {
    for (const message of messages) receive(message);
  });
  const report = (id?: number) =>
    void registry.getMetricsAsJSON().then((metrics) => send({ type: 'metrics', id, metrics }));
  const receive = (message: ToWorker) => {
    if (message.type === 'start') {
      tls = message.tls;
      start(serve, message, registry, primary).then(
        (started) => {
          server = started;
          const latest = tls;
          if (latest && latest !== message.tls) started.setSecureContext(latest);
          send({ type: 'ready', address: started.address });
          setInterval(report, message.metricsReportMs).unref();
        },
        (err: unknown) => {
          const failed: FromWorker = {
            type: 'failed',
            kind: err instanceof KopsError ? err.kind : 'internal',
            error: describeError(err),
          };
          // Exits once the primary has the reason: it reports it, this process has nothing to serve.
          process.send?.([failed], undefined, undefined, () => process.exit(1));
        },
      );
    } else if (message.type === 'tls') {
      tls = message.tls;
      server?.setSecureContext(tls);
    } else if (message.type === 'metrics') report(message.id);
    else if (message.type === 'stop') {
      void (server?.close() ?? Promise.resolve()).finally(() => process.exit(0));
    } else primary.answer(message);
  };
}

function start(
  serve: WorkerServe,
  message: Extract<ToWorker, { type: 'start' }>,
  registry: Registry,
  primary: ReturnType<typeof askPrimary>,
): Promise<WorkerServer> {
  return serve(message.spec, {
    listen: message.listen,
    tls: message.tls,
    reusePort: true,
    gate: primary.gate,
    limiter: primary.limiter,
    nodePresence: primary.nodePresence,
    registry,
  });
}
