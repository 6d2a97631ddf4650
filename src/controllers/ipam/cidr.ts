/**
 * IP ranges as IPAM compares them: parsed once into the network's bytes and prefix length, so that
 * `2600:1f13::/80` and `2600:1f13:0::/80` are one range, and two ranges overlap exactly when one
 * contains the other. Pure.
 */
import { isIP } from 'node:net';
import { InvalidInputError } from '../../errors.ts';
import { bytesToIp, ipToBytes } from '../../pki/ip.ts';

/** A parsed range: its network bytes (host bits cleared) and prefix length. */
export interface Cidr {
  family: 4 | 6;
  /** The network address, 4 or 16 bytes, host bits zero. */
  network: Buffer;
  prefixLength: number;
  /** The canonical text, `<network>/<length>` (RFC 5952 for IPv6). */
  text: string;
}

/** Clears the bits of `bytes` from `prefixLength` on (a copy). */
function masked(bytes: Buffer, prefixLength: number): Buffer {
  const out = Buffer.from(bytes);
  for (let bit = prefixLength; bit < out.length * 8; bit++) {
    out[bit >> 3] = (out[bit >> 3] as number) & ~(0x80 >> (bit & 7));
  }
  return out;
}

/** Parses `<address>/<length>`; anything else is an InvalidInputError naming the text. */
export function parseCidr(text: string): Cidr {
  const match = /^([^/\s]+)\/(\d{1,3})$/.exec(text);
  const address = match?.[1] ?? '';
  const family = isIP(address);
  const prefixLength = Number(match?.[2]);
  if (family === 0 || !(prefixLength <= (family === 4 ? 32 : 128))) {
    throw new InvalidInputError(`"${text}" is not an IP range (such as 10.4.1.0/24 or 2600:1f13::/80)`);
  }
  const network = masked(ipToBytes(address), prefixLength);
  return {
    family: family as 4 | 6,
    network,
    prefixLength,
    text: `${bytesToIp(network)}/${prefixLength}`,
  };
}

/** The canonical text of a range, or the text unchanged when it does not parse (compared verbatim). */
export function canonicalCidr(text: string): string {
  try {
    return parseCidr(text).text;
  } catch {
    return text;
  }
}

/** Whether two ranges share an address: same family, and equal on the shorter prefix. */
export function overlaps(a: Cidr, b: Cidr): boolean {
  if (a.family !== b.family) return false;
  const shorter = Math.min(a.prefixLength, b.prefixLength);
  return masked(a.network, shorter).equals(masked(b.network, shorter));
}

/** `cidr` cut to a shorter prefix: the key under which a range of that length would contain it. */
export function truncate(cidr: Cidr, prefixLength: number): string {
  return `${bytesToIp(masked(cidr.network, prefixLength))}/${prefixLength}`;
}

/** Whether two lists name the same ranges, in any order and spelling. */
export function sameRanges(a: readonly string[], b: readonly string[]): boolean {
  const left = a.map(canonicalCidr).sort();
  const right = b.map(canonicalCidr).sort();
  return left.length === right.length && left.every((value, i) => value === right[i]);
}
