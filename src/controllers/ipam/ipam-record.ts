/**
 * The slim record the IPAM controller caches per Node: its name, providerID and pod ranges. A status
 * heartbeat changes none of them, so it queues no work.
 */
import type { V1Node } from '@kubernetes/client-node';
import { sameRanges } from './cidr.ts';

/** What the IPAM controller knows about one Node. */
export interface IpamNodeRecord {
  name: string;
  uid: string;
  /** `spec.providerID`; empty until the kubelet or cloud controller sets it. */
  providerID: string;
  /** `spec.podCIDRs`, or `[spec.podCIDR]` when only the singular field is set. */
  podCIDRs: string[];
  /** Sent with the patch, so a node changed since it was read is not written over. */
  resourceVersion: string;
}

/** The informer transform: a Node in its wire shape to an {@link IpamNodeRecord}. */
export function ipamRecordOf(node: V1Node): IpamNodeRecord {
  const spec = node.spec;
  return {
    name: node.metadata?.name ?? '',
    uid: node.metadata?.uid ?? '',
    providerID: spec?.providerID ?? '',
    podCIDRs: spec?.podCIDRs?.length ? [...spec.podCIDRs] : spec?.podCIDR ? [spec.podCIDR] : [],
    resourceVersion: node.metadata?.resourceVersion ?? '',
  };
}

/** Whether an update can change what IPAM decides: a new providerID or new pod ranges. */
export function needsReconcile(before: IpamNodeRecord, after: IpamNodeRecord): boolean {
  return before.providerID !== after.providerID || !sameRanges(before.podCIDRs, after.podCIDRs);
}
