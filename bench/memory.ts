/**
 * Benchmark: does the bootstrap server's memory come back? N certificate requests (default 200,000)
 * over keep-alive HTTPS to the real bootstrap server in a process of its own (`insecure-always-approve`,
 * the simulated API server behind it), with `--names` distinct node names taken in turn (default: a
 * new name for every request, the worst case for anything kept per node). Reports the server's
 * resident memory (RSS) every 20,000 requests, then every 5 s while it idles 30 s, and after a full
 * collection; and the JavaScript heap it retains (after a full collection) after the first 10,000
 * and at the end. The target: RSS after settling within 50 MiB of RSS after the first 10,000. It runs
 * twice in the same run: with the malloc settings the image sets (deploy/Containerfile's `ENV
 * MALLOC_*`, read from that file), and with glibc's defaults, to show what they change. Then what an
 * idle TLS connection and a request waiting in the approval
 * queue cost. With `--snapshots DIR` it also writes heap snapshots of the server's main thread after
 * 10,000 requests and at the end, and prints the constructors whose objects grew most between them.
 *
 *   node bench/memory.ts [--requests N] [--names K] [--concurrency C] [--snapshots DIR]
 */
import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { connect as netConnect } from 'node:net';
import { join } from 'node:path';
import { type TLSSocket, connect as tlsConnect } from 'node:tls';
import { parseArgs } from 'node:util';
import { getHeapStatistics, setFlagsFromString, writeHeapSnapshot } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { insecureAlwaysApprovePolicy } from '../src/bootstrap/policies/insecure-always-approve.ts';
import { queuePolicy } from '../src/bootstrap/policies/queue.ts';
import { type RunningBootstrap, startBootstrapServer } from '../src/cli/bootstrap-server.ts';
import { parseConfig } from '../src/config/loader.ts';
import { reuseConnections } from '../src/kube/connection-reuse.ts';
import { bundlePem, caFromPem, createCa } from '../src/pki/ca.ts';
import { buildCsrPem } from '../src/pki/csr-build.ts';
import { generateKey, parsePrivateKeyPem, privateKeyPem } from '../src/pki/keys.ts';
import { nativeApiVersion } from '../src/protocol/bootstrap-api.ts';
import { startApiServer } from '../src/sim/apiserver/index.ts';

const clusterName = 'memory.example.com';
const opensslConfig = new URL('../deploy/openssl.cnf', import.meta.url).pathname;

type ServerMode = 'insecure-always-approve' | 'queue';
interface ServerSpec {
  mode: ServerMode;
  kubeconfig: string;
  ca: { cert: string; key: string };
}
type ToServer =
  | { type: 'start'; spec: ServerSpec }
  | { type: 'status'; collect?: boolean }
  | { type: 'snapshot'; dir: string };
type FromServer =
  | { type: 'ready'; url: string }
  | { type: 'failed'; error: string }
  | { type: 'status'; heapUsedMiB: number; connections: number }
  | { type: 'snapshot'; file: string };

/** The server process at one moment. */
export interface MemoryFigures {
  rssMiB: number;
  heapUsedMiB: number;
}

/** One run of the requests against one server process. */
export interface MemoryRun {
  /** The server's malloc settings. */
  allocator: Allocator;
  requests: number;
  names: number;
  concurrency: number;
  failures: number;
  /** Requests before the early figures: 10,000, or fewer when the run is shorter. */
  earlyAt: number;
  early: MemoryFigures;
  /** The heap right after that, once collected in full: what the server retains. */
  earlyRetainedHeapMiB: number;
  end: MemoryFigures;
  /** After idling 30 s. */
  settled: MemoryFigures;
  /** Right after that, once the server's heap was collected in full. */
  collected: MemoryFigures;
  /** RSS every 5 s while idle after the requests, in MiB. */
  settling: number[];
  /** RSS and heap every 20,000 requests (no collection asked for): a plateau is a bound. */
  samples: ({ requests: number } & MemoryFigures)[];
  /** The constructors whose objects grew most between the two snapshots (with `snapshots`). */
  growth?: { name: string; count: number; bytes: number }[];
}

