/**
 * The egress proxy: kops puts `http_proxy`, `https_proxy` and `NO_PROXY`/`no_proxy` into the
 * controller's pod when `spec.networking.egressProxy` is set, and the Go controller reaches its cloud,
 * its state store and the API server through it (Go's `http.ProxyFromEnvironment`). One decision,
 * {@link proxyFor}, made as Go's `golang.org/x/net/http/httpproxy` makes it, and one agent factory,
 * {@link egressAgent}, whose connections to a proxied target are CONNECT tunnels through the proxy;
 * every outbound client is built on them (docs/operations.md, "Egress proxy").
 *
 * Go's semantics, kept:
 * - `HTTPS_PROXY` then `https_proxy` for `https:` targets, `HTTP_PROXY` then `http_proxy` for `http:`
 *   ones (the upper-case name wins when both are set and non-empty); no fallback from one to the
 *   other, no `ALL_PROXY`. `NO_PROXY` then `no_proxy`. A proxy without a scheme is `http://`.
 * - `localhost` and loopback addresses are never proxied.
 * - `NO_PROXY` is a comma-separated list, case-insensitive: `*` (nothing is proxied); an IP or CIDR
 *   (matched against IP-literal targets only, never against a name's resolved address); `name`
 *   (the name and its subdomains); `.name` or `*.name` (its subdomains only); any of these but a
 *   CIDR with `:port` (only that port; a target's port is its URL's or the scheme's default).
 *
 * Added, for safety: the link-local range (169.254.0.0/16, fe80::/10), AWS's IPv6 IMDS address
 * (fd00:ec2::254) and `metadata.google.internal` are never proxied, whatever `NO_PROXY` says: a
 * metadata service answers only the machine itself, and a proxy would answer with its own.
 *
 * Differences: Go sends a plain `http:` request to the proxy in absolute form; the agent here tunnels
 * it with CONNECT too (every production endpoint is `https:`; only a simulator or an S3-compatible
 * store on plain HTTP is reached that way). Node 24's own `NODE_USE_ENV_PROXY` is not used: lower case
 * wins there, a bare `name` does not match its subdomains, and CIDRs (which kops' `NO_PROXY` lists:
 * the cluster's networks and the API server's service address) are not understood.
 */
import {
  type ClientRequest,
  Agent as HttpAgent,
  type AgentOptions as HttpAgentOptions,
  request as httpRequestOf,
} from 'node:http';
import {
  Agent as HttpsAgent,
  type AgentOptions as HttpsAgentOptions,
  request as httpsRequestOf,
} from 'node:https';
import { BlockList, isIP, connect as netConnect, type Socket } from 'node:net';
import { type Duplex, Readable } from 'node:stream';
import { connect as tlsConnect } from 'node:tls';

/** The environment the decision reads (default `process.env`). */
export type ProxyEnvironment = Readonly<Record<string, string | undefined>>;

/** The parsed settings, as Go's httpproxy.Config after init. */
interface ProxySettings {
  http: URL | undefined;
  https: URL | undefined;
  /** `*` in NO_PROXY. */
  none: boolean;
  /** IP entries, each as a list of one address (so that `::ffff:10.0.0.1` and `10.0.0.1` compare equal). */
  ips: Array<{ ip: BlockList; port: string }>;
  cidrs: BlockList;
  domains: Array<{ suffix: string; port: string; matchHost: boolean }>;
}

/** The first non-empty value of the names, as Go's getEnvAny. */
function envAny(env: ProxyEnvironment, ...names: string[]): string {
  for (const name of names) {
    const value = env[name];
    if (value) return value;
  }
  return '';
}

/** A proxy URL, `http://` when it names no scheme (as Go's parseProxy); undefined when unusable. */
function parseProxy(value: string): URL | undefined {
  if (value === '') return undefined;
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(value) ? value : `http://${value}`;
  try {
    const url = new URL(withScheme);
    // A SOCKS proxy (which Go also supports) is not: a target is then reached directly.
    return url.protocol === 'http:' || url.protocol === 'https:' ? url : undefined;
  } catch {
    return undefined;
  }
}

const unbracket = (host: string) => host.replace(/^\[(.*)\]$/, '$1');
const family = (ip: string) => (isIP(ip) === 6 ? 'ipv6' : 'ipv4');

