/**
 * Benchmark: label N nodes (default 5,000) on Scaleway through the simulated Instance API with the
 * official SDK, two ways in the same run:
 * - batched: this project's ScalewayNodeIdentifier, every node asked for separately (as Node events
 *   arrive), coalesced into ListServers calls filtered by up to 100 server ids;
 * - per-node: what kops-controller does, one GetServer per node, one node at a time (its node
 *   reconciler runs a single worker).
 * Prints the API calls and wall time of each, the request rate, and the ratios.
 *
 *   node bench/label-storm-scaleway.ts [--nodes N]
 */
import { parseArgs } from 'node:util';
import { createScalewayClients } from '../src/cloud/scaleway/client.ts';
import { ScalewayNodeIdentifier } from '../src/cloud/scaleway/node-identifier.ts';
import { identityOfServer, parseScalewayProviderID } from '../src/cloud/scaleway/server.ts';
import { type ScalewaySimulator, startScalewaySimulator } from '../src/sim/scaleway/simulator.ts';

const clusterName = 'bench.example.com';

/** Calls and time of one way of identifying the nodes. */
export interface StormFigures {
  /** Instance API calls served (GetServer + ListServers). */
  calls: number;
  /** Nodes identified to the right instance group. */
  identified: number;
  wallMs: number;
}

/** The figures of a run. */
export interface ScalewayStormResult {
  nodes: number;
  batched: StormFigures;
  perNode: StormFigures;
}

async function measure(sim: ScalewaySimulator, run: () => Promise<number>): Promise<StormFigures> {
  sim.clearCalls();
  const started = performance.now();
  const identified = await run();
  return {
    calls: sim.count('servers.get') + sim.count('servers.list'),
    identified,
    wallMs: performance.now() - started,
  };
}

/** Runs both paths against one simulator seeded with `nodes` servers of the cluster. */
export async function runScalewayStorm(nodes: number): Promise<ScalewayStormResult> {
  const sim = await startScalewaySimulator();
  try {
    const tags = [`noprefix=kops.k8s.io/cluster=${clusterName}`, 'noprefix=kops.k8s.io/instance-group=nodes'];
    const providerIDs: string[] = [];
    for (let i = 0; i < nodes; i++) {
      const server = sim.addServer({ name: `nodes-${i}`, tags });
      providerIDs.push(`scaleway://instance/${sim.zone}/${server.id}`);
    }
    const clients = createScalewayClients({ credentials: sim.credentials });

    const batched = await measure(sim, async () => {
      const identifier = new ScalewayNodeIdentifier({ clients, clusterName });
      const results = await Promise.all(providerIDs.map((p) => identifier.identify([p])));
      return results.filter((r, i) => {
        const result = r.get(providerIDs[i] as string);
        return result?.ok && result.identity.instanceGroup === 'nodes';
      }).length;
    });

    const perNode = await measure(sim, async () => {
      let identified = 0;
      for (const providerID of providerIDs) {
        const ref = parseScalewayProviderID(providerID);
        const { server } = await clients.call('instance.getServer', () =>
          clients.instance.getServer({ zone: ref.zone, serverId: ref.id }),
        );
        const identity = server && identityOfServer(providerID, server, clusterName);
        if (identity && !(identity instanceof Error) && identity.instanceGroup === 'nodes') identified++;
      }
      return identified;
    });
    return { nodes, batched, perNode };
  } finally {
    await sim.close();
  }
}

/** The report the benchmark prints. */
export function formatScalewayStorm(result: ScalewayStormResult): string {
  const row = (name: string, f: StormFigures) =>
    `${name.padEnd(9)} calls=${String(f.calls).padEnd(6)} identified=${String(f.identified).padEnd(6)} ` +
    `wall=${(f.wallMs / 1000).toFixed(2)}s rate=${(f.calls / Math.max(f.wallMs / 1000, 0.001)).toFixed(0)}/s`;
  const callRatio = result.perNode.calls / Math.max(1, result.batched.calls);
  const timeRatio = result.perNode.wallMs / Math.max(1, result.batched.wallMs);
  return [
    `label storm: ${result.nodes} nodes through the Scaleway simulator (ListServers by id, 100 a call)`,
    row('batched', result.batched),
    row('per-node', result.perNode),
    `ratio     ${callRatio.toFixed(0)}x fewer calls, ${timeRatio.toFixed(1)}x less wall time (per-node / batched)`,
  ].join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { nodes: { type: 'string', default: '5000' } } });
  const nodes = Number(values.nodes);
  if (!Number.isInteger(nodes) || nodes < 1)
    throw new Error(`--nodes must be a positive integer, got ${values.nodes}`);
  process.stdout.write(`${formatScalewayStorm(await runScalewayStorm(nodes))}\n`);
}
