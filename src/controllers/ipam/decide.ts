/**
 * What IPAM does with one node (pure): assign the cloud's ranges to a node that has none, leave a node
 * that has them alone, and never overwrite — a node whose ranges differ from the cloud's, or a range
 * another node already holds, is a conflict to report, not to resolve.
 */
import { parseCidr, sameRanges } from './cidr.ts';
import type { CloudPodRanges } from './pod-ranges.ts';

/** Why a node's ranges conflict; the `reason` label of `ipam_controller_conflicts_total`. */
export type ConflictReason =
  /** The node's name is not one of the names of the instance its providerID names (a copied providerID). */
  | 'not-its-instance'
  /** The node has podCIDRs and they are not the ranges the cloud routes to its instance. */
  | 'existing-differs'
  /** Another node holds (an overlap of) the range. */
  | 'range-in-use'
  /** The cloud's facts name no single range per family (two ENIs, two prefixes, a malformed range). */
  | 'unusable-cloud-range';

/** The decision for one node. */
export type IpamDecision =
  | { action: 'assign'; cidrs: string[] }
  | { action: 'unchanged' }
  /** The cloud routes no range to the node yet. */
  | { action: 'wait'; reason: string }
  | { action: 'conflict'; reason: ConflictReason; message: string };

/** What the decision is made from. */
export interface IpamFacts {
  node: string;
  /** The node's `spec.podCIDRs` (or its `spec.podCIDR` alone) as found. */
  current: readonly string[];
  cloud: CloudPodRanges;
  /** Why the node is not the instance the ranges were read from, when it is not (AWS, GCE). */
  notItsInstance?: string;
  /** The other nodes holding a range that overlaps `cidr` (the {@link RangeIndex} and in-flight claims). */
  holders: (cidr: string) => string[];
}

/** Nodes other than `node` holding any of `cidrs`, as a message fragment; undefined when none. */
function heldElsewhere(cidrs: readonly string[], holders: IpamFacts['holders']): string | undefined {
  const parts = cidrs.flatMap((cidr) => {
    const nodes = holders(cidr);
    return nodes.length === 0 ? [] : [`${cidr} is held by node ${nodes.join(', node ')}`];
  });
  return parts.length === 0 ? undefined : parts.join('; ');
}

/** Decides what to do with one node. */
export function decide(facts: IpamFacts): IpamDecision {
  const { node, current, cloud, holders } = facts;
  if (facts.notItsInstance !== undefined) {
    return {
      action: 'conflict',
      reason: 'not-its-instance',
      message: `not assigning podCIDRs: ${facts.notItsInstance}`,
    };
  }
  if (current.length > 0) {
    if (cloud.kind === 'ranges' && !sameRanges(current, cloud.cidrs)) {
      return {
        action: 'conflict',
        reason: 'existing-differs',
        message: `node ${node} has podCIDRs ${current.join(', ')}, but the cloud routes ${cloud.cidrs.join(', ')} to its instance; left as it is`,
      };
    }
    const parseable = current.filter((text) => {
      try {
        parseCidr(text);
        return true;
      } catch {
        return false;
      }
    });
    const shared = heldElsewhere(parseable, holders);
    if (shared !== undefined) {
      return {
        action: 'conflict',
        reason: 'range-in-use',
        message: `node ${node}'s podCIDR ${shared} too; two nodes must not share a pod range`,
      };
    }
    return { action: 'unchanged' };
  }
  switch (cloud.kind) {
    case 'none':
      return { action: 'wait', reason: cloud.reason };
    case 'unusable':
      return {
        action: 'conflict',
        reason: 'unusable-cloud-range',
        message: `not assigning podCIDRs to node ${node}: ${cloud.reason}`,
      };
    case 'ranges': {
      const shared = heldElsewhere(cloud.cidrs, holders);
      if (shared !== undefined) {
        return {
          action: 'conflict',
          reason: 'range-in-use',
          message: `not assigning podCIDRs to node ${node}: the cloud's range ${shared}`,
        };
      }
      return { action: 'assign', cidrs: cloud.cidrs };
    }
  }
}
