/**
 * `azure`: kops' `x-azure-id <ARM resource id> <base64 PKCS#7 attested document>` on Azure. Checked
 * as kops' verifier.go and attest.go check it:
 *   - the resource id is a VM or scale-set VM of this controller's subscription and resource group,
 *     and a scale set's name ends in `.<cluster>`;
 *   - the attested document verifies (attested-document.ts: signature, `*.metadata.azure.com`
 *     signer chained to the configured roots, nonce = this body's, fresh) and names our subscription;
 *   - the VM, read fresh from ARM, has the attested vmId (so the document is that VM's own, not
 *     another VM's paired with this id), a computer name (the node name, lower-cased) and the
 *     `kops.k8s.io_instancegroup` tag (the instance group);
 *   - its primary network interface gives the private addresses: the certificate names and the
 *     callback-challenge endpoint `<address>:3987`.
 * The certificates carry the VM's vmId as its incarnation (NodeFacts.incarnationId), so that their
 * renewal is bound to this VM, not to another created later under its name.
 * Stronger, without breaking a kops node (kops tags its scale sets, hence their VMs, with the
 * cluster): the VM must carry `KubernetesCluster=<cluster>` (a standalone VM of the resource group
 * is no longer enough), must be running, and the interface must be attached to that VM. No replay
 * marker is written: the document's signed nonce is this body's hash, so it passes with no other
 * request body; the same request again (its retry) certifies only that body's keys.
 * A bad proof and ARM's verdict on the VM (not found, not ours) are denials; ARM failing, throttling
 * or not answering in time are dependency faults (503).
 */
