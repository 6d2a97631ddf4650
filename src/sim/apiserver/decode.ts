/**
 * Request bodies as the apiserver decodes them: a 3 MiB limit, JSON, YAML or protobuf (what current
 * kubectl sends for built-in types, see protobuf.ts), Go's nesting limit and
 * typed metadata, apiVersion/kind defaulted from the URL, and `fieldValidation` for unknown fields.
 */
import type { IncomingMessage } from 'node:http';
import { parse as parseYaml } from 'yaml';
import { TooLargeError } from '../../errors.ts';
import { readBody as readLimitedBody } from '../../net/read-body.ts';
import { isRecord, type KubeObject } from './objects.ts';
import { decodeProtobuf, protobufMediaType } from './protobuf.ts';
import { apiVersionOf, type ResourceType } from './resources.ts';
import { dropUnknownFields, shapeOfKind } from './schema.ts';
import { badRequest, tooLarge, unsupportedMediaType } from './status.ts';

/** The request body limit of the real apiserver (3 MiB). */
export const maxBodyBytes = 3 * 1024 * 1024;

/** Reads a request body, refusing more than {@link maxBodyBytes} with 413. */
export async function readBody(req: IncomingMessage): Promise<Buffer> {
  try {
    return await readLimitedBody(req, maxBodyBytes);
  } catch (err) {
    throw err instanceof TooLargeError ? tooLarge(maxBodyBytes) : err;
  }
}

/** The media type of a request's Content-Type, lower-cased, without parameters. */
export function mediaTypeOf(req: IncomingMessage): string {
  return (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
}

/** The nesting limit of the apiserver's JSON decoder. */
const maxJsonDepth = 10_000;

/** Whether a parsed value nests deeper than the limit (checked without recursion). */
function tooDeep(value: unknown): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [current, depth] = stack.pop() as [unknown, number];
    if (current === null || typeof current !== 'object') continue;
    if (depth > maxJsonDepth) return true;
    for (const child of Object.values(current)) stack.push([child, depth + 1]);
  }
  return false;
}

/** Parses a JSON or YAML body; `__proto__` keys are dropped and over-deep nesting refused, as Go's decoder would. */
export function parseBody(body: Buffer, what: string, yaml = false): unknown {
  let value: unknown;
  try {
    const text = body.toString('utf8');
    value = yaml ? parseYaml(text) : JSON.parse(text, (key, v) => (key === '__proto__' ? undefined : v));
  } catch (err) {
    // A RangeError is the parser running out of stack on absurd nesting.
    const reason =
      err instanceof RangeError ? `exceeded max depth of ${maxJsonDepth}` : (err as Error).message;
    throw badRequest(`${what}: ${reason}`);
  }
  if (tooDeep(value)) throw badRequest(`${what}: exceeded max depth of ${maxJsonDepth}`);
  return value;
}

/** The media types a create or update body may have. */
export const objectMediaTypes = ['application/json', 'application/yaml', protobufMediaType];

/** Decodes a create/update body: JSON, YAML or protobuf; defaults apiVersion/kind, handles unknown fields. */
export function decodeObject(
  req: IncomingMessage,
  url: URL,
  type: ResourceType,
  body: Buffer,
): { obj: KubeObject; warnings: string[] } {
  const media = mediaTypeOf(req);
  let raw: unknown;
  if (media === 'application/json' || media === '') {
    raw = parseBody(body, "couldn't get version/kind; json parse error");
  } else if (media === 'application/yaml') {
    raw = parseBody(body, 'error converting YAML to JSON', true);
  } else if (media === protobufMediaType) {
    raw = decodeProtobuf(body);
  } else {
    throw unsupportedMediaType(media, objectMediaTypes);
  }
  if (!isRecord(raw))
    throw badRequest(
      `the object provided is unrecognized (must be of type ${type.kind}): expected a JSON object`,
    );
  const expectedVersion = apiVersionOf(type);
  if (raw['apiVersion'] !== undefined && raw['apiVersion'] !== '' && raw['apiVersion'] !== expectedVersion) {
    throw badRequest(
      `the API version in the data (${String(raw['apiVersion'])}) does not match the expected API version (${expectedVersion})`,
    );
  }
  if (raw['kind'] !== undefined && raw['kind'] !== '' && raw['kind'] !== type.kind) {
    throw badRequest(
      `the kind in the data (${String(raw['kind'])}) does not match the expected kind (${type.kind})`,
    );
  }
  raw['apiVersion'] = expectedVersion;
  raw['kind'] = type.kind;
  if (raw['metadata'] === undefined || raw['metadata'] === null) raw['metadata'] = {};
  if (!isRecord(raw['metadata'])) throw badRequest('metadata: expected an object');
  checkMetadataTypes(raw['metadata']);
  checkMicroTimes(type, raw);
  return { obj: raw as KubeObject, warnings: checkUnknownFields(url, type, raw) };
}

