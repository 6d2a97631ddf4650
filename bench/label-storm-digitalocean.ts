/**
 * Benchmark: a label storm of N nodes (default 5,000) on DigitalOcean, against the simulator with
 * DigitalOcean's documented rate limit on (250 requests per minute, 5,000 per hour), batched (one
 * paginated list of the cluster tag, 200 droplets a page) against kops' one `GET /droplets/{id}` per
 * node, in the same run (bench/label-storm-hetzner.ts runs both).
 *
 *   node bench/label-storm-digitalocean.ts [--nodes N]
 */
import { parseArgs } from 'node:util';
import { createDigitalOceanProvider } from '../src/cloud/digitalocean/provider.ts';
import { digitalOceanRateLimit, startDigitalOceanSimulator } from '../src/sim/digitalocean/simulator.ts';
import { formatLabelStorm, runLabelStorm, type StormCloud } from './label-storm-hetzner.ts';

const clusterName = 'bench.example.com';

/** DigitalOcean: droplets tagged with the cluster and one instance group. */
export const digitalOceanStorm: StormCloud = {
  name: 'digitalocean',
  // The per-minute limit is the one a storm meets first (the hourly one is 5,000).
  rateLimit: { batched: { requests: 250, windowSeconds: 60 }, perNode: { requests: 250, windowSeconds: 60 } },
  start: async (nodes, rateLimited) => {
    const sim = await startDigitalOceanSimulator();
    sim.setRateLimit(rateLimited ? digitalOceanRateLimit() : undefined);
    const droplets = sim.addGroup(clusterName, 'nodes-nyc3', nodes);
    const provider = createDigitalOceanProvider({ clusterName, endpoint: sim.endpoint, token: sim.token });
    return {
      providerIDs: droplets.map((d) => `digitalocean://${d.id}`),
      identifier: provider.nodeIdentifier,
      getOne: async (id) => (await provider.droplets.get(id.slice('digitalocean://'.length))).instanceGroup,
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
  console.log(formatLabelStorm(await runLabelStorm(digitalOceanStorm, Number(values.nodes))));
}
