/** Listen addresses as kops writes them (":3988", "127.0.0.1:3988", "[::1]:3988"), parsed for node:net. */
import { InvalidInputError } from '../errors.ts';

/** A host and port to bind; `host` undefined means every interface. */
export interface ListenAddress {
  host: string | undefined;
  port: number;
}

/** Parses `[host]:port`; an empty host binds every interface, as Go's net.Listen does. */
export function parseListenAddress(listen: string): ListenAddress {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9.-]*)):(\d{1,5})$/.exec(listen.trim());
  const port = Number(match?.[3]);
  if (!match || port > 65_535) {
    throw new InvalidInputError(
      `invalid listen address "${listen}": use ":PORT", "HOST:PORT" or "[IPv6]:PORT" (port 0-65535)`,
    );
  }
  return { host: match[1] ?? (match[2] || undefined), port };
}

/** A URL base for an address a server actually bound, e.g. `http://127.0.0.1:41234`. */
export function urlOf(address: { address: string; family: string; port: number }, scheme = 'http'): string {
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `${scheme}://${host}:${address.port}`;
}
