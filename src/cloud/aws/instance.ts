/**
 * What an EC2 instance record proves about a node. Pure: the identifier fetches the record, these
 * functions decide whether it is one of this cluster's live kops instances and what its identity is.
 * Everything comes from EC2's own fields and tags, which a node cannot change about itself (kops
 * nodes' IAM roles have no ec2:CreateTags).
 */
import type { Instance } from '@aws-sdk/client-ec2';
import { ForbiddenError, UnavailableError } from '../../errors.ts';
import { instanceGroupNameProblem } from '../instance-group-name.ts';
import type { Incarnation, InstanceAddress, InstanceState, NodeIdentity } from '../types.ts';

/** The tag kops sets on every instance to the name of its instance group. */
export const instanceGroupTag = 'kops.k8s.io/instancegroup';
/** The legacy cluster ownership tag: `KubernetesCluster=<cluster name>`. */
export const legacyClusterTag = 'KubernetesCluster';

/** The ownership tag key of a cluster: `kubernetes.io/cluster/<name>` = `owned` or `shared`. */
export function clusterTagKey(clusterName: string): string {
  return `kubernetes.io/cluster/${clusterName}`;
}

/** An ENI attached to an instance and the IPv6 prefixes delegated to it. */
export interface AttachedEni {
  networkInterfaceId: string;
  ipv6Prefixes: string[];
}

/**
 * An instance's identity before it is tied to the providerID it was asked for, with its attached
 * ENIs: the IPv6 prefix delegated to one is the node's pod range in a kops IPv6 cluster (IPAM).
 */
export type InstanceIdentity = Omit<NodeIdentity, 'providerID'> & {
  zone: string;
  networkInterfaces: AttachedEni[];
};

/** Normalises an EC2 state name. */
export function instanceStateOf(name: string | undefined): InstanceState {
  switch (name) {
    case 'pending':
    case 'running':
    case 'stopping':
    case 'stopped':
    case 'terminated':
      return name;
    case 'shutting-down':
      return 'stopping';
    default:
      return 'unknown';
  }
}

/** The instance's tags as a plain object. */
export function tagsOf(instance: Pick<Instance, 'Tags'>): Record<string, string> {
  const tags: Record<string, string> = {};
  for (const tag of instance.Tags ?? []) if (tag.Key !== undefined) tags[tag.Key] = tag.Value ?? '';
  return tags;
}

/**
 * Whether tags mark a resource as this cluster's: `KubernetesCluster=<name>` or
 * `kubernetes.io/cluster/<name>` = owned/shared, and no `KubernetesCluster` naming another cluster.
 */
export function ownedByCluster(tags: Readonly<Record<string, string>>, clusterName: string): boolean {
  const legacy = tags[legacyClusterTag];
  if (legacy !== undefined && legacy !== clusterName) return false;
  const modern = tags[clusterTagKey(clusterName)];
  return legacy === clusterName || modern === 'owned' || modern === 'shared';
}

/** The addresses EC2 reports for an instance, usable as certificate SANs; no duplicates. */
export function addressesOf(instance: Instance): InstanceAddress[] {
  const addresses: InstanceAddress[] = [];
  const add = (type: InstanceAddress['type'], address: string | undefined) => {
    if (address && !addresses.some((a) => a.type === type && a.address === address))
      addresses.push({ type, address });
  };
  add('InternalIP', instance.PrivateIpAddress);
  const primary =
    instance.NetworkInterfaces?.find((n) => n.Attachment?.DeviceIndex === 0) ??
    instance.NetworkInterfaces?.[0];
  add('InternalIP', primary?.Ipv6Addresses?.[0]?.Ipv6Address);
  add('InternalDNS', instance.PrivateDnsName);
  add('ExternalIP', instance.PublicIpAddress);
  add('ExternalDNS', instance.PublicDnsName);
  return addresses;
}

