/**
 * A minimal DER (ASN.1 Distinguished Encoding Rules) writer and reader: just what X.509
 * certificates and PKCS#10 requests need. Certificates are assembled from pre-encoded pieces so that
 * issuing one costs little more than the signature itself; the reader is strict (definite lengths,
 * bounds checked, minimal length encodings) because it parses untrusted requests.
 */
import { InvalidInputError } from '../errors.ts';

/** Universal tags used by X.509. */
export const Tag = {
  boolean: 0x01,
  integer: 0x02,
  bitString: 0x03,
  octetString: 0x04,
  null: 0x05,
  oid: 0x06,
  utf8String: 0x0c,
  printableString: 0x13,
  t61String: 0x14,
  ia5String: 0x16,
  utcTime: 0x17,
  generalizedTime: 0x18,
  universalString: 0x1c,
  bmpString: 0x1e,
  sequence: 0x30,
  set: 0x31,
} as const;

function lengthOfLength(length: number): number {
  if (length < 0x80) return 1;
  let bytes = 0;
  for (let rest = length; rest > 0; rest = Math.floor(rest / 256)) bytes++;
  return 1 + bytes;
}

/** Writes tag and length at the start of `out`; returns where the content begins. */
function writeHeader(out: Buffer, tag: number, length: number): number {
  out[0] = tag;
  const size = lengthOfLength(length);
  if (size === 1) {
    out[1] = length;
    return 2;
  }
  out[1] = 0x80 | (size - 1);
  for (let i = size - 1, rest = length; i >= 1; i--, rest = Math.floor(rest / 256)) out[1 + i] = rest & 0xff;
  return 1 + size;
}

/**
 * A constructed or primitive TLV whose content is the concatenation of `parts`, written in one
 * allocation (certificates are built from many small parts; copying each level again would double
 * the work).
 */
function encode(tag: number, parts: readonly Buffer[]): Buffer {
  let length = 0;
  for (const part of parts) length += part.length;
  const out = Buffer.allocUnsafe(1 + lengthOfLength(length) + length);
  let offset = writeHeader(out, tag, length);
  for (const part of parts) offset += part.copy(out, offset);
  return out;
}

const zeroByte = Buffer.of(0);

/** One TLV: a tag byte, the length and the content. */
export function tlv(tag: number, content: Buffer): Buffer {
  return encode(tag, [content]);
}

/** SEQUENCE of already-encoded children. */
export function sequence(...children: Buffer[]): Buffer {
  return encode(Tag.sequence, children);
}

/** SET of already-encoded children (callers pass them in DER order). */
export function set(...children: Buffer[]): Buffer {
  return encode(Tag.set, children);
}

/** [n] EXPLICIT: a constructed context-specific tag wrapping one encoded value. */
export function explicit(tagNumber: number, child: Buffer): Buffer {
  return tlv(0xa0 | tagNumber, child);
}

/** [n] IMPLICIT primitive: a context-specific tag replacing the value's own. */
export function implicitPrimitive(tagNumber: number, content: Buffer): Buffer {
  return tlv(0x80 | tagNumber, content);
}

/** INTEGER from unsigned big-endian bytes, encoded minimally and kept positive. */
export function unsignedInteger(bytes: Buffer): Buffer {
  let start = 0;
  while (start < bytes.length - 1 && bytes[start] === 0) start++;
  const trimmed = bytes.subarray(start);
  const needsPad = ((trimmed[0] ?? 0) & 0x80) !== 0;
  return needsPad ? encode(Tag.integer, [zeroByte, trimmed]) : encode(Tag.integer, [trimmed]);
}

/** INTEGER from a small non-negative number. */
export function smallInteger(value: number): Buffer {
  const bytes: number[] = [];
  for (let rest = value; rest > 0; rest = Math.floor(rest / 256)) bytes.unshift(rest & 0xff);
  return unsignedInteger(Buffer.from(bytes.length ? bytes : [0]));
}

