/**
 * Benchmark: N idle connections (default 20,000) that never send a byte, held against the real
 * bootstrap server in a process of its own, from S loopback source addresses (default 100). Prints
 * the server's resident memory and open file descriptors (Linux /proc/<pid>/status and /fd) before
 * the crowd, while it holds on, and after it has gone; how many connections the server held; and
 * whether, while the crowd held on, the process still did what keeps a controller alive: answer
 * `/healthz` on its operations port (the kubelet's probe), and call the API server (the leader's
 * lease renewal). It also tries a new node's GET /healthz on the bootstrap port from another address.
 *
 * Run it twice to compare: with the product's connection caps and timeouts (the default), and with
 * `--uncapped` (caps out of reach, idle and handshake timeouts of 120 s, Node's own handshake
 * timeout). The clients hold their sockets in child processes of their own (at most 5,000 each), so
 * no process of the benchmark needs more open files than `ulimit -n` allows; the server process
 * inherits that limit, which the report prints.
 *
 *   node bench/idle-connections.ts [--connections N] [--sources S] [--uncapped]
 */
import { type ChildProcess, execFileSync, fork } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { type RequestOptions, request } from 'node:https';
import { connect, type Socket } from 'node:net';
import { parseArgs } from 'node:util';
import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { type RunningBootstrap, startBootstrapServer } from '../src/cli/bootstrap-server.ts';
import { parseConfig } from '../src/config/loader.ts';
import { type ConnectionLimits, defaultConnectionLimits, openFileLimit } from '../src/net/hardened-server.ts';
import { bundlePem, caFromPem, createCa } from '../src/pki/ca.ts';
import { parsePrivateKeyPem, privateKeyPem } from '../src/pki/keys.ts';
import { type OpsServer, startOpsServer } from '../src/runtime/ops-server.ts';
import { startApiServer } from '../src/sim/apiserver/index.ts';

const opensslConfig = new URL('../deploy/openssl.cnf', import.meta.url).pathname;
const script = new URL(import.meta.url).pathname;
/** Sockets one client process holds at most. */
const perClient = 5_000;
/** How soon a client opens a connection again after the server closed or refused it. */
const reopenMs = 2_000;

/** The caps and timeouts of an `--uncapped` run: out of reach, and Node's 120 s handshake timeout. */
const uncapped: Partial<ConnectionLimits> = {
  maxConnections: 1_000_000,
  maxConnectionsPerSource: 1_000_000,
  handshakeTimeout: 120_000,
  keepAliveTimeout: 120_000,
};

/** What the server process is started with. */
interface ServerSpec {
  kubeconfig: string;
  ca: { cert: string; key: string };
  limits: Partial<ConnectionLimits>;
}

type ToServer =
  | { type: 'start'; spec: ServerSpec }
  /** The server's figures; with `collect`, after a full garbage collection. */
  | { type: 'status'; collect?: boolean }
  | { type: 'call-api' };
type FromServer =
  | { type: 'ready'; url: string; opsUrl: string }
  | { type: 'failed'; error: string }
  /** Its open connections, and its JavaScript heap in MiB. */
  | { type: 'status'; open: number; heapMiB: number }
  /** The outcome of a call to the API server from the server process. */
  | { type: 'call-api'; outcome: string };

type ToClient = { type: 'hold'; port: number; count: number; sources: string[] } | { type: 'release' };
type FromClient = { type: 'held'; opened: number } | { type: 'released' };

/** The server process at one moment: resident memory and open files (Linux /proc), its heap and connections. */
export interface ProcessFigures {
  rssMiB: number;
  fds: number;
  /** The JavaScript heap, part of the resident memory. */
  heapMiB: number;
  /** The server's own count of its open connections. */
  connections: number;
}

async function figuresOf(server: ChildProcess, collect = false): Promise<ProcessFigures> {
  const pid = server.pid as number;
  const reply = await ask<FromServer>(server, { type: 'status', collect } satisfies ToServer, 'status');
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rssKiB = Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1]);
  const fds = readdirSync(`/proc/${pid}/fd`).length;
  const { open, heapMiB } = reply as Extract<FromServer, { type: 'status' }>;
  return { rssMiB: rssKiB / 1024, fds, heapMiB, connections: open };
}

