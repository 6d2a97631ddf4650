/**
 * Who a connection or request counts against. The per-source connection caps, the rate limit and the
 * bootstrap queue's per-source cap all key on {@link sourceOf}: counting IPv6 addresses one by one
 * would let one host, which commonly holds a whole /64, pass as 2^64 sources.
 */
import { isIP } from 'node:net';
import { bytesToIp, ipToBytes } from '../pki/ip.ts';

/** The address a connection comes from, IPv4-mapped IPv6 written as IPv4; '' when unknown. */
export function sourceAddress(remoteAddress: string | undefined): string {
  const address = remoteAddress ?? '';
  return address.startsWith('::ffff:') ? address.slice(7) : address;
}

/**
 * The source a connection or request counts against: its IPv4 address (an IPv4-mapped one as IPv4),
 * or the /64 of an IPv6 address; anything that is not an address, as it is.
 */
export function sourceOf(remoteAddress: string | undefined): string {
  const address = remoteAddress ?? '';
  if (isIP(address) !== 6) return address;
  const bytes = ipToBytes(address);
  const mapped = bytes.subarray(0, 10).every((b) => b === 0) && bytes.readUInt16BE(10) === 0xffff;
  if (mapped) return bytesToIp(bytes.subarray(12));
  return `${bytesToIp(Buffer.concat([bytes.subarray(0, 8), Buffer.alloc(8)]))}/64`;
}
