/**
 * The slim record the NodeController caches per Node: only what labelling reads. A 5,000-node cluster's
 * Node objects carry images, conditions and addresses worth tens of kilobytes each; none of it matters
 * here, and a status heartbeat (most Node updates) changes nothing this record holds.
 */
import type { V1Node } from '@kubernetes/client-node';
import { InvalidInputError } from '../../errors.ts';
import { isJsonObject, isStringMap } from '../../json-object.ts';
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

/** A map of strings (labels, annotations) as sent; absent is empty; anything else is refused. */
function stringMapOf(value: unknown, what: string): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (!isStringMap(value)) throw new InvalidInputError(`${what} is not a map of strings`);
  return value;
}

/** A string field as sent; absent is `''`; anything else is refused. */
export function stringOf(value: unknown, what: string): string {
  if (value === undefined || value === null) return '';
  if (typeof value !== 'string') throw new InvalidInputError(`${what} is not a string`);
  return value;
}

/** The longest Node name: a DNS subdomain, as the API server validates it. */
const maxNodeNameLength = 253;

/**
 * A Node's name as sent; one longer than any the API server accepts is refused: every call naming it
 * would fail (a request line of megabytes), retried for ever, each failure logging the name whole.
 */
export function nodeNameOf(value: unknown): string {
  const name = stringOf(value, 'metadata.name');
  if (name.length > maxNodeNameLength) {
    throw new InvalidInputError(
      `metadata.name is ${name.length} characters long; a Node's is ${maxNodeNameLength} at most`,
    );
  }
  return name;
}

/**
 * The informer transform: a Node in its wire shape to a {@link NodeRecord}. A Node whose fields do
 * not have the types the API server gives them is refused (thrown: the informer skips it, logging
 * why), and so is one without a uid, which its patch must name: read as they came, a providerID `42`
 * went to the cloud, a label map that was a string was diffed by its characters, and a Node without
 * a uid was patched without the check that it is still the Node the plan was made for.
 */
export function nodeRecordOf(node: V1Node): NodeRecord {
  const wire = node as unknown as { metadata?: unknown; spec?: unknown };
  const metadata = isJsonObject(wire.metadata) ? wire.metadata : {};
  const spec = wire.spec === undefined || wire.spec === null ? {} : wire.spec;
  if (!isJsonObject(spec)) throw new InvalidInputError('spec is not an object');
  const uid = stringOf(metadata['uid'], 'metadata.uid');
  if (uid === '') throw new InvalidInputError('metadata.uid is missing');
  const annotations = stringMapOf(metadata['annotations'], 'metadata.annotations');
  return {
    name: nodeNameOf(metadata['name']),
    uid,
    providerID: stringOf(spec['providerID'], 'spec.providerID'),
    labels: stringMapOf(metadata['labels'], 'metadata.labels'),
    managedLabels: annotations[managedLabelsAnnotation],
    managedLabelsSignature: annotations[managedLabelsSignatureAnnotation],
    resourceVersion: stringOf(metadata['resourceVersion'], 'metadata.resourceVersion'),
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