/** `host:port` or `[v6]:port` split as Go's net.SplitHostPort, else undefined. */
function splitHostPort(entry: string): { host: string; port: string } | undefined {
  const bracketed = /^\[([^\]]*)\]:(\d*)$/.exec(entry);
  if (bracketed) return { host: bracketed[1] as string, port: bracketed[2] as string };
  const plain = /^([^:[\]]*):(\d*)$/.exec(entry);
  return plain ? { host: plain[1] as string, port: plain[2] as string } : undefined;
}

function parseNoProxy(value: string, settings: ProxySettings): void {
  for (const raw of value.split(',')) {
    const entry = raw.trim().toLowerCase();
    if (entry === '') continue;
    if (entry === '*') {
      settings.none = true;
      return;
    }
    const cidr = /^([^/]+)\/(\d{1,3})$/.exec(entry);
    if (cidr && isIP(cidr[1] as string)) {
      const ip = cidr[1] as string;
      const bits = Number(cidr[2]);
      if (bits <= (isIP(ip) === 6 ? 128 : 32)) settings.cidrs.addSubnet(ip, bits, family(ip));
      continue;
    }
    const split = splitHostPort(entry);
    if (split && split.host === '') continue;
    let host = split ? unbracket(split.host) : entry;
    const port = split?.port ?? '';
    if (isIP(host)) {
      const ip = new BlockList();
      ip.addAddress(host, family(host));
      settings.ips.push({ ip, port });
      continue;
    }
    if (host.startsWith('*.')) host = host.slice(1);
    const matchHost = !host.startsWith('.');
    settings.domains.push({ suffix: matchHost ? `.${host}` : host, port, matchHost });
  }
}

let cached: { key: string; settings: ProxySettings } | undefined;

/** The settings of `env`, parsed once for as long as the variables stay the same. */
function settingsOf(env: ProxyEnvironment): ProxySettings {
  const https = envAny(env, 'HTTPS_PROXY', 'https_proxy');
  const http = envAny(env, 'HTTP_PROXY', 'http_proxy');
  const noProxy = envAny(env, 'NO_PROXY', 'no_proxy');
  const key = JSON.stringify([https, http, noProxy]);
  if (cached?.key === key) return cached.settings;
  const settings: ProxySettings = {
    http: parseProxy(http),
    https: parseProxy(https),
    none: false,
    ips: [],
    cidrs: new BlockList(),
    domains: [],
  };
  parseNoProxy(noProxy, settings);
  cached = { key, settings };
  return settings;
}

/** Never proxied: loopback (as Go) and the metadata services (link-local, AWS's IPv6 IMDS). */
const neverProxied = new BlockList();
neverProxied.addSubnet('127.0.0.0', 8, 'ipv4');
neverProxied.addAddress('::1', 'ipv6');
neverProxied.addSubnet('169.254.0.0', 16, 'ipv4');
neverProxied.addSubnet('fe80::', 10, 'ipv6');
neverProxied.addAddress('fd00:ec2::254', 'ipv6');
const neverProxiedNames = new Set(['localhost', 'metadata.google.internal', 'metadata.google.internal.']);

/** Where a request goes: its scheme, host (IPv6 without brackets) and port (the scheme's by default). */
export interface ProxyTarget {
  protocol: string;
  hostname: string;
  port?: string | number | null | undefined;
}

/**
 * The proxy a request to `target` goes through, or undefined to connect directly: Go's
 * `ProxyFromEnvironment` decision, plus the metadata services never proxied (module comment).
 */
export function proxyFor(target: URL | ProxyTarget, env: ProxyEnvironment = process.env): URL | undefined {
  const settings = settingsOf(env);
  const proxy =
    target.protocol === 'https:' ? settings.https : target.protocol === 'http:' ? settings.http : undefined;
  if (proxy === undefined || settings.none) return undefined;
  const host = unbracket(target.hostname).toLowerCase().replace(/%.*$/, '');
  const port = String(target.port || (target.protocol === 'https:' ? 443 : 80));
  if (neverProxiedNames.has(host)) return undefined;
  if (isIP(host)) {
    if (neverProxied.check(host, family(host))) return undefined;
    if (settings.cidrs.check(host, family(host))) return undefined;
    for (const entry of settings.ips) {
      if (entry.ip.check(host, family(host)) && (entry.port === '' || entry.port === port)) return undefined;
    }
    return proxy;
  }
  for (const d of settings.domains) {
    if (host.endsWith(d.suffix) || (d.matchHost && host === d.suffix.slice(1))) {
      if (d.port === '' || d.port === port) return undefined;
    }
  }
  return proxy;
}

