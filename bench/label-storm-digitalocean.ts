/**
 * Benchmark: the label storm (bench/label-storm.ts) on DigitalOcean, against the simulator with
 * DigitalOcean's documented rate limit on (250 requests per minute, 5,000 per hour): batched, one
 * paginated list of the cluster tag (200 droplets a page); per-node, kops' one `GET /droplets/{id}`
 * per node.
 *
 *   node bench/label-storm-digitalocean.ts [--nodes N]
 */
import { createDigitalOceanProvider } from '../src/cloud/digitalocean/provider.ts';
import { digitalOceanRateLimit, startDigitalOceanSimulator } from '../src/sim/digitalocean/simulator.ts';
import { apiCalls, labelStormMain, type StormCloud } from './label-storm.ts';

const clusterName = 'bench.example.com';
const group = 'nodes-nyc3';

/** DigitalOcean: droplets tagged with the cluster and one instance group. */
export const digitalOceanStorm: StormCloud = {
  name: 'digitalocean',
  through: 'the DigitalOcean simulator (pages of 200)',
  // The per-minute limit is the one a storm meets first (the hourly one is 5,000).
  rateLimit: { batched: { requests: 250, windowSeconds: 60 }, perNode: { requests: 250, windowSeconds: 60 } },
  start: async (nodes, rateLimited) => {
    const sim = await startDigitalOceanSimulator();
    sim.setRateLimit(rateLimited ? digitalOceanRateLimit() : undefined);
    const droplets = sim.addGroup(clusterName, group, nodes);
    const provider = createDigitalOceanProvider({ clusterName, endpoint: sim.endpoint, token: sim.token });
    return {
      providerIDs: droplets.map((d) => `digitalocean://${d.id}`),
      identifier: provider.nodeIdentifier,
      getOne: async (id) => (await provider.droplets.get(id.slice('digitalocean://'.length))).instanceGroup,
      groupOf: () => group,
      calls: () => apiCalls(sim.calls),
      close: async () => {
        provider.close();
        await sim.close();
      },
    };
  },
};

if (import.meta.main) await labelStormMain(digitalOceanStorm);
