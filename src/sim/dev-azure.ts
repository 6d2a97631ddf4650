/**
 * The Azure of `kops-controller dev --cloud azure`: ARM, IMDS and Microsoft's PKI repository
 * simulated; each instance group a scale set `<group>.<cluster>` (control plane:
 * `<group>.masters.<cluster>`) tagged as kops tags it, its VMs inheriting the tags; a node's proof is
 * the attested document its own IMDS signs for the request body. The controller trusts the
 * simulator's attestation root (written to `<stateDir>/azure-attestation-root.pem`) and fetches the
 * issuing CA from the simulated PKI repository, as it would from Microsoft's.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { azureProof } from '../agent/azure-proof.ts';
import { startAzureSimulator } from './azure/simulator.ts';
import type { DevCloudContext, DevCloudSim, DevGroup } from './dev-clouds.ts';

export async function startAzureDevCloud(context: DevCloudContext): Promise<DevCloudSim> {
  const sim = await startAzureSimulator({ location: context.zone });
  const { world } = sim;
  const rootsFile = join(context.stateDir, 'azure-attestation-root.pem');
  try {
    await writeFile(rootsFile, sim.authority.rootPem);
  } catch (err) {
    await sim.close();
    throw err;
  }
  /** The scale set of `ig`, created with kops' name and tags on first use. */
  const scaleSetOf = (ig: DevGroup): string => {
    const name = ig.controlPlane
      ? `${ig.name}.masters.${context.clusterName}`
      : `${ig.name}.${context.clusterName}`;
    if (!world.scaleSets.has(name.toLowerCase())) {
      const role = ig.controlPlane ? 'control-plane' : 'node';
      world.addScaleSet(name, {
        KubernetesCluster: context.clusterName,
        'kops.k8s.io_instancegroup': ig.name,
        [`k8s.io_role_${role}`]: '1',
        ...(ig.controlPlane ? { 'k8s.io_role_master': '1' } : {}),
      });
    }
    return name;
  };
  return {
    description: `${sim.armEndpoint}  (ARM; IMDS at ${sim.imdsEndpoint}; resource group ${world.resourceGroup}, location ${world.location})`,
    providerConfig: [
      'azure:',
      `  subscriptionID: ${world.subscriptionId}`,
      `  resourceGroup: ${world.resourceGroup}`,
    ],
    overrides: { azure: { endpoint: sim.armEndpoint, caPem: sim.caPem, credential: sim.credential } },
    // The controller's credential is the simulator's managed identity, handed over in-process.
    env: {},
    policy: { name: 'azure', rootsFile, pkiRepository: sim.pkiUrl },
    callback: true,
    addServer: (group, _index, address) => {
      const scaleSet = scaleSetOf(group);
      const vm = world.addScaleSetVm(scaleSet, group.name);
      vm.privateIp = address;
      return {
        // kops' Azure verifier names the node after the VM's computer name.
        name: vm.computerName.toLowerCase(),
        providerID: world.providerID(vm),
        address,
        proof: azureProof({ imdsUrl: sim.imdsUrlOf(vm.name) }),
      };
    },
    count: (operation) => sim.count(operation),
    close: () => sim.close(),
  };
}
