/**
 * Benchmark: the simulated API server at a 5,000-node scale, with the server in a child process so
 * that client and server do not share one event loop (as with a real apiserver):
 * - LIST of N nodes (default 5,000) and of M pods (default 100,000), in pages of 500 and unpaged,
 *   through kubeList (the informer's list function): wall time and objects/s;
 * - WATCH fan-out: U node updates (default 10,000) delivered to W watchers (default 5), each
 *   counting every event: events/s delivered, and whether every watcher received every event;
 * - the informer's memory per cached pod, slim records vs whole objects (bench/informer.ts).
 * Prints a table and the ratios.
 *
 *   node bench/apiserver.ts [--nodes N] [--pods M] [--updates U] [--watchers W]
 */
import { type ChildProcess, fork } from 'node:child_process';
import { parseArgs } from 'node:util';
import { KubeConfig, type KubernetesObject } from '@kubernetes/client-node';
import { reuseConnections } from '../src/kube/connection-reuse.ts';
import { kubeList, kubeWatch } from '../src/kube/informer.ts';
import { startApiServer } from '../src/sim/apiserver/index.ts';
import { formatInformerBench, type InformerBenchResult, runInformerBench, samplePod } from './informer.ts';

/** The sizes of a run. */
export interface ApiServerBenchOptions {
  nodes: number;
  pods: number;
  updates: number;
  watchers: number;
  /** Objects per page of the paged lists (default 500, the informer's). */
  pageSize?: number;
}

/** One list measurement. */
export interface ListFigures {
  name: string;
  objects: number;
  pages: number;
  wallMs: number;
}

/** The watch fan-out measurement. */
export interface WatchFigures {
  updates: number;
  watchers: number;
  /** Events received, per watcher. */
  received: number[];
  wallMs: number;
}

/** The figures of a run. */
export interface ApiServerBenchResult {
  options: Required<ApiServerBenchOptions>;
  lists: ListFigures[];
  watch: WatchFigures;
  informer: InformerBenchResult;
}

/** Messages between the benchmark and its server process. */
type ToServer = { type: 'update'; count: number } | { type: 'exit' };
type FromServer = { type: 'ready'; kubeconfig: string } | { type: 'updated' };

