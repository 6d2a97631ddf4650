/** The plain JSON shape of a stored Kubernetes object and small helpers over it. */

/** Object metadata, as the simulator reads and writes it. */
export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  deletionGracePeriodSeconds?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: unknown[];
  [field: string]: unknown;
}

/** Any Kubernetes object. */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

/** The identity of a requester, as authentication established it. */
export interface SimUser {
  name: string;
  groups: string[];
  uid?: string;
}

/** Whether a value is a plain JSON object (not null, not an array). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** A deep copy of a JSON value. */
export function cloneJson<T>(value: T): T {
  return structuredClone(value);
}

/** Reads a dotted path (`spec.nodeName`) from an object; missing steps give undefined. */
export function readPath(value: unknown, path: string): unknown {
  let current = value;
  for (const step of path.split('.')) {
    if (!isRecord(current)) return undefined;
    current = current[step];
  }
  return current;
}

/** Deep JSON equality, for spec comparisons and the JSON patch `test` operation. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) {
    return Array.isArray(b) && a.length === b.length && a.every((item, i) => jsonEqual(item, b[i]));
  }
  if (isRecord(a) && isRecord(b)) {
    const keys = Object.keys(a);
    if (keys.length !== Object.keys(b).length) return false;
    return keys.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]));
  }
  return false;
}

/** The current time as the API writes timestamps (RFC 3339, second precision). */
export function timestamp(now: Date = new Date()): string {
  return now.toISOString().replace(/\.\d{3}Z$/, 'Z');
}
