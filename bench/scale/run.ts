/**
 * The scale benchmark's run: a world process (bench/scale/world.ts) holding N Nodes and P pods, a
 * controller process (bench/scale/controller.ts) started on it twice (a first start with every Node
 * unlabelled, then a restart with every Node labelled), the scrapes of its /metrics, an instance-group
 * edit, and the join storm (bench/scale/join.ts).
 */
import { type ControllerMemory, type ControllerProcess, startControllerProcess } from './controller.ts';
import { runScaleJoin, type ScaleJoinFigures } from './join.ts';
import { type CloudCalls, editedGroup, startWorld, type World, type WorldSize } from './world.ts';

/** Options of a run. */
export interface ScaleOptions extends WorldSize {
  /** Scrapes of /metrics timed one after the other (default 200). */
  scrapes?: number;
  /** Nodes of the join storm (default: `nodes`); 0 skips it. */
  joinNodes?: number;
  /** Nodes the per-node join design is measured on (default 1,000). */
  perNodeSample?: number;
  /** Join requests in flight (default 1,500: a storm of every node at once, near the server's cap of 2,048 connections). */
  concurrency?: number;
  /** Join requests in flight for kops' per-node design (default 100: at EC2's 20 calls a second they wait 5 s, inside the policy's 10 s lookup deadline). */
  perNodeConcurrency?: number;
  /** How long a phase may take before the run gives up on it, in ms (default 15 min). */
  phaseTimeoutMs?: number;
}

/** One start of the controller: its informers' sync and its NodeController's pass over every Node. */
export interface StartFigures {
  /** From the process being asked to start to every informer's first list done. */
  syncMs: number;
  /** Resident memory and heap when synced (RSS from /proc, heap before any forced collection). */
  atSync: ControllerMemory;
  /** From the start to every Node reconciled (labelled, or found already labelled), pods synced or not. */
  reconciledMs: number;
  reconciles: Record<string, number>;
  /** AWS calls from the start until every Node was reconciled. */
  cloud: CloudCalls;
}

/** The figures of a run. */
export interface ScaleResult {
  size: WorldSize & { apiNodes: number; apiPods: number };
  world: { seedMs: number; rssMiB: number };
  first: StartFigures;
  /** Nodes carrying their instance group's label after the first start, out of all. */
  labelled: { nodes: number; of: number };
  /** Controller memory after the storm with the cache synced: RSS, and heap after a full collection. */
  settled: ControllerMemory;
  scrape: { count: number; p50Ms: number; p99Ms: number; apiRequests: number; nodeReady: number | undefined };
  /** From the state-store write: every node relabelled (`ms`), and the first one (`noticedMs`). */
  edit: { nodes: number; relabelled: number; ms: number; noticedMs: number };
  restart: StartFigures;
  join?: ScaleJoinFigures;
}

/** The value at quantile `q` of `values`. */
function quantile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] ?? Number.NaN;
}

/** A line on stderr as each phase starts, so a long run shows where it is. */
function progress(message: string): void {
  process.stderr.write(`scale: ${new Date().toISOString().slice(11, 19)} ${message}\n`);
}

