/**
 * Turning desired labels into a node update. The controller owns only the labels it applied: it
 * records their keys (the "managed" set) and later removes a label only if it was managed and is no
 * longer desired, so labels set by people or other controllers are never touched. The set read back
 * from a Node is node-writable data: it is trusted only with the controller's signature
 * (signed-managed-labels.ts), which is where the NodeController gets `previouslyManaged` from.
 */
import { roleLabels } from './build-node-labels.ts';

/** Role labels kops itself prunes even when no managed set was recorded (kops' behaviour since 1.28). */
export const alwaysPrunedLabels: readonly string[] = [
  roleLabels.apiServer,
  roleLabels.node,
  roleLabels.controlPlane,
];

/**
 * The node annotation that records the keys of the labels the controller applied; believed only with
 * its signature (`kops.k8s.io/managed-labels-signature`, signed-managed-labels.ts).
 */
export const managedLabelsAnnotation = 'kops.k8s.io/managed-labels';

/** What to change on a node. */
export interface LabelDiff {
  /** Labels to add or overwrite. */
  set: Record<string, string>;
  /** Label keys to delete. */
  remove: string[];
  /** The managed set after the change: the desired keys, sorted. */
  managed: string[];
}

/**
 * Compares a node's `current` labels with the `desired` ones: labels missing or different are set;
 * labels present, not desired, and either `previouslyManaged` or a kops role label are removed.
 * `previouslyManaged` is pruned from as given: pass only a set the caller trusts (a verified one).
 */
export function diffLabels(
  current: Readonly<Record<string, string>>,
  desired: Readonly<Record<string, string>>,
  previouslyManaged: Iterable<string>,
): LabelDiff {
  const set: Record<string, string> = {};
  for (const [key, value] of Object.entries(desired)) {
    if (current[key] !== value) set[key] = value;
  }
  const prunable = new Set([...previouslyManaged, ...alwaysPrunedLabels]);
  const remove = Object.keys(current)
    .filter((key) => prunable.has(key) && !Object.hasOwn(desired, key))
    .sort();
  return { set, remove, managed: Object.keys(desired).sort() };
}

/** Whether a diff changes nothing. */
export function isEmptyDiff(diff: LabelDiff): boolean {
  return diff.remove.length === 0 && Object.keys(diff.set).length === 0;
}

/** Encodes a managed set for the annotation (label keys cannot contain commas). */
export function formatManagedLabels(keys: Iterable<string>): string {
  return [...new Set(keys)].sort().join(',');
}

/** Reads the annotation back; a missing or empty annotation is an empty set. */
export function parseManagedLabels(annotation: string | undefined): string[] {
  if (!annotation) return [];
  return annotation
    .split(',')
    .map((k) => k.trim())
    .filter((k) => k !== '');
}
