/**
 * Benchmark: a label storm of N nodes (default 5,000) on Akamai (Linode), through the official SDK
 * against the simulator with Linode's documented limits on (200 requests per minute for paginated
 * collections, 1,600 per minute for other operations), batched (pages of 500 instances filtered on
 * the cluster tag) against kops' one `GET /linode/instances/{id}` per node, in the same run
 * (bench/label-storm.ts runs both).
 *
 *   node bench/label-storm-linode.ts [--nodes N]
 */
import { createLinodeProvider } from '../src/cloud/linode/provider.ts';
import { startLinodeSimulator } from '../src/sim/linode/simulator.ts';
import { apiCalls, labelStormMain, type StormCloud } from './label-storm.ts';

const clusterName = 'bench.example.com';
const group = 'nodes-us-ord';

/** Linode: instances tagged with the cluster and one instance group. */
export const linodeStorm: StormCloud = {
  name: 'linode',
  through: 'the Linode simulator and the official SDK (pages of 500)',
  // The batched path lists (200 a minute); kops' path reads one by one (1,600 a minute).
  rateLimit: {
    batched: { requests: 200, windowSeconds: 60 },
    perNode: { requests: 1600, windowSeconds: 60 },
  },
  start: async (nodes, rateLimited) => {
    const sim = await startLinodeSimulator();
    if (!rateLimited) sim.setRateLimit(undefined);
    const instances = sim.addGroup(clusterName, group, nodes);
    const provider = createLinodeProvider({ clusterName, origin: sim.origin, token: sim.token });
    return {
      providerIDs: instances.map((i) => `linode://${i.id}`),
      identifier: provider.nodeIdentifier,
      getOne: async (id) => (await provider.instances.get(id.slice('linode://'.length))).instanceGroup,
      groupOf: () => group,
      calls: () => apiCalls(sim.calls),
      close: async () => {
        provider.close();
        await sim.close();
      },
    };
  },
};

if (import.meta.main) await labelStormMain(linodeStorm);
