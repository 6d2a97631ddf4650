/**
 * Benchmark: a label storm of N nodes (default 5,000) on Akamai (Linode), through the official SDK
 * against the simulator with Linode's documented limits on (200 requests per minute for paginated
 * collections, 1,600 per minute for other operations), batched (pages of 500 instances filtered on
 * the cluster tag) against kops' one `GET /linode/instances/{id}` per node, in the same run
 * (bench/label-storm-hetzner.ts runs both).
 *
 *   node bench/label-storm-linode.ts [--nodes N]
 */
import { parseArgs } from 'node:util';
import { createLinodeProvider } from '../src/cloud/linode/provider.ts';
import { startLinodeSimulator } from '../src/sim/linode/simulator.ts';
import { formatLabelStorm, runLabelStorm, type StormCloud } from './label-storm-hetzner.ts';

const clusterName = 'bench.example.com';

/** Linode: instances tagged with the cluster and one instance group. */
export const linodeStorm: StormCloud = {
  name: 'linode',
  // The batched path lists (200 a minute); kops' path reads one by one (1,600 a minute).
  rateLimit: {
    batched: { requests: 200, windowSeconds: 60 },
    perNode: { requests: 1600, windowSeconds: 60 },
  },
  start: async (nodes, rateLimited) => {
    const sim = await startLinodeSimulator();
    if (!rateLimited) sim.setRateLimit(undefined);
    const instances = sim.addGroup(clusterName, 'nodes-us-ord', nodes);
    const provider = createLinodeProvider({ clusterName, origin: sim.origin, token: sim.token });
    return {
      providerIDs: instances.map((i) => `linode://${i.id}`),
      identifier: provider.nodeIdentifier,
      getOne: async (id) => (await provider.instances.get(id.slice('linode://'.length))).instanceGroup,
      calls: () => ({
        total: sim.calls.filter((c) => !c.operation.startsWith('metadata')).length,
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
  console.log(formatLabelStorm(await runLabelStorm(linodeStorm, Number(values.nodes))));
}
