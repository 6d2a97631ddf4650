/**
 * Node PATCHes with the right Content-Type, sent over the pooled API-server client (src/kube/kube-https.ts):
 * an instance-group edit or a first start patches every Node of a group, 16 at a time, and through
 * client-node each patch cost the controller more CPU than the rest of its reconcile (a fetch
 * dispatcher, web streams and the object serializer's walk of the whole answered Node;
 * docs/performance.md). Each patch names its kind in its Content-Type, as a real apiserver requires.
 */
import type { V1Node } from '@kubernetes/client-node';
import { KopsError } from '../errors.ts';
import { type KubeHttps, kubeAnswerError, kubeJson, maxNodeBytes } from './kube-https.ts';

/** The patch types the helpers send. */
export type PatchType = 'strategic-merge' | 'merge' | 'json';

const contentTypes: Record<PatchType, string> = {
  'strategic-merge': 'application/strategic-merge-patch+json',
  merge: 'application/merge-patch+json',
  json: 'application/json-patch+json',
};

/**
 * The deadline of one patch, waiting for a pooled connection included; a patch that misses it is
 * retried by its controller's queue with backoff.
 */
export const patchTimeoutMs = 30_000;

/** Keys to set (key → value) and keys to remove from a string map such as labels or annotations. */
export interface MapChanges {
  set?: Record<string, string>;
  remove?: readonly string[];
}

/** A merge-style map fragment: set keys keep their value, removed keys become `null` (delete). */
export function mapPatch(changes: MapChanges): Record<string, string | null> {
  const patch: Record<string, string | null> = {};
  for (const key of changes.remove ?? []) patch[key] = null;
  for (const [key, value] of Object.entries(changes.set ?? {})) patch[key] = value;
  return patch;
}

/** The `metadata` of a {@link metadataPatch} body. */
export interface MetadataPatch {
  uid?: string;
  labels?: Record<string, string | null>;
  annotations?: Record<string, string | null>;
}

/**
 * A strategic-merge / merge patch body changing `metadata.labels` and `metadata.annotations`. With
 * `uid` (the object's, as read when the change was planned), the patch applies to that object only:
 * the API server refuses it when the name now belongs to another object (deleted and re-created),
 * with 422 Invalid `metadata.uid: … field is immutable` (see {@link isUidMismatch}).
 */
export function metadataPatch(changes: { uid?: string; labels?: MapChanges; annotations?: MapChanges }): {
  metadata: MetadataPatch;
} {
  const metadata: MetadataPatch = {};
  if (changes.uid) metadata.uid = changes.uid;
  if (changes.labels) metadata.labels = mapPatch(changes.labels);
  if (changes.annotations) metadata.annotations = mapPatch(changes.annotations);
  return { metadata };
}

/** Options of {@link patchNode}. */
export interface PatchOptions {
  /** The field manager the API server records (default `kops-controller`). */
  fieldManager?: string;
  /**
   * Gives up on the patch when it aborts (the controller stopping): the call rejects at once with the
   * signal's reason and its connection is closed; a patch not yet sent is not sent. One already sent
   * is applied whole or not at all, and whoever reconciles the Node next computes the change again.
   */
  signal?: AbortSignal;
}

/**
 * Patches a Node with a body of the given type and returns the Node as the API server answered it (plain
 * JSON: timestamps stay strings). Failures are typed errors: NotFoundError for a deleted Node,
 * ConflictError for a stale resourceVersion, UnavailableError or TimeoutError when the API server
 * cannot be reached; with `signal`, its reason once it aborts.
 */
export async function patchNode(
  call: KubeHttps,
  name: string,
  body: unknown,
  type: PatchType,
  options: PatchOptions = {},
): Promise<V1Node> {
  const { fieldManager = 'kops-controller', signal } = options;
  const action = `patch node ${name}`;
  const answer = await call({
    action,
    method: 'PATCH',
    path: `/api/v1/nodes/${encodeURIComponent(name)}?fieldManager=${encodeURIComponent(fieldManager)}`,
    body: JSON.stringify(body),
    contentType: contentTypes[type],
    maxBodyBytes: maxNodeBytes,
    ...(signal ? { signal } : {}),
  });
  if (answer.status !== 200) throw kubeAnswerError(answer, action);
  return kubeJson<V1Node>(answer, action);
}

/**
 * Whether a patch failed because the object it named by `metadata.uid` is gone, its name now another
 * object's. A PATCH has no preconditions of its own: the API server applies it to whatever holds the
 * name, and a different `metadata.uid` then fails update validation as an immutable field (422
 * Invalid, `<Kind> "<name>" is invalid: metadata.uid: Invalid value: "<uid>": field is immutable`;
 * Kubernetes' own controllers read that 422 the same way, controller_ref_manager.go). A 409 whose
 * message is the storage precondition's ("Precondition failed: UID in precondition") is accepted too.
 */
export function isUidMismatch(err: unknown): boolean {
  if (!(err instanceof KopsError)) return false;
  if (err.kind === 'invalid') return /metadata\.uid: Invalid value: .*field is immutable/.test(err.message);
  if (err.kind === 'conflict') return err.message.includes('Precondition failed: UID in precondition');
  return false;
}
