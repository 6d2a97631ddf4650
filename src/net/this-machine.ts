/**
 * Whether a connection comes from this machine: a loopback address, or an address of one of its
 * network interfaces. No remote client can open a TCP connection from such an address, so the
 * operations endpoint keeps room for them beyond its total cap: the kubelet's liveness probe of a
 * host-network pod comes from the node's own address, and a crowd of remote clients must not fail it
 * (the kubelet would restart the controller).
 */
import { isIP } from 'node:net';
import { networkInterfaces as osInterfaces } from 'node:os';
import { sourceOf } from './source.ts';

/** How long the interfaces' addresses are trusted before they are read again (DHCP may change them). */
const rereadMs = 10_000;

/**
 * A predicate over sources ({@link sourceOf}) that says whether each is this machine. `now` is
 * monotonic: on the wall clock, a step back would keep stale addresses for as long as it had been ahead.
 */
export function fromThisMachine(
  interfaces: () => ReturnType<typeof osInterfaces> = osInterfaces,
  now: () => number = () => performance.now(),
): (source: string) => boolean {
  let own = new Set<string>();
  let readAt = Number.NEGATIVE_INFINITY;
  return (source) => {
    if (isLoopback(source)) return true;
    if (now() - readAt >= rereadMs) {
      own = new Set(
        Object.values(interfaces())
          .flat()
          .filter((i) => i !== undefined)
          .map((i) => sourceOf(i.address)),
      );
      readAt = now();
    }
    return own.has(source);
  };
}

/** 127.0.0.0/8; the IPv6 loopback ::1 counts as its /64, `::/64`. */
function isLoopback(source: string): boolean {
  return source === '::/64' || (isIP(source) === 4 && source.startsWith('127.'));
}
