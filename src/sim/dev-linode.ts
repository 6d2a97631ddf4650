/**
 * The Akamai (Linode) cloud of `kops-controller dev --cloud linode`: the Linode simulator, each
 * instance tagged as kops tags it (`kops.k8s.io/cluster:<cluster>`, `kops.k8s.io/instance-group:<group>`,
 * `kops.k8s.io/instance-role:<role>`) with its address, and a node's proof read from the instance's
 * own metadata service after its token dance.
 */
import { linodeProof } from '../agent/linode-proof.ts';
import { linodeProviderIds } from '../cloud/linode/instances.ts';
import { linodeTokenVariable, linodeUrlVariable } from '../cloud/linode/provider.ts';
import type { DevCloudContext, DevCloudSim } from './dev-clouds.ts';
import { startLinodeSimulator } from './linode/simulator.ts';

export async function startLinodeDevCloud(context: DevCloudContext): Promise<DevCloudSim> {
  const sim = await startLinodeSimulator();
  return {
    description: `${sim.origin}  (API v4, metadata service; region ${context.zone})`,
    providerConfig: ['linode: {}'],
    overrides: { linode: { origin: sim.origin, token: sim.token } },
    env: { [linodeTokenVariable]: sim.token, [linodeUrlVariable]: sim.origin },
    policy: { name: 'linode' },
    callback: true,
    addServer: (group, index, address) => {
      const instance = sim.addInstance({
        label: `${group.name}-${index}`,
        region: context.zone,
        ipv4: [address],
        tags: [
          `kops.k8s.io/cluster:${context.clusterName}`,
          `kops.k8s.io/instance-group:${group.name}`,
          `kops.k8s.io/instance-role:${group.controlPlane ? 'ControlPlane' : 'Node'}`,
        ],
      });
      return {
        // kops' Linode verifier names the node after the instance's label.
        name: instance.label,
        providerID: linodeProviderIds.format(String(instance.id)),
        address,
        proof: linodeProof({ metadataUrl: sim.metadataUrl(instance.id) }),
      };
    },
    count: (operation) => sim.count(operation),
    close: () => sim.close(),
  };
}