/** What one idle connection and one queued request cost the server. */
export interface ConnectionCosts {
  /** One idle TLS connection (handshake done, nothing sent): RSS, in KiB. */
  idleConnectionKiB: number;
  /** The same, of its JavaScript heap. */
  idleConnectionHeapKiB: number;
  /** One request waiting in the approval queue: the heap, in KiB. */
  queuedRequestKiB: number;
}

function collectGarbage(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}

/** The server process: a bootstrap server as the spec says; answers status and snapshot requests. */
async function serveChild(): Promise<void> {
  let boot: RunningBootstrap | undefined;
  process.on('disconnect', () => process.exit(0));
  process.on('message', (message: ToServer) => {
    if (message.type === 'status') {
      if (message.collect) collectGarbage();
      process.send?.({
        type: 'status',
        heapUsedMiB: getHeapStatistics().used_heap_size / 2 ** 20,
        connections: boot?.server.openConnections() ?? 0,
      } satisfies FromServer);
      return;
    }
    if (message.type === 'snapshot') {
      const file = writeHeapSnapshot(join(message.dir, `server-${Date.now()}.heapsnapshot`));
      process.send?.({ type: 'snapshot', file } satisfies FromServer);
      return;
    }
    const { spec } = message;
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromString(spec.kubeconfig);
    reuseConnections(kubeConfig);
    startBootstrapServer(parseConfig({ clusterName, cloud: 'metal', server: {} }), {
      kubeConfig,
      policies: [spec.mode === 'queue' ? queuePolicy() : insecureAlwaysApprovePolicy()],
      ca: caFromPem(spec.ca.cert, parsePrivateKeyPem(spec.ca.key)),
      listen: '127.0.0.1:0',
      serverNames: { ipAddresses: ['127.0.0.1'] },
      // Every request comes from 127.0.0.1; the per-source limit is not what is measured.
      rateLimit: { burst: 1_000_000, ratePerSecond: 1_000_000 },
      registry: new Registry(),
    }).then(
      (started) => {
        boot = started;
        process.send?.({ type: 'ready', url: started.server.url } satisfies FromServer);
      },
      (err: Error) =>
        process.send?.({ type: 'failed', error: err.stack ?? err.message } satisfies FromServer),
    );
  });
}

function ask<T extends FromServer['type']>(
  child: ChildProcess,
  message: ToServer,
  type: T,
): Promise<Extract<FromServer, { type: T }>> {
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null) => reject(new Error(`the server process exited (${code})`));
    const onMessage = (reply: FromServer) => {
      if (reply.type === 'failed') reject(new Error(reply.error));
      if (reply.type !== type) return;
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(reply as Extract<FromServer, { type: T }>);
    };
    child.on('message', onMessage);
    child.once('exit', onExit);
    child.send(message);
  });
}

async function figuresOf(child: ChildProcess, collect = false): Promise<MemoryFigures> {
  const { heapUsedMiB } = await ask(child, { type: 'status', collect }, 'status');
  const rssKiB = Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1]);
  return { rssMiB: rssKiB / 1024, heapUsedMiB };
}

/** The server's malloc settings: those the image sets, or glibc's defaults. */
export type Allocator = 'image settings' | 'glibc defaults';

/** The `MALLOC_*` variables deploy/Containerfile sets (`ENV NAME=value …` lines). */
export function imageMallocSettings(): Record<string, string> {
  const containerfile = readFileSync(new URL('../deploy/Containerfile', import.meta.url), 'utf8');
  const settings: Record<string, string> = {};
  for (const line of containerfile.split('\n').filter((l) => l.startsWith('ENV '))) {
    for (const [, name, value] of line.matchAll(/\b(MALLOC_\w+)=(\S+)/g))
      settings[name as string] = value as string;
  }
  return settings;
}