/** A proxy's URL without its credentials, for messages. */
export function redactedProxy(proxy: URL): string {
  return `${proxy.protocol}//${proxy.host}`;
}

/** How long opening a tunnel may take (the callers' deadlines are usually shorter and end it first). */
const tunnelTimeoutMs = 30_000;

/** The proxy answered the CONNECT with something other than 2xx, or the tunnel could not be opened. */
function tunnelError(proxy: URL, target: string, reason: string, cause?: unknown): Error {
  const err = new Error(
    `the egress proxy ${redactedProxy(proxy)} did not open a tunnel to ${target}: ${reason}`,
    cause === undefined ? undefined : { cause },
  ) as NodeJS.ErrnoException;
  // Node's own name for this failure (its NODE_USE_ENV_PROXY support uses it).
  err.code = 'ERR_PROXY_TUNNEL';
  return err;
}

/**
 * Opens a CONNECT tunnel to `host:port` through `proxy`; resolves to the socket carrying it. When
 * `signal` aborts first, the connection to the proxy is closed and the promise rejects with its reason.
 */
export function openTunnel(
  proxy: URL,
  host: string,
  port: number | string,
  signal?: AbortSignal,
): Promise<Socket> {
  const target = `${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
  const proxyHost = unbracket(proxy.hostname);
  const proxyPort = Number(proxy.port || (proxy.protocol === 'https:' ? 443 : 80));
  return new Promise<Socket>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const socket: Socket =
      proxy.protocol === 'https:'
        ? tlsConnect({
            host: proxyHost,
            port: proxyPort,
            ...(isIP(proxyHost) ? {} : { servername: proxyHost }),
          })
        : netConnect({ host: proxyHost, port: proxyPort });
    let received = Buffer.alloc(0);
    const fail = (err: Error) => {
      cleanup();
      socket.destroy();
      reject(err);
    };
    const onError = (err: Error) => fail(tunnelError(proxy, target, err.message, err));
    const onClose = () => fail(tunnelError(proxy, target, 'the proxy closed the connection'));
    const onData = (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      const end = received.indexOf('\r\n\r\n');
      if (end < 0) {
        if (received.length > 16 * 1024)
          fail(tunnelError(proxy, target, 'an answer without an end of headers'));
        return;
      }
      const statusLine = received.subarray(0, received.indexOf('\r\n')).toString('latin1');
      const status = Number(/^HTTP\/\d(?:\.\d)? (\d{3})/.exec(statusLine)?.[1]);
      if (!(status >= 200 && status <= 299)) {
        fail(tunnelError(proxy, target, `it answered "${statusLine.slice(0, 200)}"`));
        return;
      }
      cleanup();
      const rest = received.subarray(end + 4);
      if (rest.length > 0) socket.unshift(rest);
      resolve(socket);
    };
    const timer = setTimeout(
      () => fail(tunnelError(proxy, target, `no answer within ${tunnelTimeoutMs} ms`)),
      tunnelTimeoutMs,
    );
    const onAbort = () => fail(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    function cleanup() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      socket.off('data', onData);
      socket.off('error', onError);
      socket.off('close', onClose);
    }
    socket.on('data', onData);
    socket.on('error', onError);
    socket.on('close', onClose);
    const auth =
      proxy.username || proxy.password
        ? `Proxy-Authorization: Basic ${Buffer.from(
            `${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`,
          ).toString('base64')}\r\n`
        : '';
    socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${auth}\r\n`);
  });
}

type Callback = (err: Error | null, socket: Duplex) => void;
type ConnectionOptions = { host?: string | null; hostname?: string | null; port?: number | string | null };
/** Which proxy, if any, carries a connection to `target`. */
type ProxyDecision = (target: ProxyTarget) => URL | undefined;
/** What an agent's `createSocket` (Node's, undocumented but stable: agent-base overrides it too) receives. */
type CreateSocket = (req: ClientRequest, options: object, cb: Callback) => void;

/**
 * Makes the tunnel being opened for `req` end when `req` is destroyed before it has a socket: Node's
 * request then emits nothing (no 'close', no 'error') until the agent hands it a socket or an error,
 * so `destroy` itself is the only sign that the caller gave up (its signal, its deadline, an SDK's
 * timeout). The request then gets the error it was destroyed with, as with a socket.
 */
