/**
 * Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), which
 * client-go's typed clients send for built-in types: the magic `k8s\0`, then a `runtime.Unknown`
 * (typeMeta, raw, contentEncoding, contentType) whose `raw` is the object's own message. The object
 * is read with a schema of field numbers from the API's `generated.proto` files and turned into the
 * object's JSON form, so everything after decoding is the same as for a JSON body.
 */
import { KopsError } from '../../errors.ts';
import { badRequest } from './status.ts';

/** The media type of Kubernetes' protobuf encoding. */
export const protobufMediaType = 'application/vnd.kubernetes.protobuf';

const magic = Buffer.from([0x6b, 0x38, 0x73, 0x00]);

type Scalar = 'string' | 'bytes' | 'int' | 'bool' | 'time';

/**
 * A message whose field 1 is a repeated string, in JSON a plain list (`ExtraValue`, a `[]string`
 * that protobuf cannot put straight into a map).
 */
const stringList = 'stringList';

/** One field of a message: its JSON name, its type, and whether it repeats. */
interface Field {
  name: string;
  type: Scalar | Schema | { map: Scalar | Schema | typeof stringList };
  repeated?: boolean;
}

/** A message: its fields by field number. */
type Schema = { readonly [fieldNumber: number]: Field };

// Field numbers from k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto and k8s.io/api/*/generated.proto.
const ownerReference: Schema = {
  1: { name: 'kind', type: 'string' },
  3: { name: 'name', type: 'string' },
  4: { name: 'uid', type: 'string' },
  5: { name: 'apiVersion', type: 'string' },
  6: { name: 'controller', type: 'bool' },
  7: { name: 'blockOwnerDeletion', type: 'bool' },
};

const objectMeta: Schema = {
  1: { name: 'name', type: 'string' },
  2: { name: 'generateName', type: 'string' },
  3: { name: 'namespace', type: 'string' },
  5: { name: 'uid', type: 'string' },
  6: { name: 'resourceVersion', type: 'string' },
  7: { name: 'generation', type: 'int' },
  8: { name: 'creationTimestamp', type: 'time' },
  9: { name: 'deletionTimestamp', type: 'time' },
  10: { name: 'deletionGracePeriodSeconds', type: 'int' },
  11: { name: 'labels', type: { map: 'string' } },
  12: { name: 'annotations', type: { map: 'string' } },
  13: { name: 'ownerReferences', type: ownerReference, repeated: true },
  14: { name: 'finalizers', type: 'string', repeated: true },
};

const csrCondition: Schema = {
  1: { name: 'type', type: 'string' },
  2: { name: 'reason', type: 'string' },
  3: { name: 'message', type: 'string' },
  4: { name: 'lastUpdateTime', type: 'time' },
  5: { name: 'lastTransitionTime', type: 'time' },
  6: { name: 'status', type: 'string' },
};

const certificateSigningRequest: Schema = {
  1: { name: 'metadata', type: objectMeta },
  2: {
    name: 'spec',
    type: {
      1: { name: 'request', type: 'bytes' },
      2: { name: 'usages', type: 'string', repeated: true },
      3: { name: 'username', type: 'string' },
      4: { name: 'uid', type: 'string' },
      5: { name: 'groups', type: 'string', repeated: true },
      6: { name: 'extra', type: { map: stringList } },
      7: { name: 'signerName', type: 'string' },
      8: { name: 'expirationSeconds', type: 'int' },
    },
  },
  3: {
    name: 'status',
    type: {
      1: { name: 'conditions', type: csrCondition, repeated: true },
      2: { name: 'certificate', type: 'bytes' },
    },
  },
};

const configMap: Schema = {
  1: { name: 'metadata', type: objectMeta },
  2: { name: 'data', type: { map: 'string' } },
  3: { name: 'binaryData', type: { map: 'bytes' } },
  4: { name: 'immutable', type: 'bool' },
};

const secret: Schema = {
  1: { name: 'metadata', type: objectMeta },
  2: { name: 'data', type: { map: 'bytes' } },
  3: { name: 'type', type: 'string' },
  4: { name: 'stringData', type: { map: 'string' } },
  5: { name: 'immutable', type: 'bool' },
};

