/**
 * Benchmark: the label storm (bench/label-storm.ts) on Hetzner Cloud, against the simulator with
 * Hetzner's documented rate limit on (3,600 requests per hour per project, a bucket refilled at one
 * per second): batched, one paginated list of the cluster's servers (50 per page); per-node, kops'
 * one `GET /servers/{id}` per node.
 *
 *   node bench/label-storm-hetzner.ts [--nodes N]
 */
import { createHetznerProvider } from '../src/cloud/hetzner/provider.ts';
import { hetznerRateLimit, startHetznerSimulator } from '../src/sim/hetzner/simulator.ts';
import { apiCalls, labelStormMain, type StormCloud } from './label-storm.ts';

const clusterName = 'bench.example.com';
const group = 'nodes-fsn1';

/** Hetzner: servers labelled with the cluster and one instance group. */
export const hetznerStorm: StormCloud = {
  name: 'hetzner',
  through: 'the Hetzner simulator (pages of 50)',
  rateLimit: {
    batched: { requests: 3600, windowSeconds: 3600 },
    perNode: { requests: 3600, windowSeconds: 3600 },
  },
  start: async (nodes, rateLimited) => {
    const sim = await startHetznerSimulator();
    sim.setRateLimit(rateLimited ? hetznerRateLimit() : undefined);
    const servers = sim.addGroup(clusterName, group, nodes);
    const provider = createHetznerProvider({ clusterName, endpoint: sim.endpoint, token: sim.token });
    return {
      providerIDs: servers.map((s) => `hcloud://${s.id}`),
      identifier: provider.nodeIdentifier,
      getOne: async (id) => (await provider.servers.get(id.slice('hcloud://'.length))).instanceGroup,
      groupOf: () => group,
      calls: () => apiCalls(sim.calls),
      close: async () => {
        provider.close();
        await sim.close();
      },
    };
  },
};

if (import.meta.main) await labelStormMain(hetznerStorm);