import type { AttestedDocument, AttestedDocumentVerifier } from '../../cloud/azure/attested-document.ts';
import type { AzureClient, AzureVm } from '../../cloud/azure/client.ts';
import {
  type AzureVmRef,
  formatAzureVmId,
  parseAzureVmId,
  sameAzureName,
} from '../../cloud/azure/resource-id.ts';
import { azureClusterTag, azureInstanceGroupTag } from '../../cloud/azure/tags.ts';
import { instanceGroupNameProblem } from '../../cloud/instance-group-name.ts';
import { describeError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import { challengeEndpointOf, defaultChallengePort } from '../../protocol/challenge.ts';
import { type CircuitBreaker, circuitOf } from '../circuit-breaker.ts';
import { type Dependency, dependencyFault, isTransientFailure } from '../dependency.ts';
import type { BootstrapPolicy, BootstrapRequest, NodeFacts, PolicyDecision } from '../types.ts';
import {
  abstainWithout,
  checkNodeName,
  cloudIdToken,
  denyRejected,
  ProofRejected,
  readCloud,
} from './cloud-id.ts';

/** What the node is told when ARM or Microsoft's PKI repository fails. */
const azure: Dependency = 'policy:azure';

/** Options of the `azure` policy. */
export interface AzurePolicyOptions {
  /** The kops cluster name: scale sets are `<ig>.<cluster>`, VMs tagged `KubernetesCluster=<cluster>`. */
  clusterName: string;
  /** ARM reads scoped to the cluster's subscription and resource group. */
  client: Pick<AzureClient, 'subscriptionId' | 'resourceGroup' | 'getVm' | 'getNic'>;
  attestation: Pick<AttestedDocumentVerifier, 'verify'>;
  /** Deadline of each ARM read (default 10 s). */
  lookupTimeoutMs?: number;
  /** The port of the node's challenge server (default kops' 3987). */
  challengePort?: number;
  /** Where pausing and resuming ARM reads is said (circuit-breaker.ts); default nowhere. */
  logger?: Logger;
  /** The circuit of ARM reads (default: one of the policy's own, with the breaker's defaults). */
  circuit?: CircuitBreaker;
}

/** The `azure` policy; abstains for every proof but `x-azure-id`. */
export function azurePolicy(options: AzurePolicyOptions): BootstrapPolicy {
  const circuit = options.circuit ?? circuitOf('the Azure Resource Manager API', options);
  return {
    name: 'azure',
    evaluate: (request) => {
      const token = cloudIdToken(request, 'x-azure-id');
      if (token === undefined) return Promise.resolve(abstainWithout('x-azure-id'));
      return denyRejected(
        () => verifyVm(token, request, options, circuit),
        'Azure identity proof rejected: ',
      );
    },
  };
}

/** The attested document, bound to this request, and ARM's record of the VM it names. */
async function verifyVm(
  token: string,
  request: BootstrapRequest,
  options: AzurePolicyOptions,
  circuit: CircuitBreaker,
): Promise<PolicyDecision> {
  const { ref, signature } = claimedVm(token, options);
  const document = await attested(signature, request.body, options);
  const facts = await factsFromArm(ref, document, options, circuit, evidenceOf(request, ref, document));
  return {
    verdict: 'approve',
    facts,
    reasons: [
      `VM ${ref.name} (vmId ${document.vmId}) proved itself with an attested document; its tags say group ${facts.instanceGroup}; it must answer the callback challenge at ${facts.challengeEndpoint}`,
    ],
  };
}

/** The verified document, naming our subscription. */
async function attested(
  signature: string,
  body: Buffer,
  options: AzurePolicyOptions,
): Promise<AttestedDocument> {
  const document = await options.attestation.verify(signature, body).catch((err: unknown) => {
    // Microsoft's PKI repository failing (intermediates) is a fault; anything else, the proof's.
    if (isTransientFailure(err)) throw dependencyFault(azure, err);
    throw new ProofRejected(describeError(err));
  });
  if (!sameAzureName(document.subscriptionId, options.client.subscriptionId)) {
    throw new ProofRejected(
      `the attested document is for subscription ${document.subscriptionId}, not this cluster's`,
    );
  }
  return document;
}

/** Node name, group, addresses and challenge endpoint from ARM's records of the VM and its interface. */
async function factsFromArm(
  ref: AzureVmRef,
  document: AttestedDocument,
  options: AzurePolicyOptions,
  circuit: CircuitBreaker,
  evidence: Record<string, string>,
): Promise<NodeFacts> {
  /** An ARM read: its verdicts (not found, malformed) reject the proof, anything else is a fault. */
  const read = <T>(work: () => Promise<T>, what: string): Promise<T> =>
    readCloud(work, {
      call: what,
      denial: what,
      dependency: azure,
      timeoutMs: options.lookupTimeoutMs,
      circuit,
    });
  const vm = await read(() => options.client.getVm(ref), `VM ${ref.name}`);
  const { nodeName, instanceGroup } = checkVm(vm, document, options.clusterName);
  const nicId = vm.nicIds[0];
  if (!nicId) throw new ProofRejected(`VM ${ref.name} has no network interface`);
  const nic = await read(() => options.client.getNic(nicId), `network interface of VM ${ref.name}`);
  if (!nic.attachedTo || !sameAzureName(nic.attachedTo, formatAzureVmId(ref))) {
    throw new ProofRejected(`network interface ${nicId} is not attached to VM ${ref.name}`);
  }
  const ip = nic.privateIps[0];
  if (!ip) throw new ProofRejected(`VM ${ref.name} has no private address`);
  return {
    nodeName,
    instanceGroup,
    instanceId: ref.name,
    // The attested vmId (checkVm: ARM's record has it): the certificates carry it, so their renewal
    // is bound to this VM, not to one re-created under its name later.
    incarnationId: vm.vmId,
    dnsNames: [],
    ipAddresses: nic.privateIps,
    challengeEndpoint: challengeEndpointOf(ip, options.challengePort ?? defaultChallengePort),
    evidence,
  };
}

/** The VM the token names, if it may be one of this cluster's at all (checked before any crypto or call). */
function claimedVm(token: string, options: AzurePolicyOptions): { ref: AzureVmRef; signature: string } {
  const [resourceId, signature, ...rest] = token.trim().split(/\s+/);
  if (!resourceId || !signature || rest.length > 0) {
    throw new ProofRejected('the token is not "<ARM resource id> <attested document>"');
  }
  let ref: AzureVmRef;
  try {
    ref = parseAzureVmId(resourceId);
  } catch (err) {
    throw new ProofRejected(describeError(err));
  }
  if (!sameAzureName(ref.subscriptionId, options.client.subscriptionId)) {
    throw new ProofRejected(`the resource id names subscription ${ref.subscriptionId}, not this cluster's`);
  }
  if (!sameAzureName(ref.resourceGroup, options.client.resourceGroup)) {
    throw new ProofRejected(
      `the resource id names resource group ${ref.resourceGroup}, not this cluster's ${options.client.resourceGroup}`,
    );
  }
  if (ref.kind === 'vmss-vm' && !ref.scaleSet?.endsWith(`.${options.clusterName}`)) {
    throw new ProofRejected(
      `scale set ${ref.scaleSet} is not one of cluster ${options.clusterName}'s (<group>.${options.clusterName})`,
    );
  }
  return { ref, signature };
}

/** The node name and group ARM's record gives, once it is the attested VM of this cluster, running. */
function checkVm(vm: AzureVm, document: AttestedDocument, clusterName: string) {
  if (vm.vmId !== document.vmId) {
    throw new ProofRejected(
      `the attested document is VM ${document.vmId}'s, not ${vm.ref.name}'s (vmId ${vm.vmId})`,
    );
  }
  if (vm.tags[azureClusterTag] !== clusterName) {
    throw new ProofRejected(
      `VM ${vm.ref.name} is tagged ${azureClusterTag}=${vm.tags[azureClusterTag] ?? '(none)'}, not ${clusterName}`,
    );
  }
  if (vm.state !== 'running' && vm.state !== 'pending') {
    throw new ProofRejected(`VM ${vm.ref.name} is ${vm.state}, not running`);
  }
  const instanceGroup = vm.tags[azureInstanceGroupTag];
  if (!instanceGroup) throw new ProofRejected(`VM ${vm.ref.name} has no ${azureInstanceGroupTag} tag`);
  const problem = instanceGroupNameProblem(instanceGroup);
  if (problem) throw new ProofRejected(`VM ${vm.ref.name}: its ${azureInstanceGroupTag} tag ${problem}`);
  if (!vm.computerName) throw new ProofRejected(`VM ${vm.ref.name} has no computer name`);
  return { nodeName: checkNodeName(vm.computerName.toLowerCase(), `VM ${vm.ref.name}`), instanceGroup };
}

function evidenceOf(request: BootstrapRequest, ref: AzureVmRef, document: AttestedDocument) {
  return {
    proof: 'azure-attested-document',
    resourceId: formatAzureVmId(ref),
    vmId: document.vmId,
    subscription: document.subscriptionId,
    attestedAt: document.createdOn.toISOString(),
    signer: document.signerNames.join(','),
    remoteAddress: request.remoteAddress,
  };
}
