/**
 * Reading AWS Query-protocol requests (the form-encoded `Action=…&Version=…` bodies EC2, Auto Scaling
 * and STS take) and the error a simulated service answers with.
 */
import { randomUUID } from 'node:crypto';
import { document, el, wrap } from './xml.ts';

/** A service error as AWS returns it: its code, message and HTTP status. */
export class AwsSimError extends Error {
  readonly code: string;
  readonly status: number;

  constructor(code: string, message: string, status = 400) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

/** The request parameters: the query string and a form-encoded body together (later wins). */
export function queryParams(url: string, body: string, contentType: string | undefined): Map<string, string> {
  const params = new Map<string, string>();
  const q = url.indexOf('?');
  if (q >= 0) for (const [k, v] of new URLSearchParams(url.slice(q + 1))) params.set(k, v);
  if (body !== '' && (contentType ?? '').startsWith('application/x-www-form-urlencoded')) {
    for (const [k, v] of new URLSearchParams(body)) params.set(k, v);
  }
  return params;
}

/** The values of a numbered list parameter: `Prefix.1`, `Prefix.2`, … in order. */
export function listParam(params: ReadonlyMap<string, string>, prefix: string): string[] {
  const values: string[] = [];
  for (let i = 1; params.has(`${prefix}.${i}`); i++) values.push(params.get(`${prefix}.${i}`) as string);
  return values;
}

/** A filter: a name and the values any of which match. */
export interface QueryFilter {
  name: string;
  values: string[];
}

/**
 * The filters of a request. EC2 spells them `Filter.N.Name` / `Filter.N.Value.M`; the awsQuery
 * services `Filters.member.N.Name` / `Filters.member.N.Values.member.M`.
 */
export function filterParams(params: ReadonlyMap<string, string>, style: 'ec2' | 'query'): QueryFilter[] {
  const filters: QueryFilter[] = [];
  const base = style === 'ec2' ? 'Filter' : 'Filters.member';
  const valuePrefix = style === 'ec2' ? 'Value' : 'Values.member';
  for (let i = 1; params.has(`${base}.${i}.Name`); i++) {
    filters.push({
      name: params.get(`${base}.${i}.Name`) as string,
      values: listParam(params, `${base}.${i}.${valuePrefix}`),
    });
  }
  return filters;
}

/** Whether a resource's tags pass a `tag:<key>`, `tag-key` or `tag-value` filter. */
export function tagFilterMatches(
  filter: QueryFilter,
  tags: Readonly<Record<string, string>>,
): boolean | undefined {
  if (filter.name.startsWith('tag:')) {
    const value = tags[filter.name.slice(4)];
    return value !== undefined && filter.values.some((v) => wildcardMatch(v, value));
  }
  if (filter.name === 'tag-key')
    return Object.keys(tags).some((k) => filter.values.some((v) => wildcardMatch(v, k)));
  if (filter.name === 'tag-value') {
    return Object.values(tags).some((t) => filter.values.some((v) => wildcardMatch(v, t)));
  }
  return undefined;
}

/** AWS filter values allow `*` (any run) and `?` (one character). */
export function wildcardMatch(pattern: string, value: string): boolean {
  if (!/[*?]/.test(pattern)) return pattern === value;
  const regex = pattern
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '.*')
    .replace(/\?/g, '.');
  return new RegExp(`^${regex}$`, 's').test(value);
}

/** An integer parameter within bounds, or the default when absent. */
export function intParam(
  params: ReadonlyMap<string, string>,
  name: string,
  bounds: { min: number; max: number; default: number },
): number {
  const raw = params.get(name);
  if (raw === undefined) return bounds.default;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < bounds.min || value > bounds.max) {
    throw new AwsSimError(
      'InvalidParameterValue',
      `Value ( ${raw} ) for parameter ${name} is invalid. Expecting a value between ${bounds.min} and ${bounds.max}.`,
    );
  }
  return value;
}

/** The opaque pagination token for an offset into a listing, and back. */
export const pageToken = {
  encode(offset: number): string {
    return Buffer.from(JSON.stringify({ o: offset })).toString('base64url');
  },
  decode(token: string | undefined): number {
    if (token === undefined || token === '') return 0;
    try {
      const { o } = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as { o: unknown };
      if (typeof o === 'number' && Number.isInteger(o) && o >= 0) return o;
    } catch {
      // fall through to the error below
    }
    throw new AwsSimError('InvalidParameterValue', `The value of NextToken ( ${token} ) is not valid.`);
  },
};

/** The awsQuery error document STS and Auto Scaling answer with. */
export function queryErrorDocument(namespace: string, code: string, message: string, status: number): string {
  return document(
    'ErrorResponse',
    namespace,
    wrap(
      'Error',
      el('Type', status >= 500 ? 'Receiver' : 'Sender') + el('Code', code) + el('Message', message),
    ) + el('RequestId', randomUUID()),
  );
}
