/**
 * A simulated egress proxy on loopback: an HTTP proxy that answers CONNECT, records the `host:port`
 * of every tunnel asked for, and connects it to 127.0.0.1 on the same port, whatever the host names.
 * Tests address the simulators by names that exist nowhere (`ec2.proxied.test`), so that a request
 * reaches them only through the proxy: with {@link refuseDirectLookups} a direct connection to such a
 * name fails at once, without a DNS query leaving the machine. `refuse` answers a tunnel 403.
 */
import dns from 'node:dns';
import { createServer, type IncomingMessage } from 'node:http';
import { type AddressInfo, connect, createServer as createNetServer, type Socket } from 'node:net';
import { listenOnLoopback } from '../net/loopback.ts';

/** The names tests give the simulators; none resolves. */
export const proxiedSuffix = '.proxied.test';

export interface EgressProxySim {
  /** `http://127.0.0.1:port`, to put in HTTPS_PROXY / HTTP_PROXY. */
  url: string;
  /** The `host:port` of each CONNECT, in order, refused ones included. */
  tunnels: string[];
  /** Answer the CONNECTs for which this says true with 403 (default: none). */
  refuse: (target: string) => boolean;
  close(): Promise<void>;
}

/** Starts the proxy on 127.0.0.1. */
export async function startEgressProxy(): Promise<EgressProxySim> {
  const sockets = new Set<Socket>();
  const server = createServer((_req, res) => {
    // Only tunnels: a plain request to the proxy is not what the clients send.
    res.writeHead(405, { 'content-type': 'text/plain' }).end('CONNECT only\n');
  });
  const sim: EgressProxySim = {
    url: '',
    tunnels: [],
    refuse: () => false,
    close: async () => undefined,
  };
  server.on('connect', (req: IncomingMessage, client: Socket, head: Buffer) => {
    const target = req.url ?? '';
    sim.tunnels.push(target);
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => client.destroy());
    const port = Number(/:(\d+)$/.exec(target)?.[1]);
    if (sim.refuse(target) || !(port > 0)) {
      client.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    const upstream = connect({ host: '127.0.0.1', port });
    sockets.add(upstream);
    upstream.on('close', () => sockets.delete(upstream));
    upstream.on('error', () => {
      if (!client.destroyed) client.end('HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n');
    });
    upstream.on('connect', () => {
      client.write('HTTP/1.1 200 Connection established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    client.on('close', () => upstream.destroy());
    upstream.on('end', () => client.end());
  });
  const listener = await listenOnLoopback(server);
  sim.url = listener.url;
  sim.close = async () => {
    for (const socket of sockets) socket.destroy();
    await listener.close();
  };
  return sim;
}

/** A proxy on 127.0.0.1 that reads the CONNECT and never answers (stalled or overloaded). */
export interface StalledProxySim {
  /** `http://127.0.0.1:port`. */
  url: string;
  /** The connections the proxy holds open. */
  open: Set<Socket>;
  close(): Promise<void>;
}

/** Starts a {@link StalledProxySim}. */
export async function startStalledProxy(): Promise<StalledProxySim> {
  const open = new Set<Socket>();
  const server = createNetServer((socket) => {
    open.add(socket);
    // It reads (the CONNECT, then the end of the connection), as a proxy does.
    socket.resume();
    socket.on('close', () => open.delete(socket));
    socket.on('error', () => socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    open,
    close: async () => {
      for (const socket of open) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Resolves once `open` is empty; rejects after `ms`. */
export async function drained(open: Set<Socket>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (open.size > 0) {
    if (Date.now() > end)
      throw new Error(`${open.size} connection(s) still open at the proxy after ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * Makes a lookup of a name ending in {@link proxiedSuffix} fail at once in this process (a direct
 * connection to a simulator named so fails as an unknown host would, and no DNS query is sent);
 * returns the function that undoes it.
 */
export function refuseDirectLookups(): () => void {
  const original = dns.lookup;
  const guarded = function (this: unknown, hostname: string, ...rest: unknown[]) {
    if (String(hostname).toLowerCase().endsWith(proxiedSuffix)) {
      const callback = rest[rest.length - 1] as (err: Error) => void;
      const err = Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), {
        code: 'ENOTFOUND',
        hostname,
      });
      process.nextTick(() => callback(err));
      return {};
    }
    return (original as (...args: unknown[]) => unknown).call(this, hostname, ...rest);
  };
  (dns as { lookup: unknown }).lookup = guarded;
  return () => {
    (dns as { lookup: unknown }).lookup = original;
  };
}

/** `url` with its host replaced by `<name>.proxied.test` (its port kept). */
export function proxiedUrl(url: string | URL, name: string): string {
  const u = new URL(url);
  u.hostname = `${name}${proxiedSuffix}`;
  return u.toString().replace(/\/$/, '');
}
