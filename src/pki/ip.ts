/** IP addresses as subjectAltName carries them: 4 or 16 raw bytes. */
import { isIP } from 'node:net';
import { InvalidInputError } from '../errors.ts';

function ipv4Bytes(text: string): number[] {
  return text.split('.').map(Number);
}

/** The raw bytes of an IPv4 or IPv6 address; anything else is an input error. */
export function ipToBytes(text: string): Buffer {
  const version = isIP(text);
  if (version === 4) return Buffer.from(ipv4Bytes(text));
  if (version !== 6) throw new InvalidInputError(`"${text}" is not an IP address`);
  let address = text;
  const tail: number[] = [];
  const dotted = /:(\d+\.\d+\.\d+\.\d+)$/.exec(address);
  if (dotted) {
    tail.push(...ipv4Bytes(dotted[1] as string));
    address = `${address.slice(0, dotted.index)}:0:0`;
  }
  const [head = '', rest] = address.split('::');
  const headGroups = head ? head.split(':') : [];
  const restGroups = rest ? rest.split(':') : [];
  const missing = 8 - headGroups.length - restGroups.length;
  const groups = [...headGroups, ...Array<string>(rest === undefined ? 0 : missing).fill('0'), ...restGroups];
  const bytes = Buffer.alloc(16);
  for (const [i, group] of groups.entries()) bytes.writeUInt16BE(Number.parseInt(group, 16), i * 2);
  if (tail.length) Buffer.from(tail).copy(bytes, 12);
  return bytes;
}

/** Formats raw address bytes: dotted IPv4, or RFC 5952 IPv6 (longest zero run compressed). */
export function bytesToIp(bytes: Buffer): string {
  if (bytes.length === 4) return [...bytes].join('.');
  if (bytes.length !== 16)
    throw new InvalidInputError(`an IP address has 4 or 16 bytes, not ${bytes.length}`);
  const groups = Array.from({ length: 8 }, (_, i) => bytes.readUInt16BE(i * 2));
  let bestStart = -1;
  let bestLength = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLength).join(':')}`;
}

/** The canonical text of an address, so that "::1" and "0:0::1" compare equal. */
export function canonicalIp(text: string): string {
  return bytesToIp(ipToBytes(text));
}
