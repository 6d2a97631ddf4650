/**
 * A node's pod ranges as each cloud records them, decided from the cloud's facts alone (pure):
 * AWS — the IPv6 prefix delegated to the instance's one ENI (kops' awsipam.go); GCE — the external
 * IPv6 range of the instance's interfaces (kops' gceipam.go); metal — the `podCIDRs` of the node's Host. Like kops, IPAM never guesses between candidates: two ENIs,
 * two prefixes or two ranges of one family make the answer unusable, and the operator is told why.
 */
import type { AttachedEni } from '../../cloud/aws/instance.ts';
import type { GceRoutedRanges } from '../../cloud/gce/node-identifier.ts';
import { describeError } from '../../errors.ts';
import { parseCidr } from './cidr.ts';

/** What the cloud says a node's pod ranges are. */
export type CloudPodRanges =
  /** The ranges to assign, canonical, at most one per family (IPv4 first, as Kubernetes orders dual-stack). */
  | { kind: 'ranges'; cidrs: string[] }
  /** The cloud routes no range to the node (yet): nothing to assign. */
  | { kind: 'none'; reason: string }
  /** The cloud's facts name no single range per family: nothing is assigned, the operator must look. */
  | { kind: 'unusable'; reason: string };

/**
 * The ranges to assign from candidate texts: each must parse, at most one per family. `what` names
 * where they come from in the reasons.
 */
export function podRangesOf(candidates: readonly string[], what: string): CloudPodRanges {
  if (candidates.length === 0) return { kind: 'none', reason: `${what} has no pod range` };
  const byFamily = new Map<4 | 6, string[]>();
  for (const text of candidates) {
    let family: 4 | 6;
    let canonical: string;
    try {
      ({ family, text: canonical } = parseCidr(text));
    } catch (err) {
      return { kind: 'unusable', reason: `${what}: ${describeError(err)}` };
    }
    byFamily.set(family, [...(byFamily.get(family) ?? []), canonical]);
  }
  for (const [family, ranges] of byFamily) {
    if (ranges.length > 1) {
      return {
        kind: 'unusable',
        reason: `${what} has ${ranges.length} IPv${family} ranges (${ranges.join(', ')}); a node takes one per family`,
      };
    }
  }
  return { kind: 'ranges', cidrs: [...(byFamily.get(4) ?? []), ...(byFamily.get(6) ?? [])] };
}

/** AWS: the one IPv6 prefix delegated to the instance's one ENI, as kops requires. */
export function awsPodRanges(instanceId: string, enis: readonly AttachedEni[]): CloudPodRanges {
  if (enis.length === 0) return { kind: 'none', reason: `instance ${instanceId} has no network interface` };
  if (enis.length > 1) {
    return {
      kind: 'unusable',
      reason: `instance ${instanceId} has ${enis.length} network interfaces (${enis.map((e) => e.networkInterfaceId).join(', ')}); the pod range is taken only from an instance with exactly one`,
    };
  }
  const eni = enis[0] as AttachedEni;
  if (eni.ipv6Prefixes.length > 1) {
    return {
      kind: 'unusable',
      reason: `network interface ${eni.networkInterfaceId} of instance ${instanceId} has ${eni.ipv6Prefixes.length} IPv6 prefixes (${eni.ipv6Prefixes.join(', ')}); the pod range is taken only from exactly one`,
    };
  }
  return podRangesOf(
    eni.ipv6Prefixes,
    `network interface ${eni.networkInterfaceId} of instance ${instanceId}`,
  );
}

/**
 * GCE: the one external IPv6 range of the instance's interfaces, as kops. Not the alias IPv4 range
 * kops gives IPv6-only clusters on IP-alias or kindnet networking: kops never assigns it, and a node
 * of an IPv6-only cluster given it would look dual-stack with IPv4 first.
 */
export function gcePodRanges(instanceName: string, ranges: GceRoutedRanges): CloudPodRanges {
  return podRangesOf(ranges.externalIpv6Ranges, `the network interfaces of instance ${instanceName}`);
}

/** Metal: the `spec.podCIDRs` of the node's Host, written by the operator. */
export function hostPodRanges(nodeName: string, podCIDRs: readonly string[] | undefined): CloudPodRanges {
  if (podCIDRs === undefined) return { kind: 'none', reason: `no Host record names node ${nodeName}` };
  return podRangesOf(podCIDRs, `the Host record of node ${nodeName}`);
}
