/**
 * Benchmark: the Node watch of one controller process at N Nodes (default 50,000), two ways side by
 * side, alternating over rounds:
 * - shared: one list+watch (src/kube/shared-informer.ts) with a view per consumer;
 * - one per consumer: a list+watch of its own for each, as the process had before.
 * The consumers are those of `run` with the bootstrap server in the process: the NodeController, the
 * kops_* gauges and the impersonation guard, each with its own record transform. Measured per way:
 * time until every consumer is synced, CPU of this process (decoding, transforms) and of the
 * simulated API server (serving the lists), and the heap the caches hold after a full GC.
 *
 *   node bench/node-watch.ts [--nodes N] [--rounds R]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { KubeConfig, type V1Node } from '@kubernetes/client-node';
import { nodeRecordOf } from '../src/controllers/node/node-record.ts';
import { Informer, type InformerCache, kubeList, kubeWatch } from '../src/kube/informer.ts';
import { SharedInformer } from '../src/kube/shared-informer.ts';
import { labelledNodeOf } from '../src/metrics/validation-metrics.ts';
import { startWorld } from './scale/world.ts';

setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

/** The consumers and their transforms, as `run` builds them. */
const consumers: { name: string; transform: (node: V1Node) => unknown }[] = [
  { name: 'node-controller', transform: nodeRecordOf },
  { name: 'validation', transform: labelledNodeOf },
  { name: 'guard', transform: () => true },
];

/** What one way cost. */
export interface WayFigures {
  syncMs: number;
  /** CPU of this process while syncing (the lists decoded and transformed). */
  clientCpuMs: number;
  /** CPU of the simulated API server while serving the lists. */
  serverCpuMs: number;
  heapMiB: number;
  /** Lists started (first pages) across the consumers. */
  lists: number;
  cached: number;
}

export type Way = 'shared' | 'per consumer';

export interface NodeWatchResult {
  nodes: number;
  rounds: Record<Way, WayFigures>[];
}

function cpuMsOfPid(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return ((Number(fields[11]) + Number(fields[12])) / 100) * 1000;
}

function clientCpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

function heapUsed(): number {
  collectGarbage();
  collectGarbage();
  return process.memoryUsage().heapUsed;
}

async function measure(way: Way, kubeConfig: KubeConfig, worldPid: number): Promise<WayFigures> {
  let lists = 0;
  const list = kubeList<V1Node>(kubeConfig, '/api/v1/nodes');
  const source = {
    path: '/api/v1/nodes',
    list: (options: Parameters<typeof list>[0]) => {
      if (!options._continue) lists++;
      return list(options);
    },
    watch: kubeWatch(kubeConfig),
  };
  const heapBefore = heapUsed();
  const cpu0 = clientCpuMs();
  const server0 = cpuMsOfPid(worldPid);
  const started = performance.now();
  let caches: InformerCache<unknown>[];
  if (way === 'shared') {
    const shared = new SharedInformer<V1Node>({ name: 'nodes', ...source });
    caches = consumers.map(({ name, transform }) => shared.view(name, transform));
  } else {
    caches = consumers.map(
      ({ name, transform }) => new Informer<V1Node, unknown>({ name: `nodes-${name}`, ...source, transform }),
    );
  }
  for (const cache of caches) cache.start();
  await Promise.all(caches.map((cache) => cache.waitForSync()));
  const syncMs = performance.now() - started;
  const figures = {
    syncMs,
    clientCpuMs: clientCpuMs() - cpu0,
    serverCpuMs: cpuMsOfPid(worldPid) - server0,
    heapMiB: (heapUsed() - heapBefore) / 2 ** 20,
    lists,
    cached: caches[0]?.size ?? 0,
  };
  await Promise.all(caches.map((cache) => cache.stop()));
  return figures;
}

export async function runNodeWatchBench(nodes: number, rounds: number): Promise<NodeWatchResult> {
  const world = await startWorld({ nodes, pods: nodes, groupNodes: 1 }, { maxOldSpaceMiB: 4096 });
  try {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromString(world.ready.kubeconfig);
    const result: NodeWatchResult = { nodes: world.ready.nodes, rounds: [] };
    // A warm-up of each way first: the JIT and the sockets, not the caches, would decide round one.
    for (const way of ['shared', 'per consumer'] as const) await measure(way, kubeConfig, world.pid);
    for (let round = 0; round < rounds; round++) {
      const order: Way[] = round % 2 === 0 ? ['shared', 'per consumer'] : ['per consumer', 'shared'];
      const figures = {} as Record<Way, WayFigures>;
      for (const way of order) figures[way] = await measure(way, kubeConfig, world.pid);
      result.rounds.push(figures);
    }
    return result;
  } finally {
    await world.stop();
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

export function formatNodeWatch(result: NodeWatchResult): string {
  const of = (way: Way, key: keyof WayFigures) => median(result.rounds.map((r) => r[way][key]));
  const lines = [
    `${result.nodes} Nodes, ${consumers.length} consumers (${consumers.map((c) => c.name).join(', ')}), ` +
      `medians of ${result.rounds.length} alternating rounds`,
    `${'way'.padEnd(14)}${'lists'.padStart(6)}${'sync'.padStart(9)}${'client CPU'.padStart(12)}` +
      `${'server CPU'.padStart(12)}${'heap'.padStart(11)}`,
  ];
  for (const way of ['shared', 'per consumer'] as const) {
    lines.push(
      `${way.padEnd(14)}${String(of(way, 'lists')).padStart(6)}${`${(of(way, 'syncMs') / 1000).toFixed(2)}s`.padStart(9)}` +
        `${`${(of(way, 'clientCpuMs') / 1000).toFixed(2)}s`.padStart(12)}` +
        `${`${(of(way, 'serverCpuMs') / 1000).toFixed(2)}s`.padStart(12)}` +
        `${`${of(way, 'heapMiB').toFixed(0)} MiB`.padStart(11)}`,
    );
  }
  const ratio = (key: keyof WayFigures) =>
    (of('per consumer', key) / Math.max(1e-9, of('shared', key))).toFixed(2);
  lines.push(
    `ratio  per consumer / shared: sync ${ratio('syncMs')}x, client CPU ${ratio('clientCpuMs')}x, ` +
      `server CPU ${ratio('serverCpuMs')}x, heap ${ratio('heapMiB')}x`,
  );
  return lines.join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: { nodes: { type: 'string', default: '50000' }, rounds: { type: 'string', default: '3' } },
  });
  const nodes = Number(values.nodes);
  const rounds = Number(values.rounds);
  if (!Number.isInteger(nodes) || nodes < 1)
    throw new Error(`--nodes must be a positive integer, got ${values.nodes}`);
  if (!Number.isInteger(rounds) || rounds < 1)
    throw new Error(`--rounds must be a positive integer, got ${values.rounds}`);
  process.stdout.write(`${formatNodeWatch(await runNodeWatchBench(nodes, rounds))}\n`);
}
