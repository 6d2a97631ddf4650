/**
 * The slim record the IPAM controller caches per Node: its name, providerID and pod ranges. A status
 * heartbeat changes none of them, so it queues no work.
 */
import type { V1Node } from '@kubernetes/client-node';
import { InvalidInputError } from '../../errors.ts';
import { isJsonObject, isStringList } from '../../json-object.ts';
import { nodeNameOf, stringOf } from '../node/node-record.ts';
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

/**
 * The informer transform: a Node in its wire shape to an {@link IpamNodeRecord}. A Node whose fields
 * do not have the types the API server gives them is refused (thrown: the informer skips it, logging
 * why), and so is one without a resourceVersion, which the patch must carry: read as they came,
 * `podCIDRs: "10.1.0.0/24"` was a node holding the ranges `1`, `0`, `.`… (a conflict reported from
 * its characters), and `podCIDRs: 5` a node with no range, given one over whatever it held.
 */
export function ipamRecordOf(node: V1Node): IpamNodeRecord {
  const wire = node as unknown as { metadata?: unknown; spec?: unknown };
  const metadata = (wire.metadata ?? {}) as Record<string, unknown>;
  const fields = wire.spec === undefined || wire.spec === null ? {} : wire.spec;
  if (!isJsonObject(fields)) throw new InvalidInputError('spec is not an object');
  const podCIDRs = fields['podCIDRs'] ?? [];
  if (!isStringList(podCIDRs)) {
    throw new InvalidInputError('spec.podCIDRs is not a list of strings');
  }
  const podCIDR = stringOf(fields['podCIDR'], 'spec.podCIDR');
  const resourceVersion = stringOf(metadata['resourceVersion'], 'metadata.resourceVersion');
  if (resourceVersion === '') throw new InvalidInputError('metadata.resourceVersion is missing');
  return {
    name: nodeNameOf(metadata['name']),
    uid: stringOf(metadata['uid'], 'metadata.uid'),
    providerID: stringOf(fields['providerID'], 'spec.providerID'),
    podCIDRs: podCIDRs.length ? [...(podCIDRs as string[])] : podCIDR ? [podCIDR] : [],
    resourceVersion,
  };
}

/** Whether an update can change what IPAM decides: a new providerID or new pod ranges. */
export function needsReconcile(before: IpamNodeRecord, after: IpamNodeRecord): boolean {
  return before.providerID !== after.providerID || !sameRanges(before.podCIDRs, after.podCIDRs);
}