/** BOOLEAN. */
export function boolean(value: boolean): Buffer {
  return Buffer.of(Tag.boolean, 1, value ? 0xff : 0);
}

/** NULL. */
export const nullValue: Buffer = Buffer.of(Tag.null, 0);

/** OCTET STRING. */
export function octetString(content: Buffer): Buffer {
  return tlv(Tag.octetString, content);
}

/** BIT STRING with whole bytes (no unused bits), as keys and signatures use. */
export function bitString(content: Buffer): Buffer {
  return encode(Tag.bitString, [zeroByte, content]);
}

/** BIT STRING for a named bit list (key usage): trailing zero bits dropped, as DER requires. */
export function namedBits(bits: readonly number[]): Buffer {
  const highest = Math.max(...bits);
  const bytes = Buffer.alloc(Math.floor(highest / 8) + 1);
  for (const bit of bits) bytes[bit >> 3] = (bytes[bit >> 3] as number) | (0x80 >> (bit & 7));
  const last = bytes[bytes.length - 1] as number;
  let unused = 0;
  while (unused < 7 && (last & (1 << unused)) === 0) unused++;
  return encode(Tag.bitString, [Buffer.of(unused), bytes]);
}

/** UTF8String. */
export function utf8String(value: string): Buffer {
  return tlv(Tag.utf8String, Buffer.from(value, 'utf8'));
}

const oidCache = new Map<string, Buffer>();

/** OBJECT IDENTIFIER from dotted form; encodings are cached because the same few recur. */
export function oid(dotted: string): Buffer {
  const cached = oidCache.get(dotted);
  if (cached) return cached;
  const arcs = dotted.split('.').map(Number);
  // The first two arcs share one subidentifier; every subidentifier is base 128, high bit = "more".
  const subidentifiers = [(arcs[0] as number) * 40 + (arcs[1] as number), ...arcs.slice(2)];
  const bytes: number[] = [];
  for (const value of subidentifiers) {
    const chunk: number[] = [value & 0x7f];
    for (let rest = Math.floor(value / 128); rest > 0; rest = Math.floor(rest / 128)) {
      chunk.unshift(0x80 | (rest & 0x7f));
    }
    bytes.push(...chunk);
  }
  const encoded = tlv(Tag.oid, Buffer.from(bytes));
  oidCache.set(dotted, encoded);
  return encoded;
}

function writeDigits(out: Buffer, offset: number, value: number, digits: number): number {
  for (let i = digits - 1, rest = value; i >= 0; i--, rest = Math.floor(rest / 10))
    out[offset + i] = 0x30 + (rest % 10);
  return offset + digits;
}

/** A certificate time: UTCTime through 2049, GeneralizedTime from 2050 (RFC 5280 §4.1.2.5). */
export function time(date: Date): Buffer {
  const year = date.getUTCFullYear();
  const utc = year < 2050;
  const out = Buffer.allocUnsafe(utc ? 15 : 17);
  out[0] = utc ? Tag.utcTime : Tag.generalizedTime;
  out[1] = out.length - 2;
  let offset = utc ? writeDigits(out, 2, year % 100, 2) : writeDigits(out, 2, year, 4);
  for (const field of [
    date.getUTCMonth() + 1,
    date.getUTCDate(),
    date.getUTCHours(),
    date.getUTCMinutes(),
    date.getUTCSeconds(),
  ]) {
    offset = writeDigits(out, offset, field, 2);
  }
  out[offset] = 0x5a; // 'Z'
  return out;
}

/** A parsed TLV: where it sits in `buffer`, so its exact bytes can be re-used (signed data). */
export interface DerNode {
  readonly buffer: Buffer;
  readonly tag: number;
  /** Offset of the tag byte. */
  readonly start: number;
  /** Offset of the first content byte. */
  readonly contentStart: number;
  /** Offset just past the content. */
  readonly end: number;
}

function malformed(message: string): InvalidInputError {
  return new InvalidInputError(`malformed DER: ${message}`);
}

