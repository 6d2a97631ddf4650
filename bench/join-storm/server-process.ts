/**
 * The bootstrap server of a storm, in a process of its own (forked from this file), so that its CPU
 * time and event loop are measured apart from the clients and simulators; and the CPU clocks read.
 * The server runs with deploy/openssl.cnf, as the image does.
 */
import { type ChildProcess, execFileSync, fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { KubeConfig } from '@kubernetes/client-node';
import { Gauge, Registry } from 'prom-client';
import { nodePresenceView, presenceOf, watchIsCurrent } from '../../src/bootstrap/node-guard.ts';
import { type AwsInstanceLookup, awsPolicy } from '../../src/bootstrap/policies/aws.ts';
import { awsAccountOf } from '../../src/bootstrap/policies/build.ts';
import { insecureAlwaysApprovePolicy } from '../../src/bootstrap/policies/insecure-always-approve.ts';
import { servingCertificate } from '../../src/bootstrap/server.ts';
import type { BootstrapPolicy } from '../../src/bootstrap/types.ts';
import { startServingWorkers } from '../../src/bootstrap/workers.ts';
import {
  isServingWorker,
  runWorker,
  type WorkerServer,
  type WorkerServices,
} from '../../src/bootstrap/workers-child.ts';
import { type RunningBootstrap, startBootstrapServer } from '../../src/cli/bootstrap-server.ts';
import { createAwsClients } from '../../src/cloud/aws/clients.ts';
import { AwsNodeIdentifier } from '../../src/cloud/aws/identify.ts';
import type { SigV4Credentials } from '../../src/cloud/aws/sigv4.ts';
import { parseConfig } from '../../src/config/loader.ts';
import { reuseConnections } from '../../src/kube/connection-reuse.ts';
import { nodeInformer } from '../../src/kube/shared-informer.ts';
import { defaultConnectionLimits } from '../../src/net/hardened-server.ts';
import { caFromPem } from '../../src/pki/ca.ts';
import { parsePrivateKeyPem } from '../../src/pki/keys.ts';
import { describeInstancePerNode } from '../identify.ts';
import { clusterName, nodesRole } from './nodes.ts';
import type { ServerProcess } from './types.ts';

const opensslConfig = new URL('../../deploy/openssl.cnf', import.meta.url).pathname;
const config = parseConfig({ clusterName, cloud: 'aws', server: {} });

/** How the server process approves: the `aws` policy with either EC2 lookup, or approving everything. */
export type ServerMode = 'aws-batched' | 'aws-per-node' | 'insecure-always-approve';

/** What the server process is started with. */
export interface ServerSpec {
  mode: ServerMode;
  kubeconfig: string;
  aws: { endpoint: string; region: string; credentials: SigV4Credentials };
  ca: { cert: string; key: string };
  /** Processes serving (src/bootstrap/workers.ts); 1 serves in the server process itself. */
  workers: number;
}

type ToServer = { type: 'start'; spec: ServerSpec } | { type: 'loop' } | { type: 'exit' };
type FromServer =
  /** `pids`: the processes that serve, the server process's workers or none. */
  | { type: 'ready'; url: string; pids: number[] }
  | { type: 'failed'; error: string }
  /** The server's event loop so far (`performance.eventLoopUtilization()`), in ms. */
  | { type: 'loop'; idle: number; active: number };

/** The server process: starts the bootstrap server the spec describes and reports its URL. */
function serveChild(): void {
  let running: RunningServer | undefined;
  // A benchmark that dies (Ctrl-C, a failed assertion) must not leave its server behind.
  process.on('disconnect', () => process.exit(0));
  process.on('message', (message: ToServer) => {
    if (message.type === 'exit') {
      const close = running ? running.close() : Promise.resolve();
      void close.then(() => process.exit(0));
      return;
    }
    if (message.type === 'loop') {
      const loop = running?.eventLoop() ?? Promise.resolve(performance.eventLoopUtilization());
      void loop.then(({ idle, active }) =>
        process.send?.({ type: 'loop', idle, active } satisfies FromServer),
      );
      return;
    }
    startServer(message.spec).then(
      (started) => {
        running = started;
        process.send?.({ type: 'ready', url: started.url, pids: started.pids } satisfies FromServer);
      },
      (err: Error) =>
        process.send?.({ type: 'failed', error: err.stack ?? err.message } satisfies FromServer),
    );
  });
}

/** The approval chain of `spec.mode`, and what releases its cloud clients. */
async function policiesOf(spec: ServerSpec): Promise<{ policies: BootstrapPolicy[]; release(): void }> {
  if (spec.mode === 'insecure-always-approve') {
    return { policies: [insecureAlwaysApprovePolicy()], release: () => undefined };
  }
  const { endpoint, region, credentials } = spec.aws;
  const clients = await createAwsClients({ region, endpoint, credentials });
  const instances: AwsInstanceLookup =
    spec.mode === 'aws-batched'
      ? new AwsNodeIdentifier({ ec2: clients.ec2, clusterName })
      : { lookupInstance: (id) => describeInstancePerNode(clients.ec2, id, clusterName) };
  const aws = awsPolicy({
    ...(await awsAccountOf(clients.sts)),
    region,
    nodesRoles: [nodesRole],
    instances,
    stsEndpoint: endpoint,
  });
  return { policies: [aws], release: () => clients.destroy() };
}

/** The server of a storm, in this process or on its workers. */
interface RunningServer {
  url: string;
  /** The workers' process ids (none when this process serves). */
  pids: number[];
  /** The serving event loops so far, summed over the workers: busy and idle ms. */
  eventLoop(): Promise<{ idle: number; active: number }>;
  close(): Promise<void>;
}

/**
 * Every simulated node connects from 127.0.0.1, so the per-source limit would throttle the storm and
 * the per-source connection cap (64) would reset most of its 256 connections: one source may hold
 * as many as every source together.
 */
const stormRateLimit = { burst: 1_000_000, ratePerSecond: 1_000_000 };
const stormConnectionLimits = { maxConnectionsPerSource: defaultConnectionLimits.maxConnections };

/** The bootstrap server `spec` describes: here, or on `spec.workers` workers sharing its port and limits. */
async function startServer(spec: ServerSpec): Promise<RunningServer> {
  if (spec.workers <= 1) {
    const { boot, release } = await startBootstrap(spec, '127.0.0.1:0');
    return {
      url: boot.server.url,
      pids: [],
      eventLoop: async () => performance.eventLoopUtilization(),
      close: () => boot.close().then(release),
    };
  }
  const ca = caFromPem(spec.ca.cert, parsePrivateKeyPem(spec.ca.key));
  const registry = new Registry();
  // The guard's Node watch is the primary's, as in `run`: the workers ask it.
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromString(spec.kubeconfig);
  const nodes = nodePresenceView(nodeInformer(reuseConnections(kubeConfig), { registry }));
  nodes.start();
  const workers = await startServingWorkers({
    registry,
    count: spec.workers,
    entry: import.meta.url,
    spec,
    // The serving certificate every worker presents, made by the server process.
    tls: servingCertificate(ca, { name: 'storm', ipAddresses: ['127.0.0.1'] }),
    listen: '127.0.0.1:0',
    limits: stormConnectionLimits,
    rateLimit: stormRateLimit,
    nodePresence: presenceOf(nodes),
  });
  while (!watchIsCurrent(nodes)) await new Promise((resolve) => setTimeout(resolve, 10));
  return {
    url: workers.url,
    pids: workers.pids(),
    eventLoop: async () => {
      // The workers' loops, summed by the primary's scrape (stormLoopGauges).
      const text = await registry.metrics();
      const read = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
      return { idle: read('storm_loop_idle_ms'), active: read('storm_loop_active_ms') };
    },
    close: () => workers.close().then(() => nodes.stop()),
  };
}

/** A worker's server (the entry src/bootstrap/workers.ts forks): the storm's server on the shared port. */
async function serveStormWorker(spec: unknown, services: WorkerServices): Promise<WorkerServer> {
  stormLoopGauges(services.registry);
  const { boot, release } = await startBootstrap(spec as ServerSpec, services.listen, services);
  return {
    address: boot.server.address,
    setSecureContext: (tls) => boot.server.setSecureContext(tls),
    close: () => boot.close().then(release),
  };
}

/** A worker's event loop so far, as gauges its primary's scrape sums over the workers. */
function stormLoopGauges(registry: Registry): void {
  for (const part of ['idle', 'active'] as const) {
    new Gauge({
      name: `storm_loop_${part}_ms`,
      help: `ms the worker's event loop was ${part}`,
      registers: [registry],
      collect() {
        this.set(performance.eventLoopUtilization()[part]);
      },
    });
  }
}

async function startBootstrap(
  spec: ServerSpec,
  listen: string,
  services?: WorkerServices,
): Promise<{ boot: RunningBootstrap; release(): void }> {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromString(spec.kubeconfig);
  reuseConnections(kubeConfig);
  const { policies, release } = await policiesOf(spec);
  const boot = await startBootstrapServer(config, {
    kubeConfig,
    policies,
    ca: caFromPem(spec.ca.cert, parsePrivateKeyPem(spec.ca.key)),
    listen,
    serverNames: { ipAddresses: ['127.0.0.1'] },
    tls: services?.tls,
    shared: services && {
      limiter: services.limiter,
      gate: services.gate,
      reusePort: services.reusePort,
      nodePresence: services.nodePresence,
    },
    rateLimit: stormRateLimit,
    connectionLimits: stormConnectionLimits,
    registry: services?.registry ?? new Registry(),
  });
  // Storms start once the server is ready and its impersonation guard answers from its Node watch
  // (from the moment the API server accepts it; before that, every guard lookup reads the Node); a
  // worker's guard asks the primary's watch, which startServer waits for.
  while (!boot.queue.hasSynced() || !(services || boot.guardPresence?.('any-node').current)) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return { boot, release };
}

const clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/** User + system CPU seconds a process has used (Linux /proc). */
export function cpuSecondsOf(pid: number): number {
  // Fields after the parenthesised command name: state is 3rd, utime the 14th and stime the 15th.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / clockTicks;
}

/** User + system CPU seconds of this process (the clients and simulators). */
export function ownCpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

/** Resolves once `child` has exited. */
export function exited(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
}

/** Asks the server process how busy its event loop has been; rejects if it died. */
function eventLoopOf(child: ChildProcess): Promise<{ idle: number; active: number }> {
  return new Promise((resolve, reject) => {
    const answer = (message: FromServer) => {
      if (message.type !== 'loop') return;
      child.off('message', answer).off('exit', gone);
      resolve(message);
    };
    // A server that died must fail the storm, not leave it waiting for an answer.
    const gone = () => {
      child.off('message', answer);
      reject(new Error('the server process exited'));
    };
    if (!child.connected) return gone();
    child.on('message', answer).once('exit', gone);
    child.send({ type: 'loop' } satisfies ToServer);
  });
}

/**
 * Forks `moduleUrl` as a server process with an IPC channel and the OpenSSL settings the image and
 * `npm start` run with (deploy/openssl.cnf: no session tickets), whatever this process was given.
 */
export function forkWithImageOpenssl(moduleUrl: string): ChildProcess {
  return fork(new URL(moduleUrl).pathname, [], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    execArgv: [
      ...process.execArgv.filter((arg) => !arg.startsWith('--openssl-config')),
      `--openssl-config=${opensslConfig}`,
    ],
  });
}

/** Forks the server process, starts the server `spec` describes in it, and resolves once it serves. */
export async function startServerProcess(spec: ServerSpec): Promise<ServerProcess> {
  const child = forkWithImageOpenssl(import.meta.url);
  const reply = await new Promise<FromServer>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the server process exited with ${code}`)));
    child.once('message', resolve);
    child.send({ type: 'start', spec } satisfies ToServer);
  });
  if (reply.type !== 'ready') {
    child.kill();
    throw new Error(
      `the server process could not start: ${reply.type === 'failed' ? reply.error : reply.type}`,
    );
  }
  const pids = [child.pid as number, ...reply.pids];
  return {
    url: reply.url,
    // The server process and its workers: every process that serves.
    cpuSeconds: () => pids.reduce((sum, pid) => sum + cpuSecondsOf(pid), 0),
    // The serving loops: the server process's, or its workers' summed.
    eventLoop: () => eventLoopOf(child),
    stop: async () => {
      child.send({ type: 'exit' } satisfies ToServer);
      await exited(child);
    },
  };
}

// Forked by the benchmark as its server process, or by that process as one of its serving workers.
if (import.meta.main) {
  if (isServingWorker()) runWorker(serveStormWorker);
  else serveChild();
}
