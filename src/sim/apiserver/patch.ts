/**
 * The three patch formats the API accepts, applied to a plain JSON object: JSON Patch (RFC 6902),
 * JSON Merge Patch (RFC 7386) and strategic merge patch with the merge keys of the served kinds.
 */
import { KopsError } from '../../errors.ts';
import { isRecord, jsonEqual } from './objects.ts';
import { badRequest } from './status.ts';

/** The patch content types, as `Content-Type` names them. */
export const patchContentTypes = {
  json: 'application/json-patch+json',
  merge: 'application/merge-patch+json',
  strategic: 'application/strategic-merge-patch+json',
  apply: 'application/apply-patch+yaml',
} as const;

/** A patch that cannot be applied to the object: 422, shaped as the API shapes it. */
function unprocessable(message: string): KopsError {
  const status = {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message: 'the server rejected our request due to an error in our request',
    reason: 'Invalid',
    details: { causes: [{ reason: 'UnexpectedServerResponse', message, field: '' }] },
    code: 422,
  };
  return new KopsError('invalid', message, { details: { status } });
}

function parsePointer(path: unknown): string[] {
  if (typeof path !== 'string' || (path !== '' && !path.startsWith('/'))) {
    throw badRequest(
      `invalid JSON Patch: path ${JSON.stringify(path)} must be a JSON pointer starting with "/"`,
    );
  }
  if (path === '') return [];
  return path
    .slice(1)
    .split('/')
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
}

interface Location {
  parent: Record<string, unknown> | unknown[];
  key: string;
}

function locate(doc: unknown, tokens: string[], op: string, path: string): Location {
  let current = doc;
  for (const token of tokens.slice(0, -1)) {
    if (Array.isArray(current)) {
      const index = Number(token);
      if (!/^\d+$/.test(token) || index >= current.length)
        throw unprocessable(`${op} operation does not apply: doc is missing path: "${path}": missing value`);
      current = current[index];
    } else if (isRecord(current) && Object.hasOwn(current, token)) {
      current = current[token];
    } else {
      throw unprocessable(`${op} operation does not apply: doc is missing path: "${path}": missing value`);
    }
  }
  if (!Array.isArray(current) && !isRecord(current)) {
    throw unprocessable(`${op} operation does not apply: doc is missing path: "${path}": missing value`);
  }
  return { parent: current, key: tokens.at(-1) as string };
}

function readAt(loc: Location, op: string, path: string): unknown {
  if (Array.isArray(loc.parent)) {
    const index = Number(loc.key);
    if (!/^\d+$/.test(loc.key) || index >= loc.parent.length)
      throw unprocessable(`${op} operation does not apply: doc is missing key: ${path}: missing value`);
    return loc.parent[index];
  }
  if (!Object.hasOwn(loc.parent, loc.key))
    throw unprocessable(`${op} operation does not apply: doc is missing key: ${path}: missing value`);
  return loc.parent[loc.key];
}

function removeAt(loc: Location, op: string, path: string): unknown {
  const value = readAt(loc, op, path);
  if (Array.isArray(loc.parent)) loc.parent.splice(Number(loc.key), 1);
  else delete loc.parent[loc.key];
  return value;
}

function addAt(loc: Location, value: unknown, path: string): void {
  if (Array.isArray(loc.parent)) {
    const index = loc.key === '-' ? loc.parent.length : Number(loc.key);
    if (!(loc.key === '-' || /^\d+$/.test(loc.key)) || index > loc.parent.length) {
      throw unprocessable(`add operation does not apply: doc is missing path: "${path}": missing value`);
    }
    loc.parent.splice(index, 0, value);
  } else {
    loc.parent[loc.key] = value;
  }
}

/** Applies an RFC 6902 JSON Patch; returns the new document (the input is not changed). */
export function applyJsonPatch(document: unknown, patch: unknown): unknown {
  if (!Array.isArray(patch))
    throw badRequest('json: cannot unmarshal object into Go value of type jsonpatch.Patch');
  let doc = structuredClone(document);
  for (const operation of patch) {
    if (!isRecord(operation))
      throw badRequest('json: cannot unmarshal non-object into Go value of type jsonpatch.Operation');
    const op = operation['op'];
    const path = operation['path'] as string;
    const tokens = parsePointer(path);
    if (op === 'test') {
      const actual = tokens.length === 0 ? doc : readAt(locate(doc, tokens, 'test', path), 'test', path);
      if (!jsonEqual(actual, operation['value']))
        throw unprocessable(`testing value ${path} failed: test failed`);
      continue;
    }
    if (tokens.length === 0) {
      if (op === 'add' || op === 'replace') doc = structuredClone(operation['value']);
      else throw unprocessable(`${String(op)} operation does not apply to the document root`);
      continue;
    }
    switch (op) {
      case 'add':
        if (!Object.hasOwn(operation, 'value'))
          throw badRequest('invalid JSON Patch: add operation needs a value');
        addAt(locate(doc, tokens, 'add', path), structuredClone(operation['value']), path);
        break;
      case 'remove':
        removeAt(locate(doc, tokens, 'remove', path), 'remove', path);
        break;
      case 'replace': {
        if (!Object.hasOwn(operation, 'value'))
          throw badRequest('invalid JSON Patch: replace operation needs a value');
        const loc = locate(doc, tokens, 'replace', path);
        readAt(loc, 'replace', path);
        if (Array.isArray(loc.parent)) loc.parent[Number(loc.key)] = structuredClone(operation['value']);
        else loc.parent[loc.key] = structuredClone(operation['value']);
        break;
      }
      case 'move':
      case 'copy': {
        const from = operation['from'] as string;
        const fromTokens = parsePointer(from);
        const source = locate(doc, fromTokens, op, from);
        const value = op === 'move' ? removeAt(source, op, from) : structuredClone(readAt(source, op, from));
        addAt(locate(doc, tokens, op, path), value, path);
        break;
      }
      default:
        throw badRequest(`Unexpected kind: ${String(op)}`);
    }
  }
  return doc;
}