/** Reads the TLV starting at `offset`, checking that it fits inside `limit`. */
export function readNode(buffer: Buffer, offset = 0, limit = buffer.length): DerNode {
  if (offset + 2 > limit) throw malformed(`truncated at byte ${offset}`);
  const tag = buffer[offset] as number;
  if ((tag & 0x1f) === 0x1f) throw malformed(`unsupported high tag number at byte ${offset}`);
  const first = buffer[offset + 1] as number;
  let length = first;
  let contentStart = offset + 2;
  if (first === 0x80) throw malformed('indefinite lengths are not allowed in DER');
  if (first > 0x80) {
    const count = first & 0x7f;
    if (count > 4) throw malformed(`length of ${count} bytes is too large`);
    if (contentStart + count > limit) throw malformed(`truncated length at byte ${offset}`);
    length = 0;
    for (let i = 0; i < count; i++) length = length * 256 + (buffer[contentStart + i] as number);
    if (length < 0x80 || (buffer[contentStart] as number) === 0) throw malformed('non-minimal length');
    contentStart += count;
  }
  const end = contentStart + length;
  if (end > limit) throw malformed(`value at byte ${offset} runs past the end of its container`);
  return { buffer, tag, start: offset, contentStart, end };
}

/** Reads a whole buffer as exactly one TLV (no trailing bytes). */
export function readRoot(buffer: Buffer): DerNode {
  const node = readNode(buffer);
  if (node.end !== buffer.length) throw malformed(`${buffer.length - node.end} trailing bytes`);
  return node;
}

/** The children of a constructed node. */
export function childrenOf(node: DerNode): DerNode[] {
  if ((node.tag & 0x20) === 0)
    throw malformed(`expected a constructed value, got tag 0x${node.tag.toString(16)}`);
  const out: DerNode[] = [];
  for (let offset = node.contentStart; offset < node.end; ) {
    const child = readNode(node.buffer, offset, node.end);
    out.push(child);
    offset = child.end;
  }
  return out;
}

/**
 * The children of a constructed node that has at most `most` fields: DER fixes a structure's fields,
 * so any more are malformed, never ignored (bytes nobody reads would travel into what is signed).
 */
export function fieldsOf(node: DerNode, most: number, what: string): DerNode[] {
  const children = childrenOf(node);
  if (children.length > most) throw malformed(`${what} has ${children.length - most} fields too many`);
  return children;
}

/** Checks that a node is NULL; `what` names the field for the error message. */
export function expectNull(node: DerNode | undefined, what: string): DerNode {
  const checked = expectTag(node, Tag.null, what);
  if (checked.end !== checked.contentStart) throw malformed(`${what}: NULL with content`);
  return checked;
}

/** The content bytes of a node (without tag and length). */
export function contentOf(node: DerNode): Buffer {
  return node.buffer.subarray(node.contentStart, node.end);
}

/** The full encoding of a node (tag, length and content). */
export function bytesOf(node: DerNode): Buffer {
  return node.buffer.subarray(node.start, node.end);
}

/** Checks a node's tag; `what` names the field for the error message. */
export function expectTag(node: DerNode | undefined, tag: number, what: string): DerNode {
  if (!node) throw malformed(`${what} is missing`);
  if (node.tag !== tag) {
    throw malformed(`${what} has tag 0x${node.tag.toString(16)}, expected 0x${tag.toString(16)}`);
  }
  return node;
}

/** Decodes an OBJECT IDENTIFIER node to dotted form. */
export function readOid(node: DerNode): string {
  const bytes = contentOf(expectTag(node, Tag.oid, 'object identifier'));
  if (bytes.length === 0) throw malformed('empty object identifier');
  if (((bytes[bytes.length - 1] as number) & 0x80) !== 0) throw malformed('truncated object identifier');
  // Built as a string as it is read: OIDs are parsed several times per request.
  let dotted = '';
  let value = 0;
  for (const byte of bytes) {
    // A subidentifier's first byte is never 0x80 (a leading zero group): one OID, one encoding.
    if (value === 0 && byte === 0x80) throw malformed('non-minimal object identifier');
    value = value * 128 + (byte & 0x7f);
    if (value > Number.MAX_SAFE_INTEGER) throw malformed('object identifier arc too large');
    if ((byte & 0x80) !== 0) continue;
    if (dotted === '') {
      // The first subidentifier holds two arcs: 40 * first + second, the first at most 2.
      const top = Math.min(2, Math.floor(value / 40));
      dotted = `${top}.${value - top * 40}`;
    } else {
      dotted += `.${value}`;
    }
    value = 0;
  }
  return dotted;
}

