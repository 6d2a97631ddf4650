/** PEM armour (RFC 7468): encoding DER as text blocks and decoding them with their type checked. */
import { InvalidInputError } from '../errors.ts';

/** One decoded PEM block. */
export interface PemBlock {
  type: string;
  der: Buffer;
}

const blockPattern = /-----BEGIN ([A-Z0-9 ]+)-----\r?\n([\s\S]*?)-----END ([A-Z0-9 ]+)-----/g;

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
  for (const match of text.matchAll(blockPattern)) {
    const [, begin, body, end] = match as unknown as [string, string, string, string];
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