function cancelOnDestroy(req: ClientRequest | undefined): { signal: AbortSignal; settled(): void } {
  const controller = new AbortController();
  let pending = req !== undefined;
  if (req) {
    const destroy = req.destroy;
    req.destroy = function (this: ClientRequest, err?: Error) {
      if (pending) {
        pending = false;
        controller.abort(err ?? Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }));
      }
      return destroy.call(this, err);
    };
  }
  return {
    signal: controller.signal,
    settled: () => {
      pending = false;
    },
  };
}

/**
 * Opens the agent's connection: directly when `decide` names no proxy (returned at once, as the base
 * agent does), else through a tunnel, handed to `callback` when it is open (`wrap` then makes the TLS
 * connection to the target over it). The tunnel ends with `req` if `req` is destroyed first.
 */
function connectionOf(
  protocol: 'http:' | 'https:',
  decide: ProxyDecision,
  req: ClientRequest | undefined,
  options: ConnectionOptions,
  callback: Callback,
  direct: () => Duplex,
  wrap: (tunnel: Socket) => Duplex,
): Duplex | undefined {
  const host = options.host ?? options.hostname ?? 'localhost';
  const port = options.port ?? (protocol === 'https:' ? 443 : 80);
  const proxy = decide({ protocol, hostname: host, port });
  if (proxy === undefined) return direct();
  const cancel = cancelOnDestroy(req);
  openTunnel(proxy, unbracket(host), port, cancel.signal).then(
    (tunnel) => {
      cancel.settled();
      let socket: Duplex;
      try {
        socket = wrap(tunnel);
      } catch (err) {
        tunnel.destroy();
        callback(err as Error, undefined as never);
        return;
      }
      callback(null, socket);
    },
    (err: Error) => {
      cancel.settled();
      callback(err, undefined as never);
    },
  );
  return undefined;
}

/** Node's agent with a `createSocket` to override (undocumented but stable: agent-base overrides it too). */
type AgentClass = new (
  options: HttpsAgentOptions,
) => HttpAgent & {
  createConnection(options: object, callback?: Callback): Duplex | undefined;
};

/**
 * `Base` (Node's http or https agent) whose connections {@link connectionOf} opens: direct, or
 * through a tunnel that ends with its request. For https the base agent's TLS connection (its
 * session cache, servername, CA and verification) runs over the tunnel.
 */