async function startServerProcess(
  spec: ServerSpec,
  allocator: Allocator,
): Promise<{ child: ChildProcess; url: string }> {
  const env = { ...process.env };
  for (const name of Object.keys(env)) if (name.startsWith('MALLOC_')) delete env[name];
  if (allocator === 'image settings') Object.assign(env, imageMallocSettings());
  const child = fork(new URL(import.meta.url).pathname, ['--serve'], {
    env,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    execArgv: [
      ...process.execArgv.filter((a) => !a.startsWith('--openssl-config')),
      `--openssl-config=${opensslConfig}`,
    ],
  });
  const { url } = await ask(child, { type: 'start', spec }, 'ready');
  return { child, url };
}

async function stopServerProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill();
  await exited;
}

/**
 * Loopback source addresses, `perSource` uses each: the server caps connections and pending requests
 * per address, so a measurement of many spreads them as many nodes would come.
 */
function sources(count: number, perSource: number): string[] {
  return Array.from(
    { length: Math.ceil(count / perSource) },
    (_, i) => `127.0.${20 + (i >> 8)}.${(i & 255) + 1}`,
  );
}

/** One node's request body: a kubelet client CSR for `system:node:<name>` (one key for all). */
function bodyOf(name: string, key: ReturnType<typeof generateKey>): string {
  const csr = buildCsrPem(key, {
    subject: { commonName: `system:node:${name}`, organizations: ['system:nodes'] },
  });
  return JSON.stringify({ apiVersion: nativeApiVersion, certificateSigningRequests: { kubelet: csr } });
}

function post(
  url: string,
  body: string,
  caPem: string,
  agent: Agent | false,
  localAddress?: string,
): Promise<number> {
  return new Promise((resolve) => {
    const req = request(
      `${url}/v1/certificates`,
      {
        method: 'POST',
        agent,
        ca: caPem,
        headers: { 'content-type': 'application/json' },
        ...(localAddress ? { localAddress } : {}),
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', () => resolve(0));
      },
    );
    req.on('error', () => resolve(0));
    req.end(body);
  });
}

/** Sends requests `from` to `to` (exclusive), `concurrency` at a time; returns the failures. */
async function send(
  url: string,
  caPem: string,
  agent: Agent,
  body: (i: number) => string,
  from: number,
  to: number,
  concurrency: number,
): Promise<number> {
  let next = from;
  let failures = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < to) {
        const status = await post(url, body(next++), caPem, agent);
        if (status !== 200) failures++;
      }
    }),
  );
  return failures;
}

/**
 * Opens `count` TLS connections to the server that complete the handshake and then stay silent, from
 * as many loopback addresses as the per-address cap needs, all at once (the server closes an idle one
 * after 5 s, so they are measured as soon as they are open).
 */
function openIdle(url: string, caPem: string, count: number): Promise<TLSSocket[]> {
  const { hostname, port } = new URL(url);
  const from = sources(count, 50);
  return Promise.all(
    Array.from(
      { length: count },
      (_, i) =>
        new Promise<TLSSocket>((resolve, reject) => {
          const tcp = netConnect({ host: hostname, port: Number(port), localAddress: from[i % from.length] });
          const socket = tlsConnect({ socket: tcp, host: hostname, ca: caPem }, () => resolve(socket));
          socket.once('error', reject);
        }),
    ),
  );
}

