/**
 * The Scaleway of `kops-controller dev --cloud scaleway`: the Instance and IPAM APIs and the metadata
 * service simulated, each server tagged as kops tags it (`noprefix=kops.k8s.io/cluster=<cluster>`,
 * `noprefix=kops.k8s.io/instance-group=<group>`) with its private address in IPAM, and a node's proof
 * read from the server's own metadata service.
 */
import { scalewayProof } from '../agent/scaleway-proof.ts';
import { clusterTagPrefix, instanceGroupTagPrefix, scalewayProviderID } from '../cloud/scaleway/server.ts';
import type { DevCloudContext, DevCloudSim } from './dev-clouds.ts';
import { startScalewaySimulator } from './scaleway/simulator.ts';

export async function startScalewayDevCloud(context: DevCloudContext): Promise<DevCloudSim> {
  const sim = await startScalewaySimulator({ zone: context.zone });
  return {
    description: `${sim.apiUrl}  (Instance, IPAM, metadata service; zone ${sim.zone})`,
    providerConfig: ['scaleway: {}'],
    overrides: { scaleway: { credentials: sim.credentials } },
    env: sim.env,
    policy: { name: 'scaleway' },
    callback: true,
    addServer: (group, index, address) => {
      const server = sim.addServer({
        name: `${group.name}-${index}`,
        privateIps: [address],
        tags: [`${clusterTagPrefix}${context.clusterName}`, `${instanceGroupTagPrefix}${group.name}`],
      });
      return {
        // kops' Scaleway verifier names the node after the server.
        name: server.name,
        providerID: scalewayProviderID({ zone: server.zone, id: server.id }),
        address,
        proof: scalewayProof({ metadataUrl: sim.metadataUrl(server.id) }),
      };
    },
    count: (operation) => sim.count(operation),
    close: () => sim.close(),
  };
}