/** Applies an RFC 7386 JSON Merge Patch: objects merge, null deletes, everything else replaces. */
export function applyMergePatch(document: unknown, patch: unknown): unknown {
  if (!isRecord(patch)) return structuredClone(patch);
  const target: Record<string, unknown> = isRecord(document) ? { ...document } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete target[key];
    else target[key] = applyMergePatch(target[key], value);
  }
  return target;
}

/** How a list field merges under a strategic merge patch. */
type ListStrategy = { mergeKey: string } | 'merge-primitives';

const metadataLists: Record<string, ListStrategy> = {
  'metadata.finalizers': 'merge-primitives',
  'metadata.ownerReferences': { mergeKey: 'uid' },
};

/** The `patchStrategy:"merge"` fields of the served kinds; every other list is replaced whole. */
const listStrategies: Record<string, Record<string, ListStrategy>> = {
  Node: {
    // NodeSpec.PodCIDRs is `patchStrategy:"merge"` (k8s.io/api core/v1 types.go): a set union.
    'spec.podCIDRs': 'merge-primitives',
    'status.conditions': { mergeKey: 'type' },
    'status.addresses': { mergeKey: 'type' },
  },
  Pod: {
    'spec.containers': { mergeKey: 'name' },
    'spec.initContainers': { mergeKey: 'name' },
    'spec.ephemeralContainers': { mergeKey: 'name' },
    'spec.volumes': { mergeKey: 'name' },
    'spec.imagePullSecrets': { mergeKey: 'name' },
    'spec.hostAliases': { mergeKey: 'ip' },
    'status.conditions': { mergeKey: 'type' },
    'status.podIPs': { mergeKey: 'ip' },
  },
  Namespace: { 'status.conditions': { mergeKey: 'type' } },
};

function strategyAt(kind: string, path: string): ListStrategy | undefined {
  return metadataLists[path] ?? listStrategies[kind]?.[path];
}

const deletePrefix = '$deleteFromPrimitiveList/';

function mergeMap(original: unknown, patch: Record<string, unknown>, kind: string, path: string): unknown {
  if (patch['$patch'] === 'delete') return undefined;
  if (patch['$patch'] === 'replace') {
    const { $patch: _, ...rest } = patch;
    return stripDirectives(rest);
  }
  const target: Record<string, unknown> = isRecord(original) ? { ...original } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (key === '$patch' || key === '$retainKeys' || key.startsWith('$setElementOrder/')) continue;
    if (key.startsWith(deletePrefix)) {
      const field = key.slice(deletePrefix.length);
      const current = target[field];
      if (Array.isArray(current) && Array.isArray(value))
        target[field] = current.filter((v) => !value.some((d) => jsonEqual(d, v)));
      continue;
    }
    const childPath = path ? `${path}.${key}` : key;
    if (value === null) {
      delete target[key];
    } else if (isRecord(value)) {
      const merged = mergeMap(target[key], value, kind, childPath);
      if (merged === undefined) delete target[key];
      else target[key] = merged;
    } else if (Array.isArray(value)) {
      target[key] = mergeList(target[key], value, strategyAt(kind, childPath), kind, childPath);
    } else {
      target[key] = value;
    }
  }
  return target;
}

function mergeList(
  original: unknown,
  patch: unknown[],
  strategy: ListStrategy | undefined,
  kind: string,
  path: string,
): unknown[] {
  if (patch.some((item) => isRecord(item) && item['$patch'] === 'replace')) {
    return patch.filter((item) => !(isRecord(item) && item['$patch'] === 'replace')).map(stripDirectives);
  }
  const current = Array.isArray(original) ? original : [];
  if (strategy === undefined) return patch.map(stripDirectives);
  if (strategy === 'merge-primitives') {
    const out = [...current];
    for (const item of patch) if (!out.some((v) => jsonEqual(v, item))) out.push(item);
    return out;
  }
  const { mergeKey } = strategy;
  const out = current.map((item) => item);
  for (const item of patch) {
    if (!isRecord(item))
      throw badRequest(`strategic merge patch: ${path} items must be objects with merge key "${mergeKey}"`);
    if (!Object.hasOwn(item, mergeKey)) {
      throw badRequest(`map: ${JSON.stringify(item)} does not contain declared merge key: ${mergeKey}`);
    }
    const index = out.findIndex((o) => isRecord(o) && jsonEqual(o[mergeKey], item[mergeKey]));
    if (item['$patch'] === 'delete') {
      if (index >= 0) out.splice(index, 1);
    } else if (index >= 0) {
      out[index] = mergeMap(out[index], item, kind, path);
    } else {
      out.push(stripDirectives(item));
    }
  }
  return out;
}

function stripDirectives(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(stripDirectives);
  if (!isRecord(value)) return value;
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value)) {
    if (key.startsWith('$')) continue;
    out[key] = stripDirectives(child);
  }
  return out;
}

/** Applies a strategic merge patch to an object of `kind`, with that kind's list merge keys. */
export function applyStrategicMergePatch(document: unknown, patch: unknown, kind: string): unknown {
  if (!isRecord(patch)) throw badRequest('strategic merge patch: the patch must be a JSON object');
  return mergeMap(document, patch, kind, '') ?? {};
}
