/**
 * LIST semantics: resourceVersion / resourceVersionMatch, label and field selectors, and
 * `limit`/`continue` paging with tokens that carry the list's resourceVersion, like etcd's.
 */
import { GoneError, InvalidInputError, TimeoutError } from '../../errors.ts';
import { type KubeObject, readPath } from './objects.ts';
import { type ResourceType, selectableFields } from './resources.ts';
import {
  type FieldRequirement,
  type LabelRequirement,
  matchesFields,
  matchesLabels,
  parseFieldSelector,
  parseLabelSelector,
} from './selectors.ts';
import { badRequest } from './status.ts';
import { lowerBound, type SimStore, type StoredEntry } from './store.ts';

/** A compiled label + field selector. */
export interface ObjectFilter {
  labels: LabelRequirement[];
  fields: FieldRequirement[];
  /** Whether the filter lets everything through. */
  empty: boolean;
}

/** Compiles the selectors of a request for a type; bad selectors are a 400. */
export function objectFilterOf(
  type: ResourceType,
  labelSelector: string | null,
  fieldSelector: string | null,
  namespace?: string,
): ObjectFilter {
  const labels = parseLabelSelector(labelSelector ?? '');
  const fields = parseFieldSelector(fieldSelector ?? '', selectableFields(type));
  if (namespace) fields.push({ field: 'metadata.namespace', equal: true, value: namespace });
  return { labels, fields, empty: labels.length === 0 && fields.length === 0 };
}

