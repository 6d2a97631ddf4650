/**
 * Benchmark: the label storm (bench/label-storm.ts) on Scaleway, through the simulated Instance API
 * with the official SDK: batched, this project's ScalewayNodeIdentifier coalescing nodes into
 * ListServers calls filtered by up to 100 server ids, each followed by one IPAM listing of those
 * servers' Private-NIC addresses (a kops cluster on a Private Network); per-node, kops' one
 * GetServer per node (kops' identifier reads no address).
 *
 *   node bench/label-storm-scaleway.ts [--nodes N]
 */
import { createScalewayClients } from '../src/cloud/scaleway/client.ts';
import { ScalewayNodeIdentifier } from '../src/cloud/scaleway/node-identifier.ts';
import { identityOfServer, parseScalewayProviderID } from '../src/cloud/scaleway/server.ts';
import { startScalewaySimulator } from '../src/sim/scaleway/simulator.ts';
import { labelStormMain, type StormCloud } from './label-storm.ts';

const clusterName = 'bench.example.com';
const group = 'nodes';

/** Scaleway: servers tagged with the cluster and one instance group. */
export const scalewayStorm: StormCloud = {
  name: 'scaleway',
  through: 'the Scaleway simulator (ListServers by id, 100 a call, plus one IPAM listing each)',
  start: async (nodes) => {
    const sim = await startScalewaySimulator();
    const tags = [
      `noprefix=kops.k8s.io/cluster=${clusterName}`,
      `noprefix=kops.k8s.io/instance-group=${group}`,
    ];
    const providerIDs: string[] = [];
    for (let i = 0; i < nodes; i++) {
      const privateIps = [`172.16.${Math.floor(i / 250)}.${(i % 250) + 2}`];
      const server = sim.addServer({ name: `nodes-${i}`, tags, privateIps });
      providerIDs.push(`scaleway://instance/${sim.zone}/${server.id}`);
    }
    const clients = createScalewayClients({ credentials: sim.credentials });
    return {
      providerIDs,
      identifier: new ScalewayNodeIdentifier({ clients, clusterName }),
      getOne: async (providerID) => {
        const ref = parseScalewayProviderID(providerID);
        const { server } = await clients.call('instance.getServer', () =>
          clients.instance.getServer({ zone: ref.zone, serverId: ref.id }),
        );
        const identity = server && identityOfServer(providerID, server, clusterName, clients.projectId);
        return identity && !(identity instanceof Error) ? identity.instanceGroup : undefined;
      },
      groupOf: () => group,
      calls: () => ({
        total: sim.count('servers.get') + sim.count('servers.list') + sim.count('ips.list'),
        throttled: 0,
      }),
      close: () => sim.close(),
    };
  },
};

if (import.meta.main) await labelStormMain(scalewayStorm);
