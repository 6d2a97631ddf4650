/**
 * The label storm every cloud's benchmark runs (bench/label-storm-<cloud>.ts): N nodes (default
 * 5,000) identified against the cloud's simulator two ways in the same run —
 * - batched: this project's identifier, every node asked for separately (as Node events arrive) and
 *   coalesced into as few list calls as the API allows, with the cloud's documented limit on;
 * - per-node: what kops-controller does, one read per node, one node at a time (its node reconciler
 *   runs a single worker), with the limit off so that it finishes (its calls are set against the
 *   limit's budget instead).
 * A cloud file says only how to start its world; the run, the report and the command line are here.
 */
import { parseArgs } from 'node:util';
import type { NodeIdentifier } from '../src/cloud/types.ts';
import type { SimCall } from '../src/sim/rest-sim.ts';

/** A documented limit: `requests` per `windowSeconds`. */
export interface Budget {
  requests: number;
  windowSeconds: number;
}

/** One cloud's side of the storm. */
export interface StormCloud {
  name: string;
  /** What the run goes through, for the report's first line (`the Hetzner simulator, pages of 50`). */
  through: string;
  /** The documented limits each way's calls count against; none where the API documents none. */
  rateLimit?: { batched: Budget; perNode: Budget };
  /** A simulator holding `nodes` servers of the cluster, with the documented limit on or off. */
  start(nodes: number, rateLimited: boolean): Promise<StormWorld>;
  /** Lines the cloud adds to the report (what its figures mean under its own limit). */
  notes?(result: StormResult): string[];
}

/** A started world. */
export interface StormWorld {
  providerIDs: string[];
  /** The batched identifier under test. */
  identifier: NodeIdentifier;
  /** kops' lookup of one node: one read by id; resolves to the node's instance group. */
  getOne(providerID: string): Promise<string | undefined>;
  /** The instance group `providerID` was created in. */
  groupOf(providerID: string): string;
  /** API requests the simulator received since the world started, and how many it answered 429. */
  calls(): { total: number; throttled: number };
  close(): Promise<void>;
}

/** The API calls a REST simulator served (its metadata service's aside), and how many it throttled. */
export function apiCalls(calls: readonly SimCall[]): { total: number; throttled: number } {
  return {
    total: calls.filter((c) => !c.operation.startsWith('metadata')).length,
    throttled: calls.filter((c) => c.status === 429).length,
  };
}

/** Calls and time of one way of identifying the nodes. */
export interface StormFigures {
  calls: number;
  throttled: number;
  /** Nodes identified to the instance group they were created in. */
  identified: number;
  wallMs: number;
}

/** The figures of a run. */
export interface StormResult {
  cloud: string;
  nodes: number;
  batched: StormFigures;
  perNode: StormFigures;
}

/** Runs both ways against fresh simulators. */
export async function runLabelStorm(cloud: StormCloud, nodes: number): Promise<StormResult> {
  const batched = await measure(await cloud.start(nodes, true), async (world) => {
    const answers = await Promise.all(world.providerIDs.map((id) => world.identifier.identify([id])));
    return answers.filter((answer, i) => {
      const id = world.providerIDs[i] as string;
      const result = answer.get(id);
      return result?.ok && result.identity.instanceGroup === world.groupOf(id);
    }).length;
  });
  const perNode = await measure(await cloud.start(nodes, false), async (world) => {
    let identified = 0;
    for (const id of world.providerIDs) if ((await world.getOne(id)) === world.groupOf(id)) identified++;
    return identified;
  });
  return { cloud: cloud.name, nodes, batched, perNode };
}

/** Times one way through `world`, then closes it. */
async function measure(
  world: StormWorld,
  run: (world: StormWorld) => Promise<number>,
): Promise<StormFigures> {
  try {
    const started = performance.now();
    const identified = await run(world);
    const wallMs = performance.now() - started;
    const { total, throttled } = world.calls();
    return { calls: total, throttled, identified, wallMs };
  } finally {
    await world.close();
  }
}

/** The report, one line per way and the ratios. */
export function formatLabelStorm(cloud: StormCloud, result: StormResult): string {
  const line = (name: string, f: StormFigures, budget: Budget | undefined) =>
    `${name.padEnd(9)}calls=${f.calls} throttled=${f.throttled} identified=${f.identified}/${result.nodes} wall=${Math.round(f.wallMs)}ms` +
    (budget
      ? ` budget=${((100 * f.calls) / budget.requests).toFixed(1)}% of ${budget.requests} per ${budget.windowSeconds} s`
      : ` rate=${(f.calls / Math.max(f.wallMs / 1000, 0.001)).toFixed(0)}/s`);
  const ratio = result.perNode.calls / Math.max(1, result.batched.calls);
  const limit = cloud.rateLimit
    ? 'batched with the documented limit on; per-node with it off, as it would not fit'
    : 'the API documents no rate limit: the rates show what each way would put on a proxy that has one';
  return [
    `${result.cloud} label storm: ${result.nodes} nodes through ${cloud.through} (${limit})`,
    line('batched', result.batched, cloud.rateLimit?.batched),
    line('per-node', result.perNode, cloud.rateLimit?.perNode),
    `ratio    ${ratio.toFixed(0)}x fewer calls`,
    ...(cloud.notes?.(result) ?? []),
  ].join('\n');
}

/** The command line of a cloud's benchmark: `node bench/label-storm-<cloud>.ts [--nodes N]`. */
export async function labelStormMain(cloud: StormCloud): Promise<void> {
  const { values } = parseArgs({ options: { nodes: { type: 'string', default: '5000' } } });
  const nodes = Number(values.nodes);
  if (!Number.isInteger(nodes) || nodes < 1)
    throw new Error(`--nodes must be a positive integer, got ${values.nodes}`);
  process.stdout.write(`${formatLabelStorm(cloud, await runLabelStorm(cloud, nodes))}\n`);
}
