/**
 * PATCH helpers that always send the right Content-Type. Without one, client-node 2.0.1 labels every
 * patch `application/json-patch+json`, and a real apiserver rejects a merge-style body sent that way.
 */
import {
  type ConfigurationOptions,
  type CoreV1Api,
  PatchStrategy,
  setHeaderOptions,
  type V1Node,
} from '@kubernetes/client-node';
import { fromApiException } from './api-errors.ts';

/** The patch types the helpers send. */
export type PatchType = 'strategic-merge' | 'merge' | 'json';

const contentTypes: Record<PatchType, string> = {
  'strategic-merge': PatchStrategy.StrategicMergePatch,
  merge: PatchStrategy.MergePatch,
  json: PatchStrategy.JsonPatch,
};

/** Request options that send a patch of `type`; pass them as the second argument of any `patch*` call. */
export function patchOptions(type: PatchType): ConfigurationOptions {
  return setHeaderOptions('Content-Type', contentTypes[type]);
}

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

/** A strategic-merge / merge patch body changing `metadata.labels` and `metadata.annotations`. */
export function metadataPatch(changes: { labels?: MapChanges; annotations?: MapChanges }): {
  metadata: { labels?: Record<string, string | null>; annotations?: Record<string, string | null> };
} {
  const metadata: { labels?: Record<string, string | null>; annotations?: Record<string, string | null> } =
    {};
  if (changes.labels) metadata.labels = mapPatch(changes.labels);
  if (changes.annotations) metadata.annotations = mapPatch(changes.annotations);
  return { metadata };
}

/** Patches a Node with a body of the given type; API failures become typed errors. */
export async function patchNode(
  core: CoreV1Api,
  name: string,
  body: unknown,
  type: PatchType,
  fieldManager = 'kops-controller',
): Promise<V1Node> {
  try {
    return await core.patchNode({ name, body, fieldManager }, patchOptions(type));
  } catch (err) {
    throw fromApiException(err, `patch node ${name}`);
  }
}