const namespace: Schema = {
  1: { name: 'metadata', type: objectMeta },
  2: { name: 'spec', type: { 1: { name: 'finalizers', type: 'string', repeated: true } } },
};

const deleteOptions: Schema = {
  1: { name: 'gracePeriodSeconds', type: 'int' },
  2: {
    name: 'preconditions',
    type: { 1: { name: 'uid', type: 'string' }, 2: { name: 'resourceVersion', type: 'string' } },
  },
  3: { name: 'orphanDependents', type: 'bool' },
  4: { name: 'propagationPolicy', type: 'string' },
  5: { name: 'dryRun', type: 'string', repeated: true },
};

/** The kinds whose protobuf this server reads, by `apiVersion/kind`. */
const schemas: ReadonlyMap<string, Schema> = new Map([
  ['certificates.k8s.io/v1/CertificateSigningRequest', certificateSigningRequest],
  ['v1/ConfigMap', configMap],
  ['v1/Secret', secret],
  ['v1/Namespace', namespace],
  // DeleteOptions is sent with the group's version; its message is the same in every group.
  ['v1/DeleteOptions', deleteOptions],
  ['meta.k8s.io/v1/DeleteOptions', deleteOptions],
  ['certificates.k8s.io/v1/DeleteOptions', deleteOptions],
  ['coordination.k8s.io/v1/DeleteOptions', deleteOptions],
]);

/** The `apiVersion/kind`s this server decodes from protobuf. */
export const protobufKinds: readonly string[] = [...schemas.keys()];

/** A protobuf wire-format reader over one message's bytes. */
class Reader {
  private pos = 0;
  private readonly buf: Buffer;
  constructor(buf: Buffer) {
    this.buf = buf;
  }

  get done(): boolean {
    return this.pos >= this.buf.length;
  }

  varint(): bigint {
    let result = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      if (this.pos >= this.buf.length) throw new Error('truncated varint');
      const byte = this.buf[this.pos++] as number;
      result |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return result;
    }
    throw new Error('varint longer than 10 bytes');
  }

  bytes(): Buffer {
    const length = Number(this.varint());
    if (length > this.buf.length - this.pos) throw new Error('length-delimited field runs past the message');
    const out = this.buf.subarray(this.pos, this.pos + length);
    this.pos += length;
    return out;
  }

  skip(wireType: number): void {
    if (wireType === 0) this.varint();
    else if (wireType === 2) this.bytes();
    else if (wireType === 1 || wireType === 5) {
      const width = wireType === 1 ? 8 : 4;
      if (width > this.buf.length - this.pos) throw new Error('truncated fixed-width field');
      this.pos += width;
    } else throw new Error(`unsupported wire type ${wireType}`);
  }

  /** Reads every field as `[number, wireType, value]`; a length-delimited value stays as bytes. */
  *fields(): Generator<[number, number, bigint | Buffer]> {
    while (!this.done) {
      const key = this.varint();
      const number = Number(key >> 3n);
      const wireType = Number(key & 7n);
      if (number === 0) throw new Error('field number 0');
      if (wireType === 0) yield [number, wireType, this.varint()];
      else if (wireType === 2) yield [number, wireType, this.bytes()];
      else {
        this.skip(wireType);
      }
    }
  }
}

function expectBytes(value: bigint | Buffer, field: string): Buffer {
  if (!Buffer.isBuffer(value)) throw new Error(`field ${field}: expected a length-delimited value`);
  return value;
}

function expectVarint(value: bigint | Buffer, field: string): bigint {
  if (Buffer.isBuffer(value)) throw new Error(`field ${field}: expected a varint`);
  return value;
}

