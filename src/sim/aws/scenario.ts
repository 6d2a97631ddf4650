/** Generated seed data: many instances of a kops cluster, with deterministic ids and addresses. */
import type { SimInstanceInput } from './world.ts';

/** The n-th deterministic 17-digit instance id (`i-` then 17 hex digits). */
export function simInstanceId(n: number): string {
  return `i-${n.toString(16).padStart(17, '0')}`;
}

/** The n-th deterministic launch template id (`lt-` then 17 hex digits). */
export function simLaunchTemplateId(n: number): string {
  return `lt-${n.toString(16).padStart(17, '0')}`;
}

/** What to generate: `count` running instances of one instance group, spread over `zones`. */
export interface ClusterInstancesSpec {
  cluster: string;
  instanceGroup: string;
  count: number;
  zones?: readonly string[];
  /** Number of the first id, so that groups do not collide (default 1). */
  firstId?: number;
  /** Delegate one IPv6 /80 ({@link simIpv6Prefix}) to each instance's ENI, as a kops IPv6 cluster does. */
  ipv6Prefixes?: boolean;
}

/** The n-th deterministic IPv6 /80 (`2001:db8:0:1:<n>::/80`, n < 65,536), distinct per instance. */
export function simIpv6Prefix(n: number): string {
  return `2001:db8:0:1:${n.toString(16)}::/80`;
}

/** Instances a kops cluster of that shape would have. */
export function clusterInstances(spec: ClusterInstancesSpec): SimInstanceInput[] {
  const zones = spec.zones ?? ['us-east-1a', 'us-east-1b', 'us-east-1c'];
  const first = spec.firstId ?? 1;
  return Array.from({ length: spec.count }, (_, i) => ({
    id: simInstanceId(first + i),
    zone: zones[i % zones.length] as string,
    cluster: spec.cluster,
    instanceGroup: spec.instanceGroup,
    ...(spec.ipv6Prefixes ? { ipv6Prefixes: [simIpv6Prefix(first + i)] } : {}),
  }));
}

/** The providerID a kubelet with the AWS cloud provider sets for an instance. */
export function awsProviderID(instance: { id: string; zone: string }): string {
  return `aws:///${instance.zone}/${instance.id}`;
}