function nodeObject(i: number): KubernetesObject & Record<string, unknown> {
  const name = `node-${i}`;
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels: { 'kubernetes.io/hostname': name, 'kops.k8s.io/instancegroup': 'nodes' } },
    spec: { providerID: `aws:///us-east-1a/i-${i.toString(16).padStart(17, '0')}` },
    status: {
      conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady' }],
      addresses: [{ type: 'InternalIP', address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}` }],
      nodeInfo: { kubeletVersion: 'v1.33.0', kubeProxyVersion: 'v1.33.0' },
    },
  };
}

/** The server process: seeds the store, reports its kubeconfig, then updates nodes on request. */
async function serveChild(nodes: number, pods: number): Promise<void> {
  const sim = await startApiServer();
  for (let team = 0; team < 20; team++) {
    sim.store.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: `team-${team}` } });
  }
  for (let i = 0; i < nodes; i++) sim.store.create(nodeObject(i) as never);
  for (let i = 0; i < pods; i++) sim.store.create(samplePod(i));
  const send = (message: FromServer) => process.send?.(message);
  process.on('message', (message: ToServer) => {
    if (message.type === 'exit') {
      void sim.close().then(() => process.exit(0));
      return;
    }
    for (let i = 0; i < message.count; i++) {
      sim.store.mutate('nodes', undefined, `node-${i % nodes}`, (node) => {
        node.metadata.labels = { ...node.metadata.labels, 'bench.example.com/round': String(i) };
      });
    }
    send({ type: 'updated' });
  });
  send({ type: 'ready', kubeconfig: sim.kubeconfig() });
}

/** A server process and a way to talk to it. */
interface ServerProcess {
  kubeConfig: KubeConfig;
  request(message: ToServer): Promise<FromServer>;
  stop(): Promise<void>;
}

async function startServerProcess(nodes: number, pods: number): Promise<ServerProcess> {
  const child: ChildProcess = fork(
    new URL(import.meta.url).pathname,
    ['--serve', '--nodes', String(nodes), '--pods', String(pods)],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  );
  const next = () =>
    new Promise<FromServer>((resolve, reject) => {
      const onExit = (code: number | null) => reject(new Error(`the server process exited with ${code}`));
      child.once('exit', onExit);
      child.once('message', (message: FromServer) => {
        child.off('exit', onExit);
        resolve(message);
      });
    });
  const ready = await next();
  if (ready.type !== 'ready') throw new Error(`unexpected message from the server process: ${ready.type}`);
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromString(ready.kubeconfig);
  // As the controllers do: without it every page would open a new TLS connection.
  reuseConnections(kubeConfig);
  return {
    kubeConfig,
    request: (message) => {
      const reply = next();
      child.send(message);
      return reply;
    },
    stop: async () => {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.send({ type: 'exit' } satisfies ToServer);
      await exited;
    },
  };
}

async function measureList(
  kubeConfig: KubeConfig,
  name: string,
  path: string,
  limit: number | undefined,
): Promise<ListFigures> {
  const list = kubeList(kubeConfig, path);
  const started = performance.now();
  let objects = 0;
  let pages = 0;
  let cont: string | undefined;
  do {
    const page = await list({ limit, _continue: cont });
    objects += page.items.length;
    pages++;
    cont = page.metadata?._continue || undefined;
  } while (cont);
  return { name, objects, pages, wallMs: performance.now() - started };
}

async function measureWatch(server: ServerProcess, updates: number, watchers: number): Promise<WatchFigures> {
  const { kubeConfig } = server;
  const first = await kubeList(kubeConfig, '/api/v1/nodes')({ limit: 1 });
  const resourceVersion = first.metadata?.resourceVersion ?? '';
  const received = Array.from({ length: watchers }, () => 0);
  let complete!: () => void;
  const allReceived = new Promise<void>((resolve) => {
    complete = resolve;
  });
  let done = 0;
  const watch = kubeWatch(kubeConfig);
  const handles = await Promise.all(
    received.map((_, w) =>
      watch(
        '/api/v1/nodes',
        { resourceVersion, allowWatchBookmarks: false },
        (type) => {
          if (type !== 'MODIFIED') return;
          received[w] = (received[w] ?? 0) + 1;
          if (received[w] === updates && ++done === watchers) complete();
        },
        () => undefined,
      ),
    ),
  );
  const started = performance.now();
  await server.request({ type: 'update', count: updates });
  await allReceived;
  const wallMs = performance.now() - started;
  for (const handle of handles) handle.abort();
  return { updates, watchers, received, wallMs };
}

/** Runs every measurement. */
export async function runApiServerBench(options: ApiServerBenchOptions): Promise<ApiServerBenchResult> {
  const full = { pageSize: 500, ...options };
  const server = await startServerProcess(full.nodes, full.pods);
  const lists: ListFigures[] = [];
  let watch: WatchFigures;
  try {
    const { kubeConfig } = server;
    for (const [resource, path] of [
      ['nodes', '/api/v1/nodes'],
      ['pods', '/api/v1/pods'],
    ] as const) {
      lists.push(
        await measureList(kubeConfig, `list ${resource} (pages of ${full.pageSize})`, path, full.pageSize),
      );
      lists.push(await measureList(kubeConfig, `list ${resource} (unpaged)`, path, undefined));
    }
    watch = await measureWatch(server, full.updates, full.watchers);
  } finally {
    await server.stop();
  }
  const informer = await runInformerBench(full.pods);
  return { options: full, lists, watch, informer };
}

/** The report printed by the benchmark. */
export function formatApiServerBench(result: ApiServerBenchResult): string {
  const { nodes, pods, updates, watchers } = result.options;
  const rate = (n: number, ms: number) => Math.round((n * 1000) / Math.max(ms, 0.001));
  const row = (name: string, count: number, ms: number, unit: string) =>
    `${name.padEnd(28)} ${String(count).padStart(8)} ${`${(ms / 1000).toFixed(2)}s`.padStart(8)} ` +
    `${String(rate(count, ms)).padStart(10)} ${unit}/s`;
  const { watch } = result;
  const delivered = watch.received.reduce((a, b) => a + b, 0);
  const allReceived = watch.received.every((n) => n === watch.updates);
  const paged = result.lists.find((l) => l.name.startsWith('list pods (pages'));
  const unpaged = result.lists.find((l) => l.name === 'list pods (unpaged)');
  return [
    `apiserver: simulated API server in a child process; ${nodes} nodes, ${pods} pods, ` +
      `${updates} node updates to ${watchers} watchers`,
    `${'operation'.padEnd(28)} ${'objects'.padStart(8)} ${'wall'.padStart(8)} ${'rate'.padStart(10)}`,
    ...result.lists.map((l) => row(l.name, l.objects, l.wallMs, 'objects')),
    `${row(`watch fan-out (${watchers} watchers)`, delivered, watch.wallMs, 'events')}  ` +
      (allReceived ? 'every watcher got every event' : `MISSED EVENTS: ${watch.received.join(', ')}`),
    ...(paged && unpaged
      ? [`ratio  paged/unpaged list wall time for pods: ${(paged.wallMs / unpaged.wallMs).toFixed(2)}`]
      : []),
    formatInformerBench(result.informer),
  ].join('\n');
}

function positive(value: string | undefined, flag: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag} must be a positive integer, got ${value}`);
  return n;
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string', default: '5000' },
      pods: { type: 'string', default: '100000' },
      updates: { type: 'string', default: '10000' },
      watchers: { type: 'string', default: '5' },
      serve: { type: 'boolean', default: false },
    },
  });
  const nodes = positive(values.nodes, 'nodes');
  const pods = positive(values.pods, 'pods');
  if (values.serve) {
    await serveChild(nodes, pods);
  } else {
    const result = await runApiServerBench({
      nodes,
      pods,
      updates: positive(values.updates, 'updates'),
      watchers: positive(values.watchers, 'watchers'),
    });
    process.stdout.write(`${formatApiServerBench(result)}\n`);
  }
}
