/**
 * The Hetzner Cloud of `kops-controller dev --cloud hetzner`: the Hetzner simulator, each server
 * labelled as kops labels it (`kops.k8s.io/cluster`, `kops.k8s.io/instance-group`,
 * `kops.k8s.io/instance-role`) with its private network address, and a node's proof read from the
 * server's own metadata service.
 */
import { hetznerProof } from '../agent/hetzner-proof.ts';
import { hetznerEndpointVariable, hetznerTokenVariable } from '../cloud/hetzner/provider.ts';
import { hetznerProviderIds } from '../cloud/hetzner/servers.ts';
import type { DevCloudContext, DevCloudSim } from './dev-clouds.ts';
import { startHetznerSimulator } from './hetzner/simulator.ts';

export async function startHetznerDevCloud(context: DevCloudContext): Promise<DevCloudSim> {
  const sim = await startHetznerSimulator();
  return {
    description: `${sim.endpoint}  (Cloud API, metadata service; location ${context.zone})`,
    providerConfig: ['hetzner: {}'],
    overrides: { hetzner: { endpoint: sim.endpoint, token: sim.token } },
    env: { [hetznerTokenVariable]: sim.token, [hetznerEndpointVariable]: sim.endpoint },
    policy: { name: 'hetzner' },
    callback: true,
    addServer: (group, index, address) => {
      const server = sim.addServer({
        name: `${group.name}-${index}`,
        location: context.zone,
        privateIps: [address],
        labels: {
          'kops.k8s.io/cluster': context.clusterName,
          'kops.k8s.io/instance-group': group.name,
          'kops.k8s.io/instance-role': group.controlPlane ? 'ControlPlane' : 'Node',
        },
      });
      return {
        // kops' Hetzner verifier names the node after the server.
        name: server.name,
        providerID: hetznerProviderIds.format(String(server.id)),
        address,
        proof: hetznerProof({ metadataUrl: sim.metadataUrl(server.id) }),
      };
    },
    count: (operation) => sim.count(operation),
    close: () => sim.close(),
  };
}
