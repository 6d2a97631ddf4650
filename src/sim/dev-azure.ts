/**
 * The Azure of `kops-controller dev --cloud azure`: ARM, IMDS and Microsoft's PKI repository
 * simulated; each instance group a scale set `<group>.<cluster>` (control plane:
 * `<group>.masters.<cluster>`) tagged as kops tags it, its VMs inheriting the tags; a node's proof is
 * the attested document its own IMDS signs for the request body. The controller trusts the
 * simulator's attestation root (written to `<stateDir>/azure-attestation-root.pem`) and fetches the
 * issuing CA from the simulated PKI repository, as it would from Microsoft's. The environment it
 * writes points other commands (`validate`) at simulated ARM, trusting its CA
 * and Blob Storage, the state store (both CAs in `<stateDir>/azure-ca.pem`), with the simulator's managed
 * identity as the only credential.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { azureProof } from '../agent/azure-proof.ts';
import { azureEndpointVariable } from '../cloud/azure/provider.ts';
import { azureBlobEndpointVariable } from '../statestore/azure-blob-vfs.ts';
import { type BlobStorageSimulator, startBlobStorageSimulator } from './azure/blob.ts';
import { startAzureSimulator } from './azure/simulator.ts';
import type { DevCloudContext, DevCloudSim, DevGroup } from './dev-clouds.ts';

export async function startAzureDevCloud(context: DevCloudContext): Promise<DevCloudSim> {
  const sim = await startAzureSimulator({ location: context.zone });
  const { world } = sim;
  const rootsFile = join(context.stateDir, 'azure-attestation-root.pem');
  const caFile = join(context.stateDir, 'azure-ca.pem');
  // The state store, kops' azureblob://<account>/<container>: Blob Storage taking the simulator's tokens.
  const { host: account, pathname } = new URL(context.stateRoot);
  let blob: BlobStorageSimulator | undefined;
  try {
    blob = await startBlobStorageSimulator({ validToken: (token) => sim.validToken(token) });
    blob.createContainer(account, pathname.slice(1));
    await writeFile(rootsFile, sim.authority.rootPem);
    // Other commands trust ARM's and Blob Storage's CAs through NODE_EXTRA_CA_CERTS.
    await writeFile(caFile, `${sim.caPem.trimEnd()}\n${blob.caPem.trimEnd()}\n`);
  } catch (err) {
    await blob?.close();
    await sim.close();
    throw err;
  }
  const blobStore = blob;
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
    // The in-process controller is handed the simulator's managed identity and CA directly.
    overrides: { azure: { endpoint: sim.armEndpoint, caPem: sim.caPem, credential: sim.credential } },
    // Other commands get them through the variables Node and the Azure SDK read: DefaultAzureCredential
    // narrowed to managed identity, whose IMDS is the simulator's (never 169.254.169.254), with the
    // variables that would pick another token source (App Service, Cloud Shell, workload identity)
    // emptied, so no credential of the developer's shell is used or sent to the simulator.
    env: {
      [azureEndpointVariable]: sim.armEndpoint,
      NODE_EXTRA_CA_CERTS: caFile,
      AZURE_TOKEN_CREDENTIALS: 'ManagedIdentityCredential',
      AZURE_POD_IDENTITY_AUTHORITY_HOST: sim.imdsEndpoint,
      IDENTITY_ENDPOINT: '',
      MSI_ENDPOINT: '',
      AZURE_FEDERATED_TOKEN_FILE: '',
    },
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
    stateStore: {
      root: context.stateRoot,
      env: { [azureBlobEndpointVariable]: blobStore.endpoint },
      vfsOptions: {
        azureBlob: { endpoint: blobStore.endpoint, caPem: blobStore.caPem, credential: sim.credential },
      },
      description: `Blob Storage at ${blobStore.endpoint}`,
    },
    close: async () => {
      await blobStore.close();
      await sim.close();
    },
  };
}
