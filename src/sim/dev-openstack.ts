/**
 * The OpenStack of `kops-controller dev --cloud openstack`: Keystone, Nova and the metadata service
 * simulated, each server with the metadata kops sets (`KubernetesCluster`, `KopsInstanceGroup`) and
 * its fixed address, and a node's proof read from its own metadata document. No callback: the
 * verifier checks that the request comes from the server's address instead.
 */
import { openstackProof } from '../agent/openstack-proof.ts';
import { openstackProviderID } from '../cloud/openstack/cloud-groups.ts';
import { clusterNameKey, instanceGroupKey } from '../cloud/openstack/server.ts';
import type { DevCloudContext, DevCloudSim, DevStateStore } from './dev-clouds.ts';
import { type OpenStackSimulator, startOpenStackSimulator } from './openstack/simulator.ts';

/** The simulator's Swift as the state store at `root` (`swift://<container>`), read with the `OS_*` variables. */
function swiftStateStore(sim: OpenStackSimulator, root: string): DevStateStore {
  sim.swift.createContainer(new URL(root).host);
  return { root, env: {}, vfsOptions: { env: sim.env }, description: `Swift at ${sim.swift.storageUrl}` };
}

export async function startOpenStackDevCloud(context: DevCloudContext): Promise<DevCloudSim> {
  const sim = await startOpenStackSimulator();
  return {
    description: `${sim.authUrl}  (Keystone, Nova, metadata service; region ${sim.region}, zone ${context.zone})`,
    providerConfig: ['openstack: {}'],
    overrides: { openstack: { auth: sim.passwordAuth } },
    env: sim.env,
    policy: { name: 'openstack' },
    callback: false,
    addServer: (group, index, address) => {
      const server = sim.addServer({
        name: `${group.name}-${index}`,
        zone: context.zone,
        fixed: [address],
        metadata: { [clusterNameKey]: context.clusterName, [instanceGroupKey]: group.name },
      });
      return {
        // kops' OpenStack verifier names the node after the server.
        name: server.name,
        providerID: openstackProviderID(server.id),
        address,
        proof: openstackProof({ metadataUrl: sim.metadataUrl(server.id) }),
      };
    },
    count: (operation) => sim.count(operation),
    stateStore: swiftStateStore(sim, context.stateRoot),
    close: () => sim.close(),
  };
}
