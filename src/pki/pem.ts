/** PEM armour (RFC 7468): encoding DER as text blocks and decoding them with their type checked. */
import { InvalidInputError } from '../errors.ts';

/** One decoded PEM block. */
export interface PemBlock {
  type: string;
  der: Buffer;
}

const beginPattern = /-----BEGIN ([A-Z0-9 ]+)-----\r?\n/g;
const endPattern = /-----END ([A-Z0-9 ]+)-----/g;

/** Encodes DER as a PEM block with 64-character lines. */
export function encodePem(type: string, der: Buffer): string {
  const base64 = der.toString('base64');
  let body = '';
  for (let i = 0; i < base64.length; i += 64) body += `${base64.slice(i, i + 64)}\n`;
  return `-----BEGIN ${type}-----\n${body}-----END ${type}-----\n`;
}

/** Decodes every PEM block in `text`; a block whose base64 body is damaged is an error. */
export function decodePemBlocks(text: string, source = 'input'): PemBlock[] {
  const blocks: PemBlock[] = [];
  // A scan rather than one pattern with a lazy body: that pattern searched to the end of the text
  // again from every BEGIN line without an END, quadratic in what a client sends (64 KiB of BEGIN
  // lines cost 167 ms). Each block's END is searched for once, from its BEGIN; when there is none,
  // no later BEGIN has one either.
  const begins = new RegExp(beginPattern);
  const ends = new RegExp(endPattern);
  for (let match = begins.exec(text); match !== null; match = begins.exec(text)) {
    ends.lastIndex = begins.lastIndex;
    const closing = ends.exec(text);
    if (closing === null) break;
    const begin = match[1] as string;
    const end = closing[1] as string;
    const body = text.slice(begins.lastIndex, closing.index);
    begins.lastIndex = ends.lastIndex;
    if (begin !== end)
      throw new InvalidInputError(`${source}: PEM block BEGIN ${begin} ends with END ${end}`);
    const compact = body.replace(/\s+/g, '');
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(compact) || compact.length % 4 !== 0) {
      throw new InvalidInputError(`${source}: the ${begin} PEM block is not valid base64`);
    }
    blocks.push({ type: begin, der: Buffer.from(compact, 'base64') });
  }
  return blocks;
}

/** Decodes the PEM blocks of one expected type; none at all, or another type, is an error. */
export function decodePem(text: string, type: string, source = 'input'): Buffer[] {
  const blocks = decodePemBlocks(text, source);
  if (blocks.length === 0) throw new InvalidInputError(`${source}: no PEM block found; expected ${type}`);
  const wrong = blocks.find((b) => b.type !== type);
  if (wrong)
    throw new InvalidInputError(`${source}: found a PEM block of type ${wrong.type}, expected ${type}`);
  return blocks.map((b) => b.der);
}