function egressAgentClass(Base: AgentClass, protocol: 'http:' | 'https:') {
  const baseCreateSocket = (Base.prototype as unknown as { createSocket: CreateSocket }).createSocket;
  return class EgressAgent extends Base {
    readonly #decide: ProxyDecision;
    /** The request whose connection `createConnection` is making (it is called within `createSocket`). */
    #creating: ClientRequest | undefined;
    constructor(options: HttpsAgentOptions, decide: ProxyDecision) {
      super(options);
      this.#decide = decide;
    }
    createSocket(req: ClientRequest, options: object, cb: Callback): void {
      this.#creating = req;
      try {
        baseCreateSocket.call(this, req, options, cb);
      } finally {
        this.#creating = undefined;
      }
    }
    override createConnection(options: ConnectionOptions, callback?: Callback): Duplex | undefined {
      const cb = callback ?? (() => undefined);
      const direct = () => super.createConnection(options, cb) as Duplex;
      const wrap = (tunnel: Socket) =>
        protocol === 'https:' ? (super.createConnection({ ...options, socket: tunnel }) as Duplex) : tunnel;
      return connectionOf(protocol, this.#decide, this.#creating, options, cb, direct, wrap);
    }
  };
}

const EgressHttpAgent = egressAgentClass(HttpAgent as unknown as AgentClass, 'http:');
const EgressHttpsAgent = egressAgentClass(HttpsAgent as unknown as AgentClass, 'https:');

/**
 * An agent for `protocol` that honours the egress proxy ({@link proxyFor}) for each connection it
 * opens; otherwise Node's agent with `options`. Every outbound client is built on one.
 */
export function egressAgent(
  protocol: 'https:',
  options?: HttpsAgentOptions,
  env?: ProxyEnvironment,
): HttpsAgent;
export function egressAgent(protocol: 'http:', options?: HttpAgentOptions, env?: ProxyEnvironment): HttpAgent;
export function egressAgent(
  protocol: string,
  options?: HttpsAgentOptions,
  env?: ProxyEnvironment,
): HttpAgent | HttpsAgent;
export function egressAgent(
  protocol: string,
  options: HttpsAgentOptions = {},
  env: ProxyEnvironment = process.env,
): HttpAgent | HttpsAgent {
  const decide: ProxyDecision = (target) => proxyFor(target, env);
  return protocol === 'http:' ? new EgressHttpAgent(options, decide) : new EgressHttpsAgent(options, decide);
}

/**
 * An agent for `protocol` whose every connection is a CONNECT tunnel through `proxy`, whatever the
 * environment says (a kubeconfig's `proxy-url`, which client-go applies to every request); otherwise
 * as {@link egressAgent}.
 */
export function proxiedAgent(protocol: 'https:', proxy: URL, options?: HttpsAgentOptions): HttpsAgent;
export function proxiedAgent(protocol: 'http:', proxy: URL, options?: HttpAgentOptions): HttpAgent;
export function proxiedAgent(
  protocol: string,
  proxy: URL,
  options: HttpsAgentOptions = {},
): HttpAgent | HttpsAgent {
  const decide: ProxyDecision = () => proxy;
  return protocol === 'http:' ? new EgressHttpAgent(options, decide) : new EgressHttpsAgent(options, decide);
}

const shared = new Map<string, HttpAgent | HttpsAgent>();

/**
 * The process's shared agent for `protocol` (kept-alive connections, as Node's global agent), for the
 * clients that would otherwise use Node's global agent.
 */
export function sharedEgressAgent(protocol: 'https:'): HttpsAgent;
export function sharedEgressAgent(protocol: 'http:'): HttpAgent;
export function sharedEgressAgent(protocol: string): HttpAgent | HttpsAgent;
export function sharedEgressAgent(protocol: string): HttpAgent | HttpsAgent {
  const key = protocol === 'http:' ? 'http:' : 'https:';
  let agent = shared.get(key);
  if (agent === undefined) {
    // Node's global agent's settings.
    agent = egressAgent(key, { keepAlive: true, scheduling: 'lifo', timeout: 5_000 });
    shared.set(key, agent);
  }
  return agent;
}

/** The shared agent for a URL's scheme (a node-fetch/gaxios `agent` function). */
export function egressAgentFor(url: URL): HttpAgent | HttpsAgent {
  return sharedEgressAgent(url.protocol);
}

/**
 * `fetch` that honours the egress proxy: a request {@link proxyFor} sends directly is Node's `fetch`
 * unchanged; a proxied one is sent with node:http(s) over the shared tunnelling agent (no redirect is
 * followed), its answer a web `Response`.
 */
export const egressFetch: typeof fetch = async (input, init) => {
  const request = new Request(input, init);
  const url = new URL(request.url);
  if (proxyFor(url) === undefined) return fetch(input, init);
  const body = request.body ? Buffer.from(await request.arrayBuffer()) : undefined;
  const send = url.protocol === 'http:' ? httpRequestOf : httpsRequestOf;
  const { signal } = request;
  signal.throwIfAborted();
  return new Promise<Response>((resolve, reject) => {
    // As fetch: an abort rejects at once with the signal's reason, whatever the request is waiting
    // for (a tunnel still opening emits nothing until the proxy answers), and ends the request.
    const onAbort = () => {
      reject(signal.reason);
      req.destroy();
    };
    const req = send(
      url,
      {
        method: request.method,
        headers: Object.fromEntries(request.headers),
        agent: sharedEgressAgent(url.protocol),
      },
      (res) => {
        signal.removeEventListener('abort', onAbort);
        // The body's stream ends with an abort after the answer, as fetch's does.
        const onBodyAbort = () => res.destroy(signal.reason);
        signal.addEventListener('abort', onBodyAbort, { once: true });
        res.once('close', () => signal.removeEventListener('abort', onBodyAbort));
        const headers = new Headers();
        for (const [name, value] of Object.entries(res.headers)) {
          for (const one of Array.isArray(value) ? value : [value ?? '']) headers.append(name, one);
        }
        const status = res.statusCode ?? 0;
        const empty = status === 204 || status === 304 || request.method === 'HEAD';
        if (empty) res.resume();
        resolve(
          new Response(empty ? null : (Readable.toWeb(res) as ReadableStream), {
            status,
            statusText: res.statusMessage ?? '',
            headers,
          }),
        );
      },
    );
    signal.addEventListener('abort', onAbort, { once: true });
    req.on('error', (err) => {
      signal.removeEventListener('abort', onAbort);
      reject(err);
    });
    req.end(body);
  });
};