/** meta/v1 Time: seconds and nanos; the JSON form is RFC 3339 to the second, and the zero time is absent. */
function decodeTime(buf: Buffer): string | undefined {
  let seconds = 0n;
  for (const [number, , value] of new Reader(buf).fields()) {
    if (number === 1) seconds = BigInt.asIntN(64, expectVarint(value, 'seconds'));
  }
  if (seconds === 0n) return undefined;
  return new Date(Number(seconds) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function decodeScalar(type: Scalar, value: bigint | Buffer, field: string): unknown {
  switch (type) {
    case 'string':
      return expectBytes(value, field).toString('utf8');
    case 'bytes':
      return expectBytes(value, field).toString('base64');
    case 'time':
      return decodeTime(expectBytes(value, field));
    case 'bool':
      return expectVarint(value, field) !== 0n;
    default:
      return Number(BigInt.asIntN(64, expectVarint(value, field)));
  }
}

function decodeValue(
  type: Scalar | Schema | typeof stringList,
  value: bigint | Buffer,
  field: string,
): unknown {
  if (type === stringList) {
    const items: string[] = [];
    for (const [n, , v] of new Reader(expectBytes(value, field)).fields())
      if (n === 1) items.push(expectBytes(v, field).toString('utf8'));
    return items;
  }
  return typeof type === 'string'
    ? decodeScalar(type, value, field)
    : decodeMessage(expectBytes(value, field), type);
}

/** Whether a decoded value is Go's zero value, which the JSON form leaves out (`omitempty`). */
function isZero(value: unknown): boolean {
  return value === undefined || value === '' || value === 0 || value === false;
}

function decodeMessage(buf: Buffer, schema: Schema): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [number, , value] of new Reader(buf).fields()) {
    const field = schema[number];
    // Fields this schema does not know are skipped, as protobuf readers do.
    if (!field) continue;
    const { name, type } = field;
    if (typeof type === 'object' && 'map' in type) {
      let key = '';
      let entry: unknown;
      for (const [n, , v] of new Reader(expectBytes(value, name)).fields()) {
        if (n === 1) key = expectBytes(v, `${name} key`).toString('utf8');
        else if (n === 2) entry = decodeValue(type.map, v, `${name}[${key}]`);
      }
      const map = (out[name] ?? {}) as Record<string, unknown>;
      map[key] =
        entry ?? (type.map === 'string' || type.map === 'bytes' ? '' : type.map === stringList ? [] : {});
      out[name] = map;
    } else if (field.repeated) {
      const list = (out[name] ?? []) as unknown[];
      list.push(decodeValue(type, value, name));
      out[name] = list;
    } else {
      const decoded = decodeValue(type, value, name);
      if (isZero(decoded)) delete out[name];
      else out[name] = decoded;
    }
  }
  return out;
}

/**
 * Decodes a protobuf request body into the object's JSON form (with `apiVersion` and `kind` from the
 * envelope). A body without the envelope, that breaks the wire format, or of a kind this server has
 * no schema for is a 400 that says so (the last names the kinds it reads).
 */
export function decodeProtobuf(body: Buffer): Record<string, unknown> {
  if (body.length < magic.length || !body.subarray(0, magic.length).equals(magic)) {
    throw badRequest(
      'provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]',
    );
  }
  try {
    let apiVersion = '';
    let kind = '';
    let raw: Buffer = Buffer.alloc(0);
    let encoding = '';
    for (const [number, , value] of new Reader(body.subarray(magic.length)).fields()) {
      if (number === 1) {
        for (const [n, , v] of new Reader(expectBytes(value, 'typeMeta')).fields()) {
          if (n === 1) apiVersion = expectBytes(v, 'apiVersion').toString('utf8');
          else if (n === 2) kind = expectBytes(v, 'kind').toString('utf8');
        }
      } else if (number === 2) raw = expectBytes(value, 'raw');
      else if (number === 3) encoding = expectBytes(value, 'contentEncoding').toString('utf8');
    }
    if (encoding !== '') throw new Error(`unsupported content encoding ${JSON.stringify(encoding)}`);
    const schema = schemas.get(`${apiVersion}/${kind}`);
    if (!schema) {
      throw badRequest(
        `the simulated API server cannot decode ${kind || 'an object without a kind'} (${apiVersion}) from protobuf; it decodes ${protobufKinds.join(', ')} and any kind as JSON or YAML`,
      );
    }
    return { apiVersion, kind, ...decodeMessage(raw, schema) };
  } catch (err) {
    if (!(err instanceof Error) || err instanceof KopsError) throw err;
    throw badRequest(`unable to decode the protobuf body: ${err.message}`);
  }
}