async function until(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/**
 * Starts a controller and waits until its informers have synced and it has reconciled every Node with
 * the `expected` result: `labelled` on a first start (each labelled Node then comes back once more as
 * `unchanged`, from its own patch's watch event), `unchanged` after a restart. The two are timed
 * apart: the NodeController works from its Node informer and does not wait for the pods.
 */
async function startOnce(
  world: World,
  timeoutMs: number,
  expected: 'labelled' | 'unchanged',
): Promise<{ controller: ControllerProcess; figures: StartFigures }> {
  await world.cloudCalls(true);
  const started = performance.now();
  const controller = await startControllerProcess(world.ready);
  let reconciles: Record<string, number> = {};
  const reconciledMs = until(`every Node is ${expected}`, timeoutMs, async () => {
    reconciles = await controller.reconciles();
    return (reconciles[expected] ?? 0) >= world.ready.nodes;
  }).then(async () => ({ ms: performance.now() - started, cloud: await world.cloudCalls() }));
  const sync = await controller.synced;
  const atSync = { ...sync.memory, rssMiB: controller.rssMiB() };
  progress(`controller synced in ${Math.round(sync.ms)} ms; waiting until every Node is ${expected}`);
  const { ms, cloud } = await reconciledMs;
  return { controller, figures: { syncMs: sync.ms, atSync, reconciledMs: ms, reconciles, cloud } };
}

async function scrape(url: string): Promise<{ ms: number; text: string }> {
  const started = performance.now();
  const response = await fetch(`${url}/metrics`);
  const text = await response.text();
  if (response.status !== 200) throw new Error(`GET /metrics answered ${response.status}`);
  return { ms: performance.now() - started, text };
}

/** Runs every measurement of the benchmark. */
export async function runScale(options: ScaleOptions): Promise<ScaleResult> {
  const timeoutMs = options.phaseTimeoutMs ?? 900_000;
  progress(`seeding ${options.nodes} nodes and ${options.pods} pods`);
  const world = await startWorld(options);
  try {
    progress('first start of the controller');
    const first = await startOnce(world, timeoutMs, 'labelled');
    const controller = first.controller;
    let result: Omit<ScaleResult, 'restart' | 'join'>;
    try {
      const labelled = await world.inOwnGroup();
      const settled = { ...(await controller.memory(true)), rssMiB: controller.rssMiB() };

      const scrapes = options.scrapes ?? 200;
      progress(`${scrapes} scrapes`);
      await scrape(controller.url);
      await world.apiRequests(true);
      const times: number[] = [];
      let last = '';
      for (let i = 0; i < scrapes; i++) {
        const { ms, text } = await scrape(controller.url);
        times.push(ms);
        last = text;
      }
      const apiRequests = await world.apiRequests();
      const ready = /^kops_node_ready\{[^}]*\} (\d+)$/m.exec(last)?.[1];
      const scrapeFigures = {
        count: scrapes,
        p50Ms: quantile(times, 0.5),
        p99Ms: quantile(times, 0.99),
        apiRequests,
        nodeReady: ready === undefined ? undefined : Number(ready),
      };

      // `kops edit ig`: a new node label on the edited group; every one of its Nodes must get it.
      const editLabel = 'example.com/scale-bench';
      progress(`editing ${editedGroup}`);
      const labelledBefore = (await controller.reconciles())['labelled'] ?? 0;
      const edited = performance.now();
      await world.editNodeLabels(editedGroup, editLabel, 'edited');
      let relabelled = { nodes: 0, of: 0 };
      // When the controller's poll of the state store saw the edit: its first relabel after it.
      let noticedMs: number | undefined;
      await until(`every node of ${editedGroup} is relabelled`, timeoutMs, async () => {
        if (noticedMs === undefined && ((await controller.reconciles())['labelled'] ?? 0) > labelledBefore)
          noticedMs = performance.now() - edited;
        relabelled = await world.labelled(editLabel, 'edited', editedGroup);
        return relabelled.of > 0 && relabelled.nodes === relabelled.of;
      });
      const ms = performance.now() - edited;
      const edit = { nodes: relabelled.of, relabelled: relabelled.nodes, ms, noticedMs: noticedMs ?? ms };
      result = {
        size: {
          nodes: options.nodes,
          pods: options.pods,
          groupNodes: options.groupNodes,
          apiNodes: world.ready.nodes,
          apiPods: world.ready.pods,
        },
        world: { seedMs: world.ready.seedMs, rssMiB: world.ready.rssMiB },
        first: first.figures,
        labelled,
        settled,
        scrape: scrapeFigures,
        edit,
      };
    } finally {
      await controller.stop();
    }

    progress('restart of the controller');
    const restart = await startOnce(world, timeoutMs, 'unchanged');
    await restart.controller.stop();

    const joinNodes = options.joinNodes ?? options.nodes;
    if (joinNodes > 0) progress(`join storm of ${joinNodes} nodes`);
    const join =
      joinNodes > 0
        ? await runScaleJoin({
            kubeconfig: world.ready.kubeconfig,
            nodes: joinNodes,
            perNodeSample: options.perNodeSample ?? 1000,
            concurrency: options.concurrency ?? 1500,
            perNodeConcurrency: options.perNodeConcurrency ?? 100,
          })
        : undefined;
    return { ...result, restart: restart.figures, ...(join ? { join } : {}) };
  } finally {
    await world.stop();
  }
}