/** The ENIs EC2 reports attached to an instance, each with its delegated IPv6 prefixes. */
export function attachedEnisOf(instance: Instance): AttachedEni[] {
  return (instance.NetworkInterfaces ?? []).map((eni) => ({
    networkInterfaceId: eni.NetworkInterfaceId ?? '',
    ipv6Prefixes: (eni.Ipv6Prefixes ?? []).flatMap((p) => (p.Ipv6Prefix ? [p.Ipv6Prefix] : [])),
  }));
}

function refuse(instanceId: string, reason: string, message: string): ForbiddenError {
  return new ForbiddenError(message, { details: { instanceId, reason } });
}

/**
 * Checks an EC2 instance record and derives the node identity it proves. Throws ForbiddenError when
 * the instance belongs to another cluster (or none), is not pending/running, or carries no instance
 * group tag.
 */
export function identityFromInstance(instance: Instance, clusterName: string): InstanceIdentity {
  const instanceId = instance.InstanceId ?? '';
  const tags = tagsOf(instance);
  if (!ownedByCluster(tags, clusterName)) {
    const claimed = tags[legacyClusterTag];
    throw refuse(
      instanceId,
      'foreign-cluster',
      `instance ${instanceId} does not belong to cluster ${clusterName}` +
        (claimed === undefined
          ? ' (it has no cluster ownership tag)'
          : ` (it is tagged for cluster ${claimed})`) +
        '; a node may only claim an instance of its own cluster',
    );
  }
  const stateName = instance.State?.Name;
  if (!stateName) {
    // EC2 always reports a state: a record without one is a broken answer, not a stopped instance.
    throw new UnavailableError(`EC2 answered instance ${instanceId} without its state`, {
      details: { instanceId, reason: 'malformed-answer' },
    });
  }
  const state = instanceStateOf(stateName);
  if (state !== 'pending' && state !== 'running') {
    throw refuse(
      instanceId,
      'not-running',
      `instance ${instanceId} is ${stateName ?? 'in an unknown state'}, not pending or running`,
    );
  }
  const instanceGroup = tags[instanceGroupTag];
  if (!instanceGroup) {
    throw refuse(
      instanceId,
      'no-instance-group',
      `instance ${instanceId} has no ${instanceGroupTag} tag, so it is not part of a kops instance group`,
    );
  }
  const nameProblem = instanceGroupNameProblem(instanceGroup);
  if (nameProblem) {
    throw refuse(
      instanceId,
      'invalid-instance-group',
      `instance ${instanceId}: its ${instanceGroupTag} tag ${nameProblem}`,
    );
  }
  const zone = instance.Placement?.AvailabilityZone ?? '';
  const lifecycle = instance.InstanceLifecycle;
  return {
    instanceId,
    instanceGroup,
    state,
    zone,
    ...(instanceId ? { incarnation: incarnationOf(instanceId, instance.LaunchTime) } : {}),
    addresses: addressesOf(instance),
    networkInterfaces: attachedEnisOf(instance),
    ...(lifecycle ? { cloudLabels: { [`node-role.kubernetes.io/${lifecycle}-worker`]: 'true' } } : {}),
    ...(apiServerTemplateTag in tags ? { apiServerTagged: true } : {}),
  };
}

/**
 * The incarnation of an EC2 instance: its id, which EC2 never gives another instance, and its
 * LaunchTime. LaunchTime is the last start, not the creation: a stopped and started instance reports
 * the start. That refuses nothing a kops node needs: nodeup bootstraps again at every boot, so its
 * certificate is issued after the new LaunchTime, and a certificate of this server names the instance
 * id, which a stop and start keeps; only a certificate naming no instance and issued more than 48
 * hours before the start is refused (that machine joins again with its cloud proof).
 */
function incarnationOf(instanceId: string, launched: Date | undefined): Incarnation {
  return {
    id: instanceId,
    ...(launched instanceof Date && !Number.isNaN(launched.getTime()) ? { createdAt: launched } : {}),
  };
}

/** The node-template tag the kops CLI writes on control-plane instances with APIServerNodes on. */
const apiServerTemplateTag =
  'k8s.io/cluster-autoscaler/node-template/label/node-role.kubernetes.io/api-server';
