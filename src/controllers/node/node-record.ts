/**
 * The slim record the NodeController caches per Node: only what labelling reads. A 5,000-node cluster's
 * Node objects carry images, conditions and addresses worth tens of kilobytes each; none of it matters
 * here, and a status heartbeat (most Node updates) changes nothing this record holds.
 */
import type { V1Node } from '@kubernetes/client-node';
import { managedLabelsAnnotation } from '../../nodelabels/diff-labels.ts';
import { managedLabelsSignatureAnnotation } from '../../nodelabels/signed-managed-labels.ts';

/** What the NodeController knows about one Node. */
export interface NodeRecord {
  name: string;
  uid: string;
  /** `spec.providerID`; empty until the kubelet or cloud controller sets it. */
  providerID: string;
  labels: Readonly<Record<string, string>>;
  /** The managed-labels annotation as found on the node (undefined when absent). */
  managedLabels: string | undefined;
  /** Its signature annotation as found on the node (undefined when absent). */
  managedLabelsSignature: string | undefined;
  resourceVersion: string;
}

/** The informer transform: a Node in its wire shape to a {@link NodeRecord}. */
export function nodeRecordOf(node: V1Node): NodeRecord {
  return {
    name: node.metadata?.name ?? '',
    uid: node.metadata?.uid ?? '',
    providerID: node.spec?.providerID ?? '',
    labels: node.metadata?.labels ?? {},
    managedLabels: node.metadata?.annotations?.[managedLabelsAnnotation],
    managedLabelsSignature: node.metadata?.annotations?.[managedLabelsSignatureAnnotation],
    resourceVersion: node.metadata?.resourceVersion ?? '',
  };
}

function sameLabels(a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
}

/**
 * Whether an update can change what the controller would do: a new providerID, labels, managed set or
 * its signature.
 * Status-only updates (kubelet heartbeats, every few seconds per node) are not worth a reconcile.
 */
export function needsReconcile(before: NodeRecord, after: NodeRecord): boolean {
  return (
    before.providerID !== after.providerID ||
    before.managedLabels !== after.managedLabels ||
    before.managedLabelsSignature !== after.managedLabelsSignature ||
    !sameLabels(before.labels, after.labels)
  );
}