/** The figures of a run. */
export interface IdleConnectionsResult {
  connections: number;
  sources: number;
  capped: boolean;
  limits: Partial<ConnectionLimits>;
  /** `ulimit -n` of the benchmark, which the server process inherits. */
  openFileLimit: number | undefined;
  before: ProcessFigures;
  while: ProcessFigures;
  after: ProcessFigures;
  /** Right after "after", once the server's JavaScript heap has been collected in full. */
  collected: ProcessFigures;
  /** Connections the clients opened to place the crowd, replacements of closed ones included. */
  attempts: number;
  /** The server's count of its open connections once the clients had closed theirs. */
  connectionsAfter: number;
  /** How long after that "after" was measured. */
  settleMs: number;
  /** A new node's GET /healthz on the bootstrap port from another address while the crowd held on. */
  healthzWhile: string;
  /** The kubelet's GET /healthz on the operations port while the crowd held on: its status or error. */
  opsHealthzWhile: string;
  /** A call from the server process to the API server while the crowd held on, as a lease renewal. */
  apiCallWhile: string;
  /** Whether the server process was still running at the end. */
  serverAlive: boolean;
}

/**
 * GETs the Lease list from the API server over a new connection, as a lease renewal does after a
 * pooled connection was dropped: `200`, or why it failed (within 5 s).
 */
async function callApiServer(kubeConfig: KubeConfig): Promise<string> {
  const options: RequestOptions = { agent: false };
  await kubeConfig.applyToHTTPSOptions(options);
  const url = `${kubeConfig.getCurrentCluster()?.server}/apis/coordination.k8s.io/v1/leases?limit=1`;
  return new Promise((resolve) => {
    const req = request(url, options, (res) => {
      res.resume();
      res.on('end', () => resolve(String(res.statusCode)));
    });
    req.setTimeout(5_000, () => req.destroy(new Error('no answer within 5 s')));
    req.on('error', (err: NodeJS.ErrnoException) => resolve(`failed: ${err.code ?? err.message}`));
    req.end();
  });
}

/**
 * A full collection of the server process's heap, to show what of its memory after the crowd is
 * garbage not yet collected (V8 collects when the process allocates again) and what is held.
 */
function collectGarbage(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}

/** The server process: the bootstrap and operations servers; answers counts and API calls. */
async function serveChild(): Promise<void> {
  let boot: RunningBootstrap | undefined;
  let ops: OpsServer | undefined;
  let kubeConfig: KubeConfig | undefined;
  process.on('disconnect', () => process.exit(0));
  process.on('message', (message: ToServer) => {
    if (message.type === 'status') {
      if (message.collect) collectGarbage();
      process.send?.({
        type: 'status',
        open: boot?.server.openConnections() ?? 0,
        // Not process.memoryUsage(): it opens a file, which a process out of descriptors cannot.
        heapMiB: getHeapStatistics().total_heap_size / 2 ** 20,
      } satisfies FromServer);
      return;
    }
    if (message.type === 'call-api') {
      void callApiServer(kubeConfig as KubeConfig).then((outcome) =>
        process.send?.({ type: 'call-api', outcome } satisfies FromServer),
      );
      return;
    }
    const { spec } = message;
    kubeConfig = new KubeConfig();
    kubeConfig.loadFromString(spec.kubeconfig);
    const registry = new Registry();
    const started = Promise.all([
      startBootstrapServer(parseConfig({ clusterName: 'idle.example.com', cloud: 'metal', server: {} }), {
        kubeConfig,
        policies: [],
        ca: caFromPem(spec.ca.cert, parsePrivateKeyPem(spec.ca.key)),
        listen: '127.0.0.1:0',
        serverNames: { ipAddresses: ['127.0.0.1'] },
        connectionLimits: spec.limits,
        registry,
      }),
      startOpsServer({ listen: '127.0.0.1:0', registry, readinessChecks: () => [] }),
    ]);
    started.then(
      ([bootstrap, operations]) => {
        boot = bootstrap;
        ops = operations;
        process.send?.({ type: 'ready', url: boot.server.url, opsUrl: ops.url } satisfies FromServer);
      },
      (err: Error) =>
        process.send?.({ type: 'failed', error: err.stack ?? err.message } satisfies FromServer),
    );
  });
}

/**
 * Idle connections kept up as an attacker keeps them: `count` of them, spread over `sources`, none
 * ever sending a byte; each one that closes (refused, or timed out by the server) is opened again
 * after `reopenMs`, until {@link SustainedCrowd.release}.
 */
class SustainedCrowd {
  readonly #open = new Set<Socket>();
  #released = false;
  /** Connections opened, first ones and replacements. */
  opened = 0;

  readonly #port: number;
  readonly #reopenMs: number;

  constructor(port: number, reopenMs: number) {
    this.#port = port;
    this.#reopenMs = reopenMs;
  }