/** A field's value as a field selector compares it: a string, "" when absent. */
export function fieldValue(obj: KubeObject, field: string): string {
  // An event's `source` selects on the reporting component, as the API indexes it.
  const value = readPath(obj, field === 'source' ? 'source.component' : field);
  if (field === 'spec.unschedulable') return String(value === true);
  if (value === undefined || value === null) return '';
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** Whether an object passes a filter. */
export function matchesFilter(filter: ObjectFilter, obj: KubeObject): boolean {
  if (filter.empty) return true;
  return (
    matchesLabels(filter.labels, obj.metadata.labels) &&
    matchesFields(filter.fields, (f) => fieldValue(obj, f))
  );
}

interface ContinueToken {
  rv: number;
  start: string;
}

/** Encodes where the next page starts, in the apiserver's token format. */
export function encodeContinue(rv: number, lastKey: string): string {
  return Buffer.from(JSON.stringify({ v: 'meta.k8s.io/v1', rv, start: `${lastKey}\u0000` })).toString(
    'base64',
  );
}

function decodeContinue(token: string): ContinueToken {
  let parsed: unknown;
  try {
    if (!/^[A-Za-z0-9+/=_-]+$/.test(token)) throw new Error('illegal base64 data');
    parsed = JSON.parse(Buffer.from(token, 'base64').toString('utf8'));
  } catch (err) {
    throw badRequest(`invalid continue token: continue key is not valid: ${(err as Error).message}`);
  }
  const p = parsed as { v?: unknown; rv?: unknown; start?: unknown };
  if (p.v !== 'meta.k8s.io/v1')
    throw badRequest(
      'invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)',
    );
  if (typeof p.rv !== 'number' || !Number.isInteger(p.rv) || p.rv === 0 || typeof p.start !== 'string') {
    throw badRequest(
      'invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)',
    );
  }
  return { rv: p.rv, start: p.start };
}

const continueTooOld =
  'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.';

/** The parameters of a LIST request. */
export interface ListParams {
  resourceVersion?: string | null;
  resourceVersionMatch?: string | null;
  limit?: string | null;
  continueToken?: string | null;
  /** The `fault` plan forces a 410. */
  forceExpired?: boolean;
}

/** One page of a list: entries, its resourceVersion and where to continue. */
export interface ListPage {
  items: StoredEntry[];
  resourceVersion: number;
  continueToken?: string;
  remainingItemCount?: number;
}

/** Parses a resourceVersion parameter. */
export function parseResourceVersion(value: string): number {
  if (!/^\d+$/.test(value))
    throw badRequest(`invalid resource version: ${JSON.stringify(value)}: must be a non-negative integer`);
  return Number(value);
}

function listOptionsInvalid(field: string, detail: string): InvalidInputError {
  const message = `ListOptions.meta.k8s.io "" is invalid: ${field}: Forbidden: ${detail}`;
  const status = {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason: 'Invalid',
    details: {
      group: 'meta.k8s.io',
      kind: 'ListOptions',
      causes: [{ reason: 'FieldValueForbidden', message: `Forbidden: ${detail}`, field }],
    },
    code: 422,
  };
  return new InvalidInputError(message, { details: { status } });
}

function tooLargeResourceVersion(asked: number, current: number): TimeoutError {
  const message = `Too large resource version: ${asked}, current: ${current}`;
  const status = {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason: 'Timeout',
    details: {
      causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version', field: '' }],
      retryAfterSeconds: 1,
    },
    code: 504,
  };
  return new TimeoutError(message, { details: { status } });
}

function expiredContinue(start: string): GoneError {
  // Like the apiserver, offer a token that continues from the same key at the latest version.
  const fresh = Buffer.from(JSON.stringify({ v: 'meta.k8s.io/v1', rv: -1, start })).toString('base64');
  const status = {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: { continue: fresh },
    status: 'Failure',
    message: continueTooOld,
    reason: 'Expired',
    code: 410,
  };
  return new GoneError(continueTooOld, { details: { status } });
}

/** Answers a LIST: chooses the version to read, filters, and cuts a page. */
export function listPage(
  store: SimStore,
  type: ResourceType,
  namespace: string | undefined,
  filter: ObjectFilter,
  params: ListParams,
): ListPage {
  const rvParam = params.resourceVersion ?? '';
  const match = params.resourceVersionMatch ?? '';
  if (match && !rvParam)
    throw listOptionsInvalid(
      'resourceVersionMatch',
      'resourceVersionMatch is forbidden unless resourceVersion is provided',
    );
  if (match && params.continueToken)
    throw listOptionsInvalid(
      'resourceVersionMatch',
      'resourceVersionMatch is forbidden when continue is provided',
    );
  if (match && match !== 'Exact' && match !== 'NotOlderThan') {
    throw badRequest(
      `resourceVersionMatch: Unsupported value: "${match}": supported values: "Exact", "NotOlderThan"`,
    );
  }
  let limit = params.limit ? Number(params.limit) : 0;
  if (!Number.isInteger(limit) || limit < 0)
    throw badRequest(`invalid limit ${JSON.stringify(params.limit)}: must be a non-negative integer`);
  let atRv: number | undefined;
  let startKey = '';
  if (params.continueToken) {
    const token = decodeContinue(params.continueToken);
    startKey = token.start;
    if (token.rv !== -1) {
      if (token.rv < store.oldestResourceVersion || params.forceExpired) throw expiredContinue(token.start);
      atRv = token.rv;
    }
  } else if (params.forceExpired) {
    throw expiredResourceVersion(
      rvParam ? parseResourceVersion(rvParam) : store.resourceVersion,
      store.oldestResourceVersion,
    );
  } else if (rvParam) {
    const rv = parseResourceVersion(rvParam);
    if (rv > store.resourceVersion) throw tooLargeResourceVersion(rv, store.resourceVersion);
    if (match === 'Exact') {
      if (rv === 0)
        throw listOptionsInvalid(
          'resourceVersionMatch',
          'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
        );
      atRv = rv;
    } else if (rv === 0 && !match) {
      // resourceVersion=0 is served from the watch cache, which ignores limit.
      limit = 0;
    }
  }
  // A consistent list (no resourceVersion) is served from the watch cache once it has caught up with
  // etcd: the API server asks etcd for a progress notification, which that type's watches then bookmark.
  if (!params.continueToken && !rvParam) store.notifyProgress(type.plural);
  const listRv = atRv ?? store.resourceVersion;
  const { keys, entries, from, to } = store.view(type, namespace, atRv);
  let index = startKey ? lowerBound(keys, startKey, from, to) : from;
  const items: StoredEntry[] = [];
  for (; index < to; index++) {
    const entry = entries.get(keys[index] as string) as StoredEntry;
    if (!matchesFilter(filter, entry.object)) continue;
    items.push(entry);
    if (limit > 0 && items.length === limit) {
      index++;
      break;
    }
  }
  const page: ListPage = { items, resourceVersion: listRv };
  if (limit > 0 && items.length === limit && index < to) {
    page.continueToken = encodeContinue(listRv, (items.at(-1) as StoredEntry).key);
    if (filter.empty) page.remainingItemCount = to - index;
  }
  return page;
}

/** 410 for a resourceVersion older than the history kept. */
export function expiredResourceVersion(asked: number, oldest: number): GoneError {
  const message = `too old resource version: ${asked} (${oldest})`;
  return new GoneError(message, {
    details: {
      status: {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Failure',
        message,
        reason: 'Expired',
        code: 410,
      },
    },
  });
}