/** metav1.MicroTime's wire layout (apimachinery pkg/apis/meta/v1/micro_time.go, `RFC3339Micro`). */
const microTimeLayout = '2006-01-02T15:04:05.000000Z07:00';
const microTimeText = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$/;

/** The MicroTime fields of the kinds served, as paths from the object's root. */
const microTimePaths: Record<string, string[][]> = {
  Lease: [
    ['spec', 'acquireTime'],
    ['spec', 'renewTime'],
  ],
  Event: [['eventTime'], ['series', 'lastObservedTime']],
};

/**
 * A MicroTime field must have exactly six fractional digits: `MicroTime.UnmarshalJSON` parses with
 * `time.Parse(RFC3339Micro, …)`, whose `.000000` takes exactly six, so `.123Z` (JavaScript's
 * `toISOString()`) or whole seconds fail the body's decoding, a 400 before any validation runs
 * (kubernetes-client/javascript#828 quotes the answer; client-node's `V1MicroTime` exists for it).
 * `null` is the zero time. Direct store writes stay lenient (normalized) for seeding.
 */
function checkMicroTimes(type: ResourceType, obj: Record<string, unknown>): void {
  for (const path of microTimePaths[type.kind] ?? []) {
    let value: unknown = obj;
    for (const key of path) value = isRecord(value) ? value[key] : undefined;
    if (value === undefined || value === null) continue;
    if (typeof value === 'string' && microTimeText.test(value)) continue;
    const shown = typeof value === 'string' ? value : JSON.stringify(value);
    const seconds = typeof value === 'string' ? /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}/.exec(value) : null;
    const why =
      seconds && typeof value === 'string'
        ? `cannot parse ${JSON.stringify(value.slice(seconds[0].length))} as ".000000"`
        : `cannot parse ${JSON.stringify(shown)} as "2006"`;
    throw badRequest(
      `${type.kind} in version "${apiVersionOf(type).split('/').at(-1)}" cannot be handled as a ${type.kind}: ` +
        `parsing time ${JSON.stringify(shown)} as ${JSON.stringify(microTimeLayout)}: ${why}`,
    );
  }
}

const metadataStrings = ['name', 'generateName', 'namespace', 'uid', 'resourceVersion', 'creationTimestamp'];

function goType(value: unknown): string {
  if (Array.isArray(value)) return 'array';
  if (value === null) return 'null';
  return typeof value === 'object' ? 'object' : typeof value;
}

/** Wrongly typed metadata fails decoding with 400, as Go's typed decoder does. */
export function checkMetadataTypes(meta: Record<string, unknown>): void {
  const refuse = (field: string, value: unknown, want: string) => {
    throw badRequest(
      `json: cannot unmarshal ${goType(value)} into Go struct field ObjectMeta.metadata.${field} of type ${want}`,
    );
  };
  for (const field of metadataStrings) {
    const value = meta[field];
    if (value !== undefined && value !== null && typeof value !== 'string') refuse(field, value, 'string');
  }
  for (const field of ['labels', 'annotations']) {
    const value = meta[field];
    if (value === undefined || value === null) continue;
    if (!isRecord(value)) refuse(field, value, 'map[string]string');
    for (const item of Object.values(value as Record<string, unknown>))
      if (typeof item !== 'string') refuse(field, item, 'string');
  }
  const finalizers = meta['finalizers'];
  if (finalizers !== undefined && finalizers !== null) {
    if (!Array.isArray(finalizers)) refuse('finalizers', finalizers, '[]string');
    for (const item of finalizers as unknown[])
      if (typeof item !== 'string') refuse('finalizers', item, 'string');
  }
}

/** Applies `fieldValidation` (Strict, Warn or Ignore) to the fields the kind does not know; returns the warnings. */
export function checkUnknownFields(url: URL, type: ResourceType, obj: unknown): string[] {
  const mode = url.searchParams.get('fieldValidation') ?? 'Warn';
  if (!['Strict', 'Warn', 'Ignore'].includes(mode)) {
    throw badRequest(
      `fieldValidation: Unsupported value: "${mode}": supported values: "Ignore", "Strict", "Warn"`,
    );
  }
  const unknown = dropUnknownFields(obj, shapeOfKind(type.kind));
  if (unknown.length === 0 || mode === 'Ignore') return [];
  const texts = unknown.map((f) => `unknown field "${f}"`);
  if (mode === 'Strict') throw badRequest(`strict decoding error: ${texts.join(', ')}`);
  return texts;
}

/** The `Warning: 299` header for decoding warnings. */
export function warningHeaders(warnings: string[]): Record<string, string> {
  if (warnings.length === 0) return {};
  return { Warning: warnings.map((w) => `299 - ${JSON.stringify(w)}`).join(', ') };
}

/** Whether `dryRun=All` was asked for; any other value is a 400. */
export function dryRunOf(url: URL): boolean {
  const values = url.searchParams.getAll('dryRun');
  for (const v of values)
    if (v !== 'All') throw badRequest(`dryRun: Unsupported value: "${v}": supported values: "All"`);
  return values.length > 0;
}