  /** Opens a connection from `source`; resolves once it has connected or failed. */
  #connect(source: string): Promise<void> {
    this.opened++;
    const socket = connect({ port: this.#port, host: '127.0.0.1', localAddress: source });
    this.#open.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => {
      this.#open.delete(socket);
      const reopen = () => {
        if (!this.#released) void this.#connect(source);
      };
      if (!this.#released) setTimeout(reopen, this.#reopenMs).unref();
    });
    return new Promise((resolve) => {
      socket.once('connect', () => resolve());
      socket.once('close', () => resolve());
    });
  }

  /** Opens the first `count` connections, in slices that do not overflow the listen backlog. */
  async fill(count: number, sources: readonly string[]): Promise<void> {
    for (let first = 0; first < count; first += 250) {
      const slice = Math.min(250, count - first);
      await Promise.all(
        Array.from({ length: slice }, (_, i) =>
          this.#connect(sources[(first + i) % sources.length] as string),
        ),
      );
    }
  }

  /** Stops reopening and closes every connection. */
  async release(): Promise<void> {
    this.#released = true;
    await Promise.all(
      [...this.#open].map(
        (socket) =>
          new Promise<void>((resolve) => {
            socket.once('close', () => resolve());
            socket.destroy();
          }),
      ),
    );
  }
}

/** A client process: keeps its share of the crowd up until told to release it. */
async function holdChild(): Promise<void> {
  let crowd: SustainedCrowd | undefined;
  process.on('disconnect', () => process.exit(0));
  process.on('message', async (message: ToClient) => {
    if (message.type === 'release') {
      await crowd?.release();
      process.send?.({ type: 'released' } satisfies FromClient);
      return;
    }
    crowd = new SustainedCrowd(message.port, reopenMs);
    await crowd.fill(message.count, message.sources);
    process.send?.({ type: 'held', opened: crowd.opened } satisfies FromClient);
  });
}

/** Sends `message` to `child` and resolves with its next answer of type `type`. */
function ask<T extends { type: string }>(child: ChildProcess, message: unknown, type: T['type']): Promise<T> {
  return new Promise((resolve, reject) => {
    const answer = (reply: T) => {
      if (reply.type !== type) return;
      child.off('message', answer).off('exit', gone);
      resolve(reply);
    };
    const gone = () => {
      child.off('message', answer);
      reject(new Error(`the ${script} child exited`));
    };
    if (!child.connected) return gone();
    child.on('message', answer).once('exit', gone);
    child.send(message as object);
  });
}

/** GET /healthz over a new connection from 127.0.0.2: the status, or the error, within 5 s. */
function healthzFrom(url: string, caPem: string): Promise<string> {
  const get = url.startsWith('https:') ? request : httpRequest;
  return new Promise((resolve) => {
    const req = get(`${url}/healthz`, { ca: caPem, agent: false, localAddress: '127.0.0.2' }, (res) => {
      res.resume();
      res.on('end', () => resolve(String(res.statusCode)));
    });
    req.setTimeout(5_000, () => req.destroy(new Error('no answer within 5 s')));
    req.on('error', (err: NodeJS.ErrnoException) => resolve(`failed: ${err.code ?? err.message}`));
    req.end();
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs the benchmark. */
export async function runIdleConnections(options: {
  connections: number;
  sources: number;
  capped: boolean;
  /** How long after the crowd is placed the figures are taken "while" (default 7 s: past the idle timeout). */
  holdMs?: number;
  /** How long after the crowd has gone the figures are taken "after" (default 30 s). */
  settleMs?: number;
}): Promise<IdleConnectionsResult> {
  const sim = await startApiServer();
  const ca = createCa();
  const limits = options.capped ? {} : uncapped;
  const server = fork(script, ['--serve'], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    execArgv: [`--openssl-config=${opensslConfig}`],
  });
  const clients: ChildProcess[] = [];
  try {
    const ready = await ask<FromServer>(
      server,
      {
        type: 'start',
        spec: {
          kubeconfig: sim.kubeconfig(),
          ca: { cert: bundlePem(ca), key: privateKeyPem(ca.signer.key) },
          limits,
        },
      } satisfies ToServer,
      'ready',
    );
    if (ready.type !== 'ready') throw new Error(`the server did not start: ${JSON.stringify(ready)}`);
    const url = ready.url;
    const port = Number(new URL(url).port);
    await sleep(1_000);
    const before = await figuresOf(server);

    const sources = Array.from(
      { length: options.sources },
      (_, i) => `127.0.${10 + Math.floor(i / 250)}.${(i % 250) + 1}`,
    );
    const clientCount = Math.ceil(options.connections / perClient);
    const holds: Promise<FromClient>[] = [];
    for (let index = 0; index < clientCount; index++) {
      const count = Math.min(perClient, options.connections - index * perClient);
      const client = fork(script, ['--hold'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      clients.push(client);
      // Every client goes round all the sources, so each source sees the same number of attempts.
      holds.push(ask<FromClient>(client, { type: 'hold', port, count, sources } satisfies ToClient, 'held'));
    }
    const held = (await Promise.all(holds)) as Extract<FromClient, { type: 'held' }>[];
    // Past the idle timeout: the server has closed the first connections and the clients have
    // replaced them, as an attacker keeps a crowd up.
    await sleep(options.holdMs ?? 7_000);
    const during = await figuresOf(server);
    const healthzWhile = await healthzFrom(url, bundlePem(ca));
    const opsHealthzWhile = await healthzFrom(ready.opsUrl, '');
    const apiCall = await ask<FromServer>(server, { type: 'call-api' } satisfies ToServer, 'call-api');

    await Promise.all(clients.map((client) => ask<FromClient>(client, { type: 'release' }, 'released')));
    let gone = await figuresOf(server);
    for (let waited = 0; waited < 30_000 && gone.connections > 0; waited += 250) {
      await sleep(250);
      gone = await figuresOf(server);
    }
    // What the server no longer uses goes back as its collector and allocator get to it.
    await sleep(options.settleMs ?? 30_000);
    const after = await figuresOf(server);
    const collected = await figuresOf(server, true);
    return {
      connections: options.connections,
      sources: options.sources,
      capped: options.capped,
      limits: options.capped ? defaultConnectionLimits : { ...defaultConnectionLimits, ...uncapped },
      openFileLimit: openFileLimit(),
      before,
      while: during,
      after,
      collected,
      attempts: held.reduce((sum, h) => sum + h.opened, 0),
      connectionsAfter: gone.connections,
      settleMs: options.settleMs ?? 30_000,
      healthzWhile,
      opsHealthzWhile,
      apiCallWhile: (apiCall as Extract<FromServer, { type: 'call-api' }>).outcome,
      serverAlive: server.exitCode === null && server.signalCode === null,
    };
  } finally {
    for (const client of clients) client.kill();
    server.kill();
    await sim.close();
  }
}

/** The report. */
export function formatIdleConnections(result: IdleConnectionsResult): string {
  const figures = (name: string, f: ProcessFigures) =>
    `${name.padEnd(7)} rss=${f.rssMiB.toFixed(1)} MiB (heap ${f.heapMiB.toFixed(1)} MiB)  fds=${f.fds}  ` +
    `connections=${f.connections}`;
  const { limits } = result;
  return [
    `${result.connections} idle connections from ${result.sources} address(es), each reopened 2 s after ` +
      'the server closes it; ' +
      (result.capped
        ? `caps: ${limits.maxConnections} in all, ${limits.maxConnectionsPerSource} per address; ` +
          `idle timeout ${limits.keepAliveTimeout} ms`
        : `uncapped; idle and handshake timeouts ${limits.handshakeTimeout} ms`) +
      `; ulimit -n ${result.openFileLimit ?? 'unknown'}`,
    figures('before', result.before),
    figures('while', result.while),
    figures('after', result.after),
    figures('gc', result.collected),
    `${result.attempts} connections opened to place the crowd; ${result.connectionsAfter} open at the ` +
      `server once the clients closed theirs; "after" is ${result.settleMs / 1000} s later, ` +
      '"gc" right after a full collection of the server\'s heap (the benchmark asks for it; the product never does)',
    `while the crowd held on: the kubelet's GET /healthz on the operations port ${result.opsHealthzWhile}, ` +
      `a call to the API server (a lease renewal) ${result.apiCallWhile}, ` +
      `a new node's GET /healthz on the bootstrap port ${result.healthzWhile}`,
    `server process ${result.serverAlive ? 'still running' : 'DIED'} at the end`,
  ].join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      connections: { type: 'string', default: '20000' },
      sources: { type: 'string', default: '100' },
      uncapped: { type: 'boolean', default: false },
      serve: { type: 'boolean', default: false },
      hold: { type: 'boolean', default: false },
    },
  });
  if (values.serve) await serveChild();
  else if (values.hold) await holdChild();
  else {
    const connections = Number(values.connections);
    const sources = Number(values.sources);
    if (!Number.isInteger(connections) || connections < 1)
      throw new Error(`--connections must be a positive integer, got ${values.connections}`);
    if (!Number.isInteger(sources) || sources < 1 || sources > 5_000)
      throw new Error(`--sources must be an integer from 1 to 5000, got ${values.sources}`);
    process.stdout.write(`machine: ${execFileSync('nproc', { encoding: 'utf8' }).trim()} cores\n`);
    const result = await runIdleConnections({ connections, sources, capped: !values.uncapped });
    process.stdout.write(`${formatIdleConnections(result)}\n`);
  }
}
