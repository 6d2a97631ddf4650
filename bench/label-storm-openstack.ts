/**
 * Benchmark: label N nodes (default 5,000) on OpenStack through the simulated Keystone and Nova, two
 * ways in the same run:
 * - batched: this project's OpenStackNodeIdentifier, every node asked for separately (as Node events
 *   arrive), coalesced into batches answered by one paginated `servers/detail` listing (1,000 a page);
 * - per-node: what kops-controller does, one `servers.Get` per node, one node at a time (its node
 *   reconciler runs a single worker).
 * Prints the Nova calls and wall time of each, and the ratios. Nova enforces no API rate limit of its
 * own (docs/clouds.md); the figures show the request rate each way would put on a proxy that does.
 *
 *   node bench/label-storm-openstack.ts [--nodes N]
 */
import { parseArgs } from 'node:util';
import { KeystoneSession } from '../src/cloud/openstack/keystone.ts';
import { OpenStackNodeIdentifier } from '../src/cloud/openstack/node-identifier.ts';
import { NovaClient } from '../src/cloud/openstack/nova.ts';
import { identityOfServer, parseOpenStackProviderID } from '../src/cloud/openstack/server.ts';
import { type OpenStackSimulator, startOpenStackSimulator } from '../src/sim/openstack/simulator.ts';

const clusterName = 'bench.example.com';

/** Calls and time of one way of identifying the nodes. */
export interface StormFigures {
  /** Nova calls served (servers.get + servers.list pages). */
  calls: number;
  /** Nodes identified to the right instance group. */
  identified: number;
  wallMs: number;
}

/** The figures of a run. */
export interface OpenStackStormResult {
  nodes: number;
  batched: StormFigures;
  perNode: StormFigures;
}

async function measure(sim: OpenStackSimulator, run: () => Promise<number>): Promise<StormFigures> {
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
export async function runOpenStackStorm(nodes: number): Promise<OpenStackStormResult> {
  const sim = await startOpenStackSimulator();
  try {
    const providerIDs: string[] = [];
    for (let i = 0; i < nodes; i++) {
      const server = sim.addServer({
        name: `nodes-${i}`,
        fixed: [`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`],
        metadata: { KubernetesCluster: clusterName, KopsInstanceGroup: 'nodes', KopsRole: 'Node' },
      });
      providerIDs.push(`openstack:///${server.id}`);
    }
    const nova = new NovaClient({ session: new KeystoneSession({ auth: sim.passwordAuth }) });
    await nova.listServers(); // authenticate once, outside both measurements

    const batched = await measure(sim, async () => {
      const identifier = new OpenStackNodeIdentifier({ nova, clusterName });
      const results = await Promise.all(providerIDs.map((p) => identifier.identify([p])));
      return results.filter((r, i) => {
        const result = r.get(providerIDs[i] as string);
        return result?.ok && result.identity.instanceGroup === 'nodes';
      }).length;
    });

    const perNode = await measure(sim, async () => {
      let identified = 0;
      for (const providerID of providerIDs) {
        const server = await nova.getServer(parseOpenStackProviderID(providerID));
        const identity = identityOfServer(providerID, server, clusterName);
        if (!(identity instanceof Error) && identity.instanceGroup === 'nodes') identified++;
      }
      return identified;
    });
    return { nodes, batched, perNode };
  } finally {
    await sim.close();
  }
}

/** The report the benchmark prints. */
export function formatOpenStackStorm(result: OpenStackStormResult): string {
  const row = (name: string, f: StormFigures) =>
    `${name.padEnd(9)} calls=${String(f.calls).padEnd(6)} identified=${String(f.identified).padEnd(6)} ` +
    `wall=${(f.wallMs / 1000).toFixed(2)}s rate=${(f.calls / Math.max(f.wallMs / 1000, 0.001)).toFixed(0)}/s`;
  const callRatio = result.perNode.calls / Math.max(1, result.batched.calls);
  const timeRatio = result.perNode.wallMs / Math.max(1, result.batched.wallMs);
  return [
    `label storm: ${result.nodes} nodes through the OpenStack simulator (Nova pages of 1,000)`,
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
  process.stdout.write(`${formatOpenStackStorm(await runOpenStackStorm(nodes))}\n`);
}
