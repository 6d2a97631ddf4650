/**
 * The one way the product serves HTTP and HTTPS: the bootstrap server, the operations port and
 * `discovery serve` are all started here, so each defends itself the same way against clients that
 * hold connections without using them (idle sockets, slowloris, floods from one address):
 *
 * - timeouts: a TLS handshake, the request's headers, the whole request and an idle connection
 *   each have a bound; a connection that never sends a byte is idle from its start, and TLS work
 *   starts only once the client has sent something;
 * - caps: at most `maxConnections` connections at once, and `maxConnectionsPerSource` from one
 *   address. A connection beyond a cap is reset as it is accepted, before any TLS or HTTP work, so
 *   a flood costs the server almost nothing and the connections already open keep being served;
 * - TLS 1.2 and 1.3 only, AEAD suites only on TLS 1.2, no renegotiation;
 * - a port that cannot be bound is a configuration error naming the port and the setting to change.
 */
import { constants as cryptoConstants } from 'node:crypto';
import { readFileSync } from 'node:fs';
import {
  createServer as createHttpServer,
  type ServerOptions as HttpServerOptions,
  type IncomingMessage,
  type Server,
  type ServerResponse,
  STATUS_CODES,
} from 'node:http';
import { createServer as createHttpsServer, Server as HttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { Counter, Gauge, type Registry } from 'prom-client';
import { ConfigError } from '../errors.ts';
import { sharedMetric } from '../kube/metrics.ts';
import { type Logger, silentLogger } from '../log.ts';
import { parseListenAddress, urlOf } from '../runtime/listen-address.ts';
import { sourceOf } from './source.ts';

/** How many connections a server holds, and for how long (times in ms). */
export interface ConnectionLimits {
  /** Connections open at once, every source together; beyond it a new one is reset as it is accepted. */
  maxConnections: number;
  /** Connections open at once from one address; beyond it a new one is reset as it is accepted. */
  maxConnectionsPerSource: number;
  /** A TLS client must complete its handshake within this of its first bytes (Node's default is 120 s). */
  handshakeTimeout: number;
  /** A request's headers must arrive within this, once its first byte has. */
  headersTimeout: number;
  /** The whole request, body included, must arrive within this. */
  requestTimeout: number;
  /**
   * An idle connection is closed after this: one kept alive after an answer, and one that has sent
   * nothing since it was opened (on TLS: since its handshake).
   */
  keepAliveTimeout: number;
  /**
   * Once an answer is complete, the client must have taken it within this (Node has no write
   * timeout: a client that stops reading would otherwise hold its connection for ever).
   */
  responseTimeout: number;
  /**
   * How often Node checks the headers and request timeouts. Its default, 30 s, let a client that
   * sends its headers slowly hold a connection for up to 40 s instead of 10.
   */
  connectionsCheckingInterval: number;
}

/** The defaults: a node's join needs one or two short connections; a scrape or a probe, one. */
export const defaultConnectionLimits: ConnectionLimits = {
  maxConnections: 2_048,
  maxConnectionsPerSource: 64,
  handshakeTimeout: 10_000,
  headersTimeout: 10_000,
  requestTimeout: 30_000,
  keepAliveTimeout: 5_000,
  responseTimeout: 10_000,
  connectionsCheckingInterval: 1_000,
};

/**
 * TLS 1.2 suites: ECDHE key exchange with AES-GCM or ChaCha20-Poly1305 only, for ECDSA and RSA
 * serving keys. TLS 1.3 has AEAD suites only; Node's are kept. No CBC suite (Lucky 13 and other
 * padding oracles), no static RSA or finite-field DHE key exchange.
 */
const tls12Ciphers = [
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
];
const tls13Ciphers = ['TLS_AES_256_GCM_SHA384', 'TLS_CHACHA20_POLY1305_SHA256', 'TLS_AES_128_GCM_SHA256'];

/** The TLS settings of every server of the product. */
export const tlsServerPolicy = {
  minVersion: 'TLSv1.2',
  ciphers: [...tls13Ciphers, ...tls12Ciphers].join(':'),
  honorCipherOrder: true,
  // A client may not renegotiate: a TLS 1.2 renegotiation costs the server a full handshake per
  // request of the client, and TLS 1.3 has none. Node would allow three per ten minutes.
  secureOptions: cryptoConstants.SSL_OP_NO_RENEGOTIATION,
} as const;

/** Options of {@link startHardenedServer}. */
/** A TLS private key and its certificate chain, PEM. */
export type TlsKeyPair = { key: string; cert: string };

export interface HardenedServerOptions {
  /** Names the server in metrics (label `server`) and logs, e.g. `bootstrap`. */
  name: string;
  /** Listen address, e.g. ":3988" or "127.0.0.1:0". */
  listen: string;
  /** Where an operator chooses the address (`server.Listen`, `--listen`), named when it cannot be bound. */
  listenSetting: string;
  /** Serves HTTPS with this key and certificate chain (PEM); plain HTTP without. */
  tls?: TlsKeyPair;
  limits?: Partial<ConnectionLimits>;
  /** The largest request head accepted, in bytes (default Node's 16 KiB). */
  maxHeaderSize?: number;
  handler: (req: IncomingMessage, res: ServerResponse) => void;
  /** Counts open and refused connections here when given. */
  registry?: Registry;
  logger?: Logger;
  /**
   * Decides the connection caps instead of this server alone: serving workers share one gate in
   * their primary process (src/bootstrap/workers.ts), so the caps hold across them.
   */
  gate?: ConnectionGate;
  /** Binds with SO_REUSEPORT, so that serving workers share the port and the kernel spreads connections. */
  reusePort?: boolean;
  /**
   * Sources (this machine's) kept `maxConnectionsPerSource` places beyond the total cap, when the
   * server decides the caps itself ({@link SourceConnectionCounter}).
   */
  reserved?: (source: string) => boolean;
}

/** Whether a new connection from a source may be held: yes, or which cap it is over. */
export type Admission = 'admitted' | 'total' | 'per-source';

/**
 * Counts held connections against the caps. Every admitted connection must be released once, when
 * it closes. A gate may answer later (across processes); the connection waits, unread, until it does.
 */
export interface ConnectionGate {
  admit(source: string): Admission | Promise<Admission>;
  release(source: string): void;
}

/**
 * The caps' bookkeeping: connections held in all and per source. `reserved` names sources (this
 * machine's) for which `maxConnectionsPerSource` more connections are kept beyond the total cap.
 */
export class SourceConnectionCounter implements ConnectionGate {
  readonly #limits: Pick<ConnectionLimits, 'maxConnections' | 'maxConnectionsPerSource'>;
  readonly #reserved: ((source: string) => boolean) | undefined;
  readonly #bySource = new Map<string, number>();
  #total = 0;

  constructor(
    limits: Pick<ConnectionLimits, 'maxConnections' | 'maxConnectionsPerSource'>,
    reserved?: (source: string) => boolean,
  ) {
    this.#limits = limits;
    this.#reserved = reserved;
  }

  admit(source: string): Admission {
    const { maxConnections, maxConnectionsPerSource } = this.#limits;
    if (
      this.#total >= maxConnections &&
      !(this.#total < maxConnections + maxConnectionsPerSource && this.#reserved?.(source))
    )
      return 'total';
    const held = this.#bySource.get(source) ?? 0;
    if (held >= maxConnectionsPerSource) return 'per-source';
    this.#bySource.set(source, held + 1);
    this.#total += 1;
    return 'admitted';
  }

  release(source: string): void {
    const held = this.#bySource.get(source);
    if (held === undefined) return;
    if (held > 1) this.#bySource.set(source, held - 1);
    else this.#bySource.delete(source);
    this.#total -= 1;
  }

  /** Connections held now. */
  get total(): number {
    return this.#total;
  }
}

/** A listening server. */
export interface HardenedServer {
  /** `http(s)://host:port` of the bound address. */
  url: string;
  address: AddressInfo;
  /** Connections open now, from their accept to their close. */
  openConnections(): number;
  /**
   * Serves new connections with this key and certificate chain (PEM), under the same TLS policy; the
   * connections open keep theirs. A server of plain HTTP has no certificate: it throws.
   */
  setSecureContext(tls: TlsKeyPair): void;
  /**
   * Stops accepting. Idle connections close at once, busy ones as their answers go out, and
   * whatever is left after `graceMs` (default 0) is cut.
   */
  close(graceMs?: number): Promise<void>;
}

/** A refusal made before any handler runs, with the JSON error object every answer of the product carries. */
interface Refusal {
  status: number;
  reason: string;
  message: string;
}

/** What Node's parser refused: a request too slow, headers too large, or bytes that are not HTTP. */
function clientErrorRefusal(err: NodeJS.ErrnoException): Refusal {
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT')
    return { status: 408, reason: 'request-timeout', message: 'the request did not arrive in time' };
  if (err.code === 'HPE_HEADER_OVERFLOW')
    return { status: 431, reason: 'headers-too-large', message: 'the request headers are too large' };
  return { status: 400, reason: 'malformed-request', message: 'the request is not well-formed HTTP/1.1' };
}

/** The refusal's JSON body; the connection closes after it. */
function refusalBody({ reason, message }: Refusal): string {
  return JSON.stringify({ error: { reason, message } });
}

/** The refusal as raw bytes, for a socket that has no request (and so no response object) to answer. */
function rawRefusal(refusal: Refusal): string {
  const body = refusalBody(refusal);
  return (
    `HTTP/1.1 ${refusal.status} ${STATUS_CODES[refusal.status]}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
  );
}

/** Answers a request with a refusal and closes the connection after it. */
function refuseRequest(res: ServerResponse, refusal: Refusal): void {
  const body = refusalBody(refusal);
  res.writeHead(refusal.status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    connection: 'close',
  });
  res.end(body);
}

/** Why a port cannot be bound, in words an operator acts on. */
function listenFailure(err: NodeJS.ErrnoException, host: string | undefined, port: number): string {
  switch (err.code) {
    case 'EADDRINUSE':
      return `port ${port} is already in use (EADDRINUSE)`;
    case 'EACCES':
      return `port ${port} needs privileges this process does not have (EACCES)`;
    case 'EADDRNOTAVAIL':
      return `${host} is not an address of this machine (EADDRNOTAVAIL)`;
    default:
      return err.message;
  }
}

/** The process's limit on open files (`ulimit -n`), when Linux says; undefined elsewhere. */
export function openFileLimit(limits = '/proc/self/limits'): number | undefined {
  try {
    const match = /^Max open files\s+(\d+)/m.exec(readFileSync(limits, 'utf8'));
    return match ? Number(match[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** Files the process needs besides one server's connections: the API server, clouds, logs, the other servers. */
const filesBesideConnections = 256;

function connectionMetrics(registry: Registry) {
  return {
    open: sharedMetric(
      registry,
      'kops_controller_connections_open',
      () =>
        new Gauge({
          name: 'kops_controller_connections_open',
          help: 'Connections a server holds now, from their accept to their close.',
          labelNames: ['server'],
          registers: [registry],
        }),
    ),
    refused: sharedMetric(
      registry,
      'kops_controller_connections_refused_total',
      () =>
        new Counter({
          name: 'kops_controller_connections_refused_total',
          help: 'Connections reset as they were accepted: reason "total" (maxConnections) or "per-source".',
          labelNames: ['server', 'reason'],
          registers: [registry],
        }),
    ),
  };
}

/** The HTTP or HTTPS server with the caps and timeouts Node enforces itself. */
function createServer(options: HardenedServerOptions, limits: ConnectionLimits): Server {
  const httpOptions: HttpServerOptions = {
    headersTimeout: limits.headersTimeout,
    requestTimeout: limits.requestTimeout,
    keepAliveTimeout: limits.keepAliveTimeout,
    connectionsCheckingInterval: limits.connectionsCheckingInterval,
    // Checked in `handler` below, so that the refusal carries the JSON error object (Node's has no body).
    requireHostHeader: false,
  };
  if (options.maxHeaderSize) httpOptions.maxHeaderSize = options.maxHeaderSize;
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    if (req.httpVersion === '1.1' && req.headers.host === undefined)
      return refuseRequest(res, {
        status: 400,
        reason: 'missing-host',
        message: 'an HTTP/1.1 request needs a Host header',
      });
    options.handler(req, res);
  };
  const server: Server = options.tls
    ? createHttpsServer(
        {
          ...httpOptions,
          ...tlsServerPolicy,
          ...options.tls,
          handshakeTimeout: limits.handshakeTimeout,
          // As Node's plain HTTP server already has it: a client's end of sending is not the end of
          // the connection (see httpAllowHalfOpen below).
          allowHalfOpen: true,
        },
        handler,
      )
    : createHttpServer(httpOptions, handler);
  // A client that half-closes its connection once its request is sent (shutdown(SHUT_WR), as `nc -N`
  // and some HTTP/1.0 clients do) still reads: its answer goes out, then the connection closes. Node
  // would close at once, dropping the answer of a request it goes on deciding — a certificate issued
  // and never delivered. A half-close while idle, or in the middle of a request, still closes at once.
  // (`httpAllowHalfOpen` is Node's own switch for this, set by its constructors, untyped.)
  (server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  // Node resets what is over this cap itself, before it makes a socket of it; the gate decides below
  // it, where a gate may keep one source's worth of places for this machine (SourceConnectionCounter).
  server.maxConnections = limits.maxConnections + limits.maxConnectionsPerSource;
  // `100 Continue` goes out when the handler starts reading the body, not when the headers arrive (as
  // Node would send it): a request refused on its headers alone (405, 413, 415, 429) is refused before
  // the client sends a body the server would only drain. Node then closes the connection after the
  // answer, since the client may still send the body it held back.
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    const onListener = (event: string | symbol) => {
      if (event !== 'data' && event !== 'readable') return;
      req.off('newListener', onListener);
      if (!res.headersSent) res.writeContinue();
    };
    req.on('newListener', onListener);
    server.emit('request', req, res);
  });
  server.on('checkExpectation', (_req: IncomingMessage, res: ServerResponse) =>
    refuseRequest(res, {
      status: 417,
      reason: 'unsupported-expectation',
      message: 'the only expectation this server meets is 100-continue',
    }),
  );
  return server;
}

/** What the server does when it refuses a connection: counted, and logged at most once a minute. */
function refusals(options: HardenedServerOptions, limits: ConnectionLimits, logger: Logger) {
  const metrics = options.registry ? connectionMetrics(options.registry) : undefined;
  const labels = { server: options.name };
  metrics?.open.set(labels, 0);
  let lastWarningMs = Number.NEGATIVE_INFINITY;
  const refuse = (reason: 'total' | 'per-source', source: string) => {
    metrics?.refused.inc({ ...labels, reason });
    // Once a minute at most: a flood must not become a flood of log lines. Monotonic: a wall clock
    // stepped back would silence the warning for as long as it had been ahead.
    const now = performance.now();
    if (now - lastWarningMs < 60_000) return;
    lastWarningMs = now;
    const cap =
      reason === 'total'
        ? `maxConnections (${limits.maxConnections})`
        : `maxConnectionsPerSource (${limits.maxConnectionsPerSource})`;
    logger.warn({ server: options.name, source, reason }, `refusing connections over ${cap}`);
  };
  return {
    refuse,
    opened: () => metrics?.open.inc(labels),
    closed: () => metrics?.open.dec(labels),
  };
}

/**
 * TLS starts with the client's first bytes, not at the accept. A TLS socket costs about 20 KiB of
 * native memory before its handshake, and one closed before its handshake leaves about as much
 * again that the process never gets back (bench/idle-connections.ts); a plain socket waiting for
 * its first bytes costs a few KiB, all returned. Node's TLS layer reads the bytes already received.
 */
function startTlsOnFirstBytes(socket: Socket, idleTimeoutMs: number, start: () => void): void {
  const idle = () => socket.destroy();
  // Until the TLS layer has the socket, a reset by the client is this code's to absorb.
  const reset = () => undefined;
  socket.setTimeout(idleTimeoutMs, idle);
  socket.on('error', reset);
  socket.once('readable', () => {
    socket.setTimeout(0);
    socket.off('timeout', idle);
    socket.off('error', reset);
    // Readable without data: the client closed without sending a byte.
    if (socket.readableLength === 0) socket.destroy();
    else start();
  });
}

/**
 * Puts the caps in front of Node's own connection handling (the TLS handshake or the HTTP parser): a
 * socket over one is reset without either. Returns the sockets held.
 */
function capPerSource(
  server: Server,
  options: HardenedServerOptions,
  limits: ConnectionLimits,
  refused: ReturnType<typeof refusals>,
): Set<Socket> {
  // Node bounds a request from its first byte, and a kept-alive connection from its last answer, but
  // not a connection that never sends anything. Node's HTTP layer destroys a socket whose timer fires.
  const awaitFirstRequest = (socket: Socket) => socket.setTimeout(limits.keepAliveTimeout);
  const sockets = new Set<Socket>();
  const gate = options.gate ?? new SourceConnectionCounter(limits, options.reserved);
  const handOver = server.listeners('connection') as ((socket: Socket) => void)[];
  server.removeAllListeners('connection');
  const admitted = (socket: Socket, source: string, admission: Admission) => {
    if (admission !== 'admitted') {
      refused.refuse(admission, source);
      return socket.resetAndDestroy();
    }
    if (socket.destroyed) return gate.release(source); // gone while the gate decided
    sockets.add(socket);
    refused.opened();
    socket.once('close', () => {
      sockets.delete(socket);
      gate.release(source);
      refused.closed();
    });
    const start = () => {
      for (const listener of handOver) listener.call(server, socket);
    };
    if (options.tls) return startTlsOnFirstBytes(socket, limits.keepAliveTimeout, start);
    start();
    awaitFirstRequest(socket);
  };
  server.on('connection', (socket: Socket) => {
    // An IPv6 host counts as its /64 (src/net/source.ts).
    const source = sourceOf(socket.remoteAddress);
    if (source === '') return socket.destroy(); // already gone
    const admission = gate.admit(source);
    if (typeof admission === 'string') return admitted(socket, source, admission);
    // Until the gate answers, a reset by the client is this code's to absorb.
    const reset = () => undefined;
    socket.on('error', reset);
    admission.then(
      (answer) => {
        socket.off('error', reset);
        admitted(socket, source, answer);
      },
      () => socket.destroy(),
    );
  });
  server.on('secureConnection', awaitFirstRequest);
  return sockets;
}

/** How the server treats requests in progress and clients that misbehave. */
function boundRequests(server: Server, limits: ConnectionLimits): void {
  /** Each connection's latest request and its answer. */
  const latest = new WeakMap<Socket, { req: IncomingMessage; res: ServerResponse }>();
  /** Connections whose malformed bytes are refused once the answers of the requests before them are out. */
  const awaitingAnswer = new WeakSet<Socket>();
  /** Each connection's answers not yet closed, in the order of their requests (pipelined ones too). */
  const answers = new WeakMap<Socket, Set<ServerResponse>>();
  // Before the handler, which may end its answer at once (and so emit `prefinish`) in its own call.
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    latest.set(req.socket, { req, res });
    const open = answers.get(req.socket) ?? new Set<ServerResponse>();
    answers.set(req.socket, open);
    open.add(res);
    res.once('close', () => open.delete(res));
    // A request in progress is bounded by the headers and request timeouts, and may then wait for its
    // answer as long as its handler takes (a long-poll), so the idle timer stops with its headers.
    req.socket.setTimeout(0);
    // Once the handler has ended its answer, the client must take it. A client that stops reading
    // stalls the server's writes, and then neither the idle timer (no read), nor Node's keep-alive
    // timer (armed when an answer has gone out) ever starts: a few such clients would hold the caps.
    res.once('prefinish', () => {
      const deadline = setTimeout(() => res.socket?.destroy(), limits.responseTimeout);
      deadline.unref();
      const clear = () => clearTimeout(deadline);
      res.once('finish', clear);
      res.once('close', clear);
    });
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    // Waiting for an answer to go out before its refusal (below): nothing more to decide.
    if (awaitingAnswer.has(socket)) return;
    // A request answered before its body had arrived (405, 413, 429…) whose body then stalls: the
    // error is that request's, already answered. A status line now would be a second answer to one
    // request, which a proxy reusing the connection would hand to another client.
    const current = latest.get(socket);
    if (current?.res.headersSent && !current.req.complete) return socket.destroy();
    // Once refused, the parser reports an error again for anything the client still sends (or its
    // close): the connection is then destroyed, so a client that keeps sending cannot hold it.
    const refuse = () => {
      if (socket.writable) socket.end(rawRefusal(clientErrorRefusal(err)));
      else socket.destroy();
    };
    // The bytes after whole requests whose answers are still to come (a handler deciding, or answers
    // pipelined behind one) are what is malformed, not those requests: a status line now would arrive
    // first and be taken for an answer, while the requests go on (a certificate issued, its answer
    // lost). Nothing more is read; their answers go out, then the status line and the close.
    const owed = [...(answers.get(socket) ?? [])].filter(
      (res) => res.req.complete && !res.writableFinished && !res.destroyed,
    );
    if (owed.length > 0) {
      awaitingAnswer.add(socket);
      socket.pause();
      void Promise.all(owed.map((res) => new Promise((done) => res.once('close', done)))).then(() => {
        awaitingAnswer.delete(socket);
        refuse();
        // Reading again, so that the client's close (or anything more it sends) is seen.
        socket.resume();
      });
      return;
    }
    refuse();
  });
  // A failed or timed-out handshake is the client's problem, not the server's: close, do not log.
  // Node reports a handshake timeout here without always closing the socket (silent connections
  // outlived it, before this listener closed them), so the listener does.
  server.on('tlsClientError', (_err: Error, socket: Socket) => socket.destroy());
}

/** Listens; a failure to is a ConfigError naming the address and the setting to change. */
async function listen(server: Server, options: HardenedServerOptions, logger: Logger): Promise<void> {
  const { host, port } = parseListenAddress(options.listen);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        // The message says all the cause would (describeError would repeat it).
        new ConfigError(
          `cannot listen on ${options.listen}: ${listenFailure(err, host, port)}; ` +
            `choose another address in ${options.listenSetting}`,
        ),
      ),
    );
    server.listen({ port, host, reusePort: options.reusePort }, () => {
      server.removeAllListeners('error');
      resolve();
    });
  });
  // After the start, an error is an accept that failed (out of file descriptors): the server goes on.
  server.on('error', (err: NodeJS.ErrnoException) =>
    logger.error({ server: options.name, err: err.code ?? err.message }, 'cannot accept a connection'),
  );
}

/** Warns when the connection cap leaves the process too few files for everything else. */
function warnIfOverFileLimit(options: HardenedServerOptions, limits: ConnectionLimits, logger: Logger): void {
  const fileLimit = openFileLimit();
  if (fileLimit !== undefined && limits.maxConnections + filesBesideConnections > fileLimit) {
    logger.warn(
      { server: options.name, maxConnections: limits.maxConnections, openFileLimit: fileLimit },
      'the connection cap is not below the open-file limit (ulimit -n): raise the limit or lower the cap',
    );
  }
}

/** Closes the server: new connections at once, idle ones as they become idle, the rest after `graceMs`. */
function closeGracefully(server: Server, sockets: Set<Socket>, graceMs: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const cutAll = () => {
      server.closeAllConnections();
      // Connections still in their TLS handshake are not HTTP connections yet.
      for (const socket of sockets) socket.destroy();
    };
    // Kept-alive connections become idle as their last answers go out; close each as it does.
    const sweep = setInterval(() => server.closeIdleConnections(), 50);
    const grace = setTimeout(cutAll, graceMs);
    server.close(() => {
      clearTimeout(grace);
      clearInterval(sweep);
      resolve();
    });
    server.closeIdleConnections();
  });
}

/** Starts the server; resolves once it listens, rejects with a ConfigError when it cannot. */
export async function startHardenedServer(options: HardenedServerOptions): Promise<HardenedServer> {
  const limits: ConnectionLimits = { ...defaultConnectionLimits, ...options.limits };
  const logger = options.logger ?? silentLogger;
  const server = createServer(options, limits);
  const refused = refusals(options, limits, logger);
  server.on('drop', (data?: { remoteAddress?: string }) =>
    refused.refuse('total', sourceOf(data?.remoteAddress)),
  );
  const sockets = capPerSource(server, options, limits, refused);
  boundRequests(server, limits);
  await listen(server, options, logger);
  warnIfOverFileLimit(options, limits, logger);
  const address = server.address() as AddressInfo;
  return {
    url: urlOf(address, options.tls ? 'https' : 'http'),
    address,
    openConnections: () => sockets.size,
    setSecureContext(tls) {
      if (!(server instanceof HttpsServer))
        throw new TypeError(`the ${options.name} server serves plain HTTP`);
      // Node rebuilds the whole context from what it is given: without the policy, its defaults.
      server.setSecureContext({ ...tlsServerPolicy, ...tls });
    },
    close: (graceMs = 0) => closeGracefully(server, sockets, graceMs),
  };
}
