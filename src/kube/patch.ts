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
import { ConflictError } from '../errors.ts';
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

/** One RFC 6902 JSON-patch operation. */
export type JsonPatchOperation =
  | { op: 'add' | 'replace' | 'test'; path: string; value: unknown }
  | { op: 'remove'; path: string }
  | { op: 'move' | 'copy'; from: string; path: string };

/** Escapes one path segment for a JSON pointer (RFC 6901): `~` → `~0`, `/` → `~1`, as in label keys. */
export function escapeJsonPointer(segment: string): string {
  return segment.replaceAll('~', '~0').replaceAll('/', '~1');
}

/**
 * Prefixes `operations` with a `test` of `metadata.resourceVersion`, so the patch applies only to the
 * version the caller read: if the object changed meanwhile, the apiserver refuses the whole patch
 * (HTTP 422), which {@link patchNode} reports as a ConflictError, so the caller re-reads and retries.
 */
export function optimisticJsonPatch(
  resourceVersion: string,
  operations: readonly JsonPatchOperation[],
): JsonPatchOperation[] {
  return [{ op: 'test', path: '/metadata/resourceVersion', value: resourceVersion }, ...operations];
}

function startsWithTest(body: unknown): boolean {
  return Array.isArray(body) && (body[0] as JsonPatchOperation | undefined)?.op === 'test';
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
    const error = fromApiException(err, `patch node ${name}`);
    if (error.kind === 'invalid' && type === 'json' && startsWithTest(body)) {
      throw new ConflictError(
        `node ${name} changed since it was read (${error.message}); re-read it and retry`,
        {
          cause: err,
        },
      );
    }
    throw error;
  }
}

/**
 * Sets and removes labels of a Node in one strategic-merge patch, e.g.
 * `{"metadata":{"labels":{"k":"v","gone":null}}}`; labels not named are left alone.
 */
export function patchNodeLabels(core: CoreV1Api, name: string, changes: MapChanges): Promise<V1Node> {
  return patchNode(core, name, metadataPatch({ labels: changes }), 'strategic-merge');
}
