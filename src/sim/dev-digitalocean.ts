/**
 * The DigitalOcean of `kops-controller dev --cloud digitalocean`: the DigitalOcean simulator, each
 * droplet tagged as kops tags it (`KubernetesCluster:<cluster with dashes>`,
 * `kops-instancegroup:<group>`, `kops-instance-role:<role>`) with its private address, and a node's
 * proof read from the droplet's own metadata service.
 */
import { digitalOceanProof } from '../agent/digitalocean-proof.ts';
import { doProviderIds } from '../cloud/digitalocean/droplets.ts';
import { doEndpointVariable, doTokenVariable } from '../cloud/digitalocean/provider.ts';
import type { DevCloudContext, DevCloudSim } from './dev-clouds.ts';
import { startDigitalOceanSimulator } from './digitalocean/simulator.ts';

export async function startDigitalOceanDevCloud(context: DevCloudContext): Promise<DevCloudSim> {
  const sim = await startDigitalOceanSimulator();
  return {
    description: `${sim.endpoint}  (API, droplet metadata; region ${context.zone})`,
    providerConfig: ['do: {}'],
    overrides: { digitalocean: { endpoint: sim.endpoint, token: sim.token } },
    env: { [doTokenVariable]: sim.token, [doEndpointVariable]: sim.endpoint },
    policy: { name: 'digitalocean' },
    callback: true,
    addServer: (group, index, address) => {
      const droplet = sim.addDroplet({
        name: `${group.name}-${index}`,
        region: context.zone,
        privateIp: address,
        tags: [
          `KubernetesCluster:${context.clusterName.replaceAll('.', '-')}`,
          `kops-instancegroup:${group.name}`,
          `kops-instance-role:${group.controlPlane ? 'ControlPlane' : 'Node'}`,
        ],
      });
      return {
        // kops' DigitalOcean verifier names the node after the droplet's private address.
        name: address,
        providerID: doProviderIds.format(String(droplet.id)),
        address,
        proof: digitalOceanProof({ metadataUrl: sim.metadataUrl(droplet.id) }),
      };
    },
    count: (operation) => sim.count(operation),
    close: () => sim.close(),
  };
}