/** The growth between two heap snapshots, by constructor: objects and self size, largest first. */
function growthBetween(before: string, after: string): { name: string; count: number; bytes: number }[] {
  const totals = (file: string) => {
    const snapshot = JSON.parse(readFileSync(file, 'utf8')) as {
      snapshot: { meta: { node_fields: string[]; node_types: [string[]] } };
      nodes: number[];
      strings: string[];
    };
    const fields = snapshot.snapshot.meta.node_fields;
    const width = fields.length;
    const [typeAt, nameAt, sizeAt] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f)) as [
      number,
      number,
      number,
    ];
    const types = snapshot.snapshot.meta.node_types[0];
    const byName = new Map<string, { count: number; bytes: number }>();
    for (let i = 0; i < snapshot.nodes.length; i += width) {
      const type = types[snapshot.nodes[i + typeAt] as number];
      const name =
        type === 'object' || type === 'closure'
          ? (snapshot.strings[snapshot.nodes[i + nameAt] as number] as string)
          : `(${type})`;
      const entry = byName.get(name) ?? { count: 0, bytes: 0 };
      entry.count++;
      entry.bytes += snapshot.nodes[i + sizeAt] as number;
      byName.set(name, entry);
    }
    return byName;
  };
  const [a, b] = [totals(before), totals(after)];
  return [...b]
    .map(([name, t]) => ({
      name,
      count: t.count - (a.get(name)?.count ?? 0),
      bytes: t.bytes - (a.get(name)?.bytes ?? 0),
    }))
    .sort((x, y) => y.bytes - x.bytes)
    .slice(0, 12);
}

/** Requests between two samples of the server's memory. */
const sampleEvery = 20_000;
/** Time between two samples while the server idles. */
const settleStepMs = 5_000;

/** A CA, the simulated API server, and the spec of a server process using them. */
async function testbed() {
  const ca = createCa({ algorithm: 'ecdsa-p256' });
  const api = await startApiServer();
  return {
    caPem: bundlePem(ca),
    key: generateKey('ecdsa-p256'),
    spec: (mode: ServerMode): ServerSpec => ({
      mode,
      kubeconfig: api.kubeConfig().exportConfig(),
      ca: { cert: bundlePem(ca), key: privateKeyPem(ca.signer.key) },
    }),
    close: () => api.close(),
  };
}

/** Sends the requests to one server process and takes its figures. */
export async function runMemory(options: {
  requests: number;
  names?: number;
  concurrency?: number;
  /** Default: the image's settings. */
  allocator?: Allocator;
  snapshots?: string;
  settleMs?: number;
  earlyAt?: number;
}): Promise<MemoryRun> {
  const names = options.names ?? options.requests;
  const concurrency = options.concurrency ?? 32;
  const bed = await testbed();
  // Bodies for up to 50,000 names are made before the clock starts; more names reuse them.
  const bodies = Array.from({ length: Math.min(names, 50_000) }, (_, i) => bodyOf(`node-${i}`, bed.key));
  const bodyAt = (i: number) => bodies[(i % names) % bodies.length] as string;
  const allocator = options.allocator ?? 'image settings';
  const { child, url } = await startServerProcess(bed.spec('insecure-always-approve'), allocator);
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const snapshot = async () =>
    options.snapshots
      ? (await ask(child, { type: 'snapshot', dir: options.snapshots }, 'snapshot')).file
      : undefined;
  try {
    const earlyAt = Math.min(options.earlyAt ?? 10_000, options.requests);
    let failures = await send(url, bed.caPem, agent, bodyAt, 0, earlyAt, concurrency);
    const early = await figuresOf(child);
    const earlyRetainedHeapMiB = (await figuresOf(child, true)).heapUsedMiB;
    const first = await snapshot();
    const samples: MemoryRun['samples'] = [{ requests: earlyAt, ...early }];
    for (let done = earlyAt; done < options.requests; ) {
      const next = Math.min(options.requests, done + sampleEvery);
      failures += await send(url, bed.caPem, agent, bodyAt, done, next, concurrency);
      samples.push({ requests: next, ...(await figuresOf(child)) });
      done = next;
    }
    const end = await figuresOf(child);
    const last = await snapshot();
    agent.destroy();
    // Idle, as a controller between storms: V8 and the allocator give memory back on their own
    // schedule, so the RSS is sampled while it settles.
    const settling: number[] = [];
    const settleMs = options.settleMs ?? 30_000;
    for (let waited = 0; waited < settleMs; waited += settleStepMs) {
      await new Promise((resolve) => setTimeout(resolve, Math.min(settleStepMs, settleMs - waited)));
      settling.push((await figuresOf(child)).rssMiB);
    }
    const settled = await figuresOf(child);
    const collected = await figuresOf(child, true);
    const growth = first && last ? growthBetween(first, last) : undefined;
    return {
      allocator,
      requests: options.requests,
      names,
      concurrency,
      failures,
      earlyAt,
      early,
      earlyRetainedHeapMiB,
      end,
      settled,
      collected,
      samples,
      settling,
      ...(growth ? { growth } : {}),
    };
  } finally {
    agent.destroy();
    await stopServerProcess(child);
    await bed.close();
  }
}

