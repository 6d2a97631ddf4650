/**
 * Azure Resource Manager ids of the machines kops runs, parsed strictly: a standalone VM
 * (`…/providers/Microsoft.Compute/virtualMachines/<name>`) or a scale-set VM
 * (`…/virtualMachineScaleSets/<vmss>/virtualMachines/<instance id>`). A node's providerID is
 * `azure://` followed by one of these. ARM treats the fixed segments case-insensitively, so do we;
 * names keep their spelling and are compared case-insensitively where Azure does (subscription,
 * resource group).
 */

import { InvalidInputError } from '../../errors.ts';
import { quoted } from '../../quote.ts';

/** What kind of machine an id names. */
export type AzureVmKind = 'vm' | 'vmss-vm';

/** A parsed VM or scale-set VM id. */
export interface AzureVmRef {
  kind: AzureVmKind;
  subscriptionId: string;
  resourceGroup: string;
  /** The VM's name; for a scale-set VM, `<vmss>_<instance id>` as Azure names it. */
  name: string;
  /** The scale set (scale-set VMs only). */
  scaleSet?: string;
  /** The scale-set instance id, a decimal number (scale-set VMs only). */
  instanceId?: string;
}

/** The prefix of an Azure node's providerID. */
export const azureProviderIdPrefix = 'azure://';

const subscriptionPattern = /^[0-9a-fA-F-]{1,64}$/;
// Resource group names: letters, digits, underscores, hyphens, periods and parentheses (Azure's rule).
const resourceGroupPattern = /^[-\w.()]{1,90}$/;
// VM and scale-set names: letters, digits, hyphens, underscores and periods (kops: `<ig>.<cluster>`),
// at most 64 and not ending with a period or a hyphen, as ARM accepts them for Linux: a name ARM would
// refuse is refused here, so that its 400 is only ever about the controller's own request.
const vmNamePattern = /^[A-Za-z0-9](?:[-\w.]{0,62}[A-Za-z0-9_])?$/;
const instanceIdPattern = /^\d{1,10}$/;

function invalid(id: string, why: string): InvalidInputError {
  return new InvalidInputError(`"${id.slice(0, 300)}" is not an Azure VM resource id: ${why}`);
}

/** Parses a VM or scale-set VM resource id; anything else is an InvalidInputError. */
export function parseAzureVmId(id: string): AzureVmRef {
  const parts = id.split('/');
  // ['', 'subscriptions', s, 'resourceGroups', rg, 'providers', 'Microsoft.Compute', type, name, ...]
  if (parts.length !== 9 && parts.length !== 11) throw invalid(id, 'wrong number of segments');
  const [empty, subs, subscriptionId, groups, resourceGroup, providers, namespace, type, name] = parts as [
    string,
    string,
    string,
    string,
    string,
    string,
    string,
    string,
    string,
  ];
  const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
  if (
    empty !== '' ||
    !same(subs, 'subscriptions') ||
    !same(groups, 'resourceGroups') ||
    !same(providers, 'providers') ||
    !same(namespace, 'Microsoft.Compute')
  ) {
    throw invalid(id, 'expected /subscriptions/<id>/resourceGroups/<name>/providers/Microsoft.Compute/…');
  }
  if (!subscriptionPattern.test(subscriptionId)) throw invalid(id, 'malformed subscription id');
  if (!resourceGroupPattern.test(resourceGroup)) throw invalid(id, 'malformed resource group');
  if (!vmNamePattern.test(name)) throw invalid(id, 'malformed name');
  if (parts.length === 9) {
    if (!same(type, 'virtualMachines')) throw invalid(id, `unsupported resource type ${quoted(type)}`);
    return { kind: 'vm', subscriptionId, resourceGroup, name };
  }
  const [child, instanceId] = parts.slice(9) as [string, string];
  if (!same(type, 'virtualMachineScaleSets') || !same(child, 'virtualMachines')) {
    throw invalid(id, `unsupported resource type ${quoted(`${type}/${child}`)}`);
  }
  if (!instanceIdPattern.test(instanceId)) throw invalid(id, 'malformed scale-set instance id');
  return {
    kind: 'vmss-vm',
    subscriptionId,
    resourceGroup,
    name: `${name}_${instanceId}`,
    scaleSet: name,
    instanceId,
  };
}

/** Parses an `azure:///subscriptions/…` providerID. */
export function parseAzureProviderID(providerID: string): AzureVmRef {
  if (!providerID.startsWith(azureProviderIdPrefix)) {
    throw new InvalidInputError(`providerID "${providerID.slice(0, 300)}" is not an azure:// providerID`);
  }
  return parseAzureVmId(providerID.slice(azureProviderIdPrefix.length));
}

/** The resource id of a VM or scale-set VM, in ARM's canonical casing. */
export function formatAzureVmId(ref: AzureVmRef): string {
  const base = `/subscriptions/${ref.subscriptionId}/resourceGroups/${ref.resourceGroup}/providers/Microsoft.Compute`;
  return ref.kind === 'vm'
    ? `${base}/virtualMachines/${ref.name}`
    : `${base}/virtualMachineScaleSets/${ref.scaleSet}/virtualMachines/${ref.instanceId}`;
}

/** The providerID the Azure cloud provider gives a node on this VM. */
export function formatAzureProviderID(ref: AzureVmRef): string {
  return `${azureProviderIdPrefix}${formatAzureVmId(ref)}`;
}

/** Whether two Azure names are the same (Azure compares subscription and group names case-insensitively). */
export function sameAzureName(a: string, b: string): boolean {
  return a.toLowerCase() === b.toLowerCase();
}
