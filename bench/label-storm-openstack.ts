/**
 * Benchmark: the label storm (bench/label-storm.ts) on OpenStack, through the simulated Keystone
 * and Nova: batched, this project's OpenStackNodeIdentifier answering a crowd from one paginated
 * `servers/detail` listing (1,000 a page); per-node, kops' one `servers.Get` per node. Nova enforces
 * no API rate limit of its own; the figures show the request rate each way would put on a proxy
 * that does.
 *
 *   node bench/label-storm-openstack.ts [--nodes N]
 */
import { KeystoneSession } from '../src/cloud/openstack/keystone.ts';
import { OpenStackNodeIdentifier } from '../src/cloud/openstack/node-identifier.ts';
import { NovaClient } from '../src/cloud/openstack/nova.ts';
import { identityOfServer, parseOpenStackProviderID } from '../src/cloud/openstack/server.ts';
import { nthPrivateAddress } from '../src/sim/cloud-sim.ts';
import { startOpenStackSimulator } from '../src/sim/openstack/simulator.ts';
import { labelStormMain, type StormCloud } from './label-storm.ts';

const clusterName = 'bench.example.com';
const group = 'nodes';

/** OpenStack: servers whose metadata names the cluster and one instance group. */
export const openstackStorm: StormCloud = {
  name: 'openstack',
  through: 'the OpenStack simulator (Nova pages of 1,000)',
  start: async (nodes) => {
    const sim = await startOpenStackSimulator();
    const providerIDs: string[] = [];
    for (let i = 0; i < nodes; i++) {
      const server = sim.addServer({
        name: `nodes-${i}`,
        fixed: [nthPrivateAddress(i)],
        metadata: { KubernetesCluster: clusterName, KopsInstanceGroup: group, KopsRole: 'Node' },
      });
      providerIDs.push(`openstack:///${server.id}`);
    }
    const nova = new NovaClient({ session: new KeystoneSession({ auth: sim.passwordAuth }) });
    await nova.listServers(); // authenticate once, outside the measurement
    sim.clearCalls();
    return {
      providerIDs,
      identifier: new OpenStackNodeIdentifier({ nova, clusterName }),
      getOne: async (providerID) => {
        const server = await nova.getServer(parseOpenStackProviderID(providerID));
        const identity = identityOfServer(providerID, server, clusterName);
        return identity instanceof Error ? undefined : identity.instanceGroup;
      },
      groupOf: () => group,
      calls: () => ({ total: sim.count('servers.get') + sim.count('servers.list'), throttled: 0 }),
      close: () => sim.close(),
    };
  },
};

if (import.meta.main) await labelStormMain(openstackStorm);
