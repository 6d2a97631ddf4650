/**
 * Benchmark: a label storm of N nodes (default 5,000) on Hetzner Cloud, against the simulator with
 * Hetzner's documented rate limit on (3,600 requests per hour per project, a bucket refilled at one
 * per second), two ways in the same run:
 * - batched: this project's identifier, every node asked for separately (as Node events arrive) and
 *   coalesced into one paginated list of the cluster's servers (50 per page);
 * - per-node: what kops-controller does, one `GET /servers/{id}` per node, one node at a time (its
 *   node reconciler runs a single worker). Measured without the rate limit (it would not finish
 *   within it: the calls are counted against the hourly budget instead).
 * Also {@link runLabelStorm}, the run the DigitalOcean and Linode storms share.
 *
 *   node bench/label-storm-hetzner.ts [--nodes N]
 */
import { parseArgs } from 'node:util';
import { createHetznerProvider } from '../src/cloud/hetzner/provider.ts';
import type { NodeIdentifier } from '../src/cloud/types.ts';
import { hetznerRateLimit, startHetznerSimulator } from '../src/sim/hetzner/simulator.ts';

/** One cloud's side of the storm. */
export interface StormCloud {
  name: string;
  /** The documented limits each way's calls count against, for the report. */
  rateLimit: { batched: Budget; perNode: Budget };
  /** A simulator holding `nodes` servers of the cluster, with the documented limit on or off. */
  start(nodes: number, rateLimited: boolean): Promise<StormWorld>;
}

/** A started world. */
export interface StormWorld {
  providerIDs: string[];
  /** The batched identifier under test. */
  identifier: NodeIdentifier;
  /** kops' lookup of one node: one GET by id; resolves to the node's instance group. */
  getOne(providerID: string): Promise<string | undefined>;
  /** API requests the simulator received, and how many it answered 429. */
  calls(): { total: number; throttled: number };
  close(): Promise<void>;
}

/** A documented limit: `requests` per `windowSeconds`. */
export interface Budget {
  requests: number;
  windowSeconds: number;
}

/** Calls and time of one way of identifying the nodes. */
export interface StormFigures {
  calls: number;
  throttled: number;
  identified: number;
  wallMs: number;
}

/** The figures of a run. */
export interface StormResult {
  cloud: string;
  nodes: number;
  rateLimit: StormCloud['rateLimit'];
  batched: StormFigures;
  perNode: StormFigures;
}

/** Runs both ways against fresh simulators. */
export async function runLabelStorm(cloud: StormCloud, nodes: number): Promise<StormResult> {
  const batchedWorld = await cloud.start(nodes, true);
  let batched: StormFigures;
  try {
    const started = performance.now();
    const answers = await Promise.all(
      batchedWorld.providerIDs.map((id) => batchedWorld.identifier.identify([id])),
    );
    const wallMs = performance.now() - started;
    const { total, throttled } = batchedWorld.calls();
    const identified = answers.filter((m) => [...m.values()][0]?.ok).length;
    batched = { calls: total, throttled, identified, wallMs };
  } finally {
    await batchedWorld.close();
  }

  const perNodeWorld = await cloud.start(nodes, false);
  let perNode: StormFigures;
  try {
    const started = performance.now();
    let identified = 0;
    for (const id of perNodeWorld.providerIDs) if (await perNodeWorld.getOne(id)) identified++;
    const wallMs = performance.now() - started;
    const { total, throttled } = perNodeWorld.calls();
    perNode = { calls: total, throttled, identified, wallMs };
  } finally {
    await perNodeWorld.close();
  }
  return { cloud: cloud.name, nodes, rateLimit: cloud.rateLimit, batched, perNode };
}

/** The report, one line per way and the ratios. */
export function formatLabelStorm(result: StormResult): string {
  const line = (name: string, f: StormFigures, budget: Budget) =>
    `${name.padEnd(9)}calls=${f.calls} throttled=${f.throttled} identified=${f.identified}/${result.nodes} wall=${Math.round(f.wallMs)}ms ` +
    `budget=${((100 * f.calls) / budget.requests).toFixed(1)}% of ${budget.requests} per ${budget.windowSeconds} s`;
  const ratio = result.perNode.calls / Math.max(1, result.batched.calls);
  return [
    `${result.cloud} label storm: ${result.nodes} nodes (batched with the documented limit on; per-node with it off, as it would not fit)`,
    line('batched', result.batched, result.rateLimit.batched),
    line('per-node', result.perNode, result.rateLimit.perNode),
    `ratio    ${ratio.toFixed(0)}x fewer calls`,
  ].join('\n');
}

const clusterName = 'bench.example.com';

/** Hetzner: servers labelled with the cluster and one instance group. */
export const hetznerStorm: StormCloud = {
  name: 'hetzner',
  rateLimit: {
    batched: { requests: 3600, windowSeconds: 3600 },
    perNode: { requests: 3600, windowSeconds: 3600 },
  },
  start: async (nodes, rateLimited) => {
    const sim = await startHetznerSimulator();
    sim.setRateLimit(rateLimited ? hetznerRateLimit() : undefined);
    const servers = sim.addGroup(clusterName, 'nodes-fsn1', nodes);
    const provider = createHetznerProvider({ clusterName, endpoint: sim.endpoint, token: sim.token });
    return {
      providerIDs: servers.map((s) => `hcloud://${s.id}`),
      identifier: provider.nodeIdentifier,
      getOne: async (id) => (await provider.servers.get(id.slice('hcloud://'.length))).instanceGroup,
      calls: () => ({
        total: sim.calls.filter((c) => c.operation !== 'metadata').length,
        throttled: sim.calls.filter((c) => c.status === 429).length,
      }),
      close: async () => {
        provider.close();
        await sim.close();
      },
    };
  },
};

if (import.meta.main) {
  const { values } = parseArgs({ options: { nodes: { type: 'string', default: '5000' } } });
  console.log(formatLabelStorm(await runLabelStorm(hetznerStorm, Number(values.nodes))));
}