/** What an idle TLS connection and a request waiting in the approval queue cost the server. */
export async function connectionCosts(options: {
  idleConnections?: number;
  queuedRequests?: number;
}): Promise<ConnectionCosts> {
  const bed = await testbed();
  try {
    const { child, url } = await startServerProcess(bed.spec('insecure-always-approve'), 'image settings');
    let idle: Pick<ConnectionCosts, 'idleConnectionKiB' | 'idleConnectionHeapKiB'>;
    try {
      const count = options.idleConnections ?? 1_000;
      await post(url, bodyOf('warm-up', bed.key), bed.caPem, false);
      const before = await figuresOf(child, true);
      const sockets = await openIdle(url, bed.caPem, count);
      const held = await figuresOf(child, true);
      for (const socket of sockets) socket.destroy();
      idle = {
        idleConnectionKiB: ((held.rssMiB - before.rssMiB) * 1024) / count,
        idleConnectionHeapKiB: ((held.heapUsedMiB - before.heapUsedMiB) * 1024) / count,
      };
    } finally {
      await stopServerProcess(child);
    }
    // At most 1,000 requests wait in all, the warm-up's included.
    const queued = await queuedRequestCost(
      bed.spec('queue'),
      bed.caPem,
      bed.key,
      options.queuedRequests ?? 900,
    );
    return { ...idle, queuedRequestKiB: queued };
  } finally {
    await bed.close();
  }
}

/**
 * What a request waiting in the approval queue costs the server's heap: `count` nodes ask under the
 * `queue` policy and nobody approves.
 */
async function queuedRequestCost(
  spec: ServerSpec,
  caPem: string,
  key: ReturnType<typeof generateKey>,
  count: number,
): Promise<number> {
  const { child, url } = await startServerProcess(spec, 'image settings');
  try {
    const bodies = Array.from({ length: count }, (_, i) => bodyOf(`queued-${i}`, key));
    await post(url, bodyOf('warm-up', key), caPem, false);
    const before = await figuresOf(child, true);
    // Each answer is a poll handle: the request waits as a CSR object the server watches, not as an
    // open connection. At most 10 wait per source address (the queue's cap), so 10 per address.
    const from = sources(count, 10);
    const statuses = await Promise.all(
      bodies.map((body, i) => post(url, body, caPem, false, from[Math.floor(i / 10)])),
    );
    const queued = statuses.filter((s) => s === 202).length;
    if (queued !== count) {
      throw new Error(`only ${queued} of ${count} requests were queued (${[...new Set(statuses)]})`);
    }
    // Let the server's watch see every CSR it created.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const held = await figuresOf(child, true);
    return ((held.heapUsedMiB - before.heapUsedMiB) * 1024) / count;
  } finally {
    await stopServerProcess(child);
  }
}