/** Decodes a BIT STRING node with no unused bits (keys, signatures). */
export function readBitStringBytes(node: DerNode): Buffer {
  const content = contentOf(expectTag(node, Tag.bitString, 'bit string'));
  if (content.length === 0 || content[0] !== 0) throw malformed('bit string with unused bits');
  return content.subarray(1);
}

/** Decodes a named-bit BIT STRING into the numbers of the bits that are set. */
export function readNamedBits(node: DerNode): number[] {
  const content = contentOf(expectTag(node, Tag.bitString, 'bit string'));
  if (content.length === 0 || (content[0] as number) > 7) throw malformed('invalid bit string');
  const bits: number[] = [];
  for (let i = 1; i < content.length; i++) {
    for (let bit = 0; bit < 8; bit++) {
      if (((content[i] as number) & (0x80 >> bit)) !== 0) bits.push((i - 1) * 8 + bit);
    }
  }
  return bits;
}

/** Decodes a BOOLEAN node. */
export function readBoolean(node: DerNode): boolean {
  const content = contentOf(expectTag(node, Tag.boolean, 'boolean'));
  if (content.length !== 1) throw malformed('boolean must be one byte');
  // BER reads any non-zero byte as TRUE; DER allows FF alone, so that one value has one encoding.
  if (content[0] !== 0 && content[0] !== 0xff) throw malformed('boolean must be 00 or FF');
  return content[0] === 0xff;
}

/** Decodes a string node of any of the X.500 string types to text. */
export function readString(node: DerNode): string {
  const content = contentOf(node);
  switch (node.tag) {
    case Tag.utf8String:
      return content.toString('utf8');
    case Tag.printableString:
    case Tag.ia5String:
    case Tag.t61String:
      return content.toString('latin1');
    case Tag.bmpString:
      // UTF-16 big-endian, two bytes a character: an odd length is no BMPString (swap16 would throw a RangeError).
      if (content.length % 2 !== 0)
        throw malformed(`BMPString of ${content.length} bytes (not a multiple of 2)`);
      return Buffer.from(content).swap16().toString('utf16le');
    default:
      throw malformed(`unsupported string type 0x${node.tag.toString(16)}`);
  }
}

/** Decodes a UTCTime or GeneralizedTime node; `what` names the field for the error message. */
export function readTime(node: DerNode | undefined, what = 'time'): Date {
  if (!node) throw malformed(`${what} is missing`);
  const text = contentOf(node).toString('ascii');
  const match =
    node.tag === Tag.utcTime
      ? /^(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(text)
      : node.tag === Tag.generalizedTime
        ? /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(text)
        : null;
  if (!match) throw malformed(`invalid ${what} "${text}"`);
  const [, y, mo, d, h, mi, s] = match.map(Number) as number[];
  const year =
    node.tag === Tag.utcTime ? ((y as number) < 50 ? 2000 + (y as number) : 1900 + (y as number)) : y;
  const date = new Date(Date.UTC(year as number, (mo as number) - 1, d, h, mi, s));
  // Date.UTC rolls fields over (month 13 is next January, 24:00 the next day): such a time is malformed.
  const read = [mo, d, h, mi, s];
  const fields = [
    date.getUTCMonth() + 1,
    date.getUTCDate(),
    date.getUTCHours(),
    date.getUTCMinutes(),
    date.getUTCSeconds(),
  ];
  if (fields.some((field, i) => field !== read[i])) throw malformed(`invalid ${what} "${text}"`);
  return date;
}