export function formatMemoryBench(runs: readonly MemoryRun[], costs?: ConnectionCosts): string {
  const first = runs[0];
  if (!first) return '';
  const mib = (n: number) => n.toFixed(1).padStart(9);
  const lines = [
    `bootstrap server memory: ${first.requests} requests, ${first.names} node names, ${first.concurrency} in flight over keep-alive; RSS and heap in MiB`,
    `${'server'.padEnd(22)} ${'failed'.padStart(6)} ${`RSS@${first.earlyAt}`.padStart(10)} ${'RSS end'.padStart(9)} ${'settled'.padStart(9)} ${'after GC'.padStart(9)} ${'kept'.padStart(9)} ${'heap kept'.padStart(17)}`,
  ];
  for (const run of runs) {
    const kept = run.settled.rssMiB - run.early.rssMiB;
    lines.push(
      `${run.allocator.padEnd(22)} ${String(run.failures).padStart(6)} ${mib(run.early.rssMiB).padStart(10)} ${mib(run.end.rssMiB)} ${mib(run.settled.rssMiB)} ${mib(run.collected.rssMiB)} ${mib(kept)} ${`${run.earlyRetainedHeapMiB.toFixed(1)} → ${run.collected.heapUsedMiB.toFixed(1)}`.padStart(17)}`,
    );
  }
  const image = runs.find((r) => r.allocator === 'image settings');
  const glibc = runs.find((r) => r.allocator === 'glibc defaults');
  if (image && glibc) {
    const kept = (r: MemoryRun) => r.settled.rssMiB - r.early.rssMiB;
    lines.push(
      `ratio  RSS kept after settling ${kept(image).toFixed(1)} MiB (the image's settings) against ${kept(glibc).toFixed(1)} MiB (glibc's defaults); target ≤ 50 MiB`,
    );
  }
  for (const run of runs) {
    const points = run.samples.map((p) => `${p.requests / 1000}k ${p.rssMiB.toFixed(0)}`).join(', ');
    lines.push(`RSS every ${sampleEvery / 1000}k requests, ${run.allocator}: ${points}`);
    lines.push(
      `  then idle, every ${settleStepMs / 1000} s: ${run.settling.map((r) => r.toFixed(0)).join(', ')}`,
    );
  }
  if (costs) {
    lines.push(
      `cost  idle TLS connection ${costs.idleConnectionKiB.toFixed(1)} KiB RSS (${costs.idleConnectionHeapKiB.toFixed(1)} KiB heap); request waiting in the approval queue ${costs.queuedRequestKiB.toFixed(1)} KiB heap`,
    );
  }
  for (const run of runs) {
    if (!run.growth) continue;
    lines.push(`heap growth between the snapshots, ${run.allocator} (constructor, objects, bytes):`);
    for (const g of run.growth) {
      lines.push(
        `  ${g.name.slice(0, 60).padEnd(60)} ${String(g.count).padStart(9)} ${String(g.bytes).padStart(11)}`,
      );
    }
  }
  return lines.join('\n');
}

if (process.argv.includes('--serve')) {
  await serveChild();
} else if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      requests: { type: 'string', default: '200000' },
      names: { type: 'string' },
      concurrency: { type: 'string', default: '32' },
      snapshots: { type: 'string' },
    },
  });
  const requests = Number(values.requests);
  const names = values.names === undefined ? undefined : Number(values.names);
  const concurrency = Number(values.concurrency);
  for (const [flag, n] of [
    ['--requests', requests],
    ['--names', names ?? 1],
    ['--concurrency', concurrency],
  ] as const) {
    if (!Number.isInteger(n) || n < 1) throw new Error(`${flag} must be a positive integer`);
  }
  const common = {
    requests,
    ...(names === undefined ? {} : { names }),
    concurrency,
    ...(values.snapshots ? { snapshots: values.snapshots } : {}),
  };
  const runs = [await runMemory(common), await runMemory({ ...common, allocator: 'glibc defaults' })];
  process.stdout.write(`${formatMemoryBench(runs, await connectionCosts({}))}\n`);
}
