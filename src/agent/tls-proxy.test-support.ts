/**
 * Test support, not product code: a TLS proxy on loopback standing in a joining node's path, to play
 * the man in the middle (its own CA) or a flaky load balancer (the cluster's CA). Each TCP connection
 * is either relayed byte for byte to the genuine server — the node's TLS session is then with the
 * genuine server, as when an attacker lets a verified connection through — or terminated here with
 * the proxy's own certificate; a terminated request is answered by `intercept` when it says so, else
 * forwarded to the genuine server, with the cluster-info kubeconfig passed through `rewrite`.
 */
import { createServer as createHttpsServer, type Server as HttpsServer, request } from 'node:https';
import { type AddressInfo, connect, createServer as createTcpServer, type Socket } from 'node:net';
import {
  type ClusterInfo,
  clusterInfoPath,
  kubeconfigKey,
  parseClusterInfoKubeconfig,
  renderClusterInfoKubeconfig,
} from '../protocol/cluster-info.ts';

/** An answer the proxy makes up instead of forwarding. */
export interface ProxyReply {
  status: number;
  body: string;
  headers?: Record<string, string>;
}

/** One request the proxy terminated. */
export interface ProxiedRequest {
  method: string;
  path: string;
  /** Which terminated request this is, from 0, counting every path. */
  index: number;
}

/** What the proxy does. */
export interface TlsProxyOptions {
  /** The genuine server, `https://127.0.0.1:<port>`. */
  upstream: string;
  /** The proxy's own serving certificate and key (PEM), for the connections it terminates. */
  certificate: { cert: string; key: string };
  /** Per TCP connection (numbered from 0): relay it untouched, or terminate it here. Default: terminate. */
  connection?: (index: number) => 'relay' | 'terminate';
  /** Rewrites the cluster-info the genuine server sent on a terminated connection. */
  rewrite?: (info: ClusterInfo) => ClusterInfo;
  /** Answers a terminated request itself (return undefined to forward it). */
  intercept?: (request: ProxiedRequest) => ProxyReply | undefined;
  /**
   * Routes only paths under this prefix (`/kops`), forwarded without it, as a load balancer that
   * serves the controller under a path; any other path is answered 404.
   */
  pathPrefix?: string;
}

/** A running proxy. */
export interface TlsProxy {
  url: string;
  /** How each TCP connection was handled, in order. */
  connections: ('relay' | 'terminate')[];
  /** Every request on a terminated connection, in order. */
  requests: ProxiedRequest[];
  close(): Promise<void>;
}

function rewriteClusterInfo(body: Buffer, rewrite: (info: ClusterInfo) => ClusterInfo): Buffer {
  const document = JSON.parse(body.toString('utf8'));
  const info = rewrite(parseClusterInfoKubeconfig(document.data[kubeconfigKey]));
  // The genuine signatures stay: they no longer match, which is what a token holder would notice.
  document.data[kubeconfigKey] = renderClusterInfoKubeconfig(info);
  return Buffer.from(JSON.stringify(document));
}

/** Starts the proxy on 127.0.0.1. */
export async function startTlsProxy(options: TlsProxyOptions): Promise<TlsProxy> {
  const upstream = new URL(options.upstream);
  const connections: TlsProxy['connections'] = [];
  const requests: ProxiedRequest[] = [];
  const relayed = new Set<Socket>();

  const forward = (method: string, path: string, headers: Record<string, unknown>, body: Buffer) =>
    new Promise<{ status: number; headers: Record<string, string>; body: Buffer }>((resolve, reject) => {
      const { host: _host, connection: _connection, ...rest } = headers;
      const req = request(
        new URL(path, upstream),
        { method, headers: rest as Record<string, string>, rejectUnauthorized: false, agent: false },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const kept: Record<string, string> = {};
            for (const name of ['content-type', 'retry-after']) {
              const value = res.headers[name];
              if (typeof value === 'string') kept[name] = value;
            }
            resolve({ status: res.statusCode ?? 502, headers: kept, body: Buffer.concat(chunks) });
          });
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body);
    });

  const terminator: HttpsServer = createHttpsServer(options.certificate, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const proxied = { method: req.method ?? 'GET', path: req.url ?? '/', index: requests.length };
      requests.push(proxied);
      const made = options.intercept?.(proxied);
      if (made) {
        res.writeHead(made.status, made.headers ?? {});
        res.end(made.body);
        return;
      }
      const prefix = options.pathPrefix ?? '';
      if (!proxied.path.startsWith(`${prefix}/`)) {
        res.writeHead(404);
        res.end();
        return;
      }
      const path = proxied.path.slice(prefix.length);
      forward(proxied.method, path, req.headers, Buffer.concat(chunks)).then(
        (answer) => {
          const isDocument = path === clusterInfoPath && answer.status === 200;
          const body =
            isDocument && options.rewrite ? rewriteClusterInfo(answer.body, options.rewrite) : answer.body;
          res.writeHead(answer.status, answer.headers);
          res.end(body);
        },
        () => {
          res.writeHead(502);
          res.end();
        },
      );
    });
  });

  const listener = createTcpServer((socket) => {
    const mode = options.connection?.(connections.length) ?? 'terminate';
    connections.push(mode);
    if (mode === 'terminate') {
      terminator.emit('connection', socket);
      return;
    }
    const genuine = connect(Number(upstream.port), upstream.hostname);
    relayed.add(socket).add(genuine);
    const end = () => {
      socket.destroy();
      genuine.destroy();
      relayed.delete(socket);
      relayed.delete(genuine);
    };
    socket.on('error', end).on('close', end);
    genuine.on('error', end).on('close', end);
    socket.pipe(genuine).pipe(socket);
  });
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(listener.address() as AddressInfo).port}`,
    connections,
    requests,
    async close() {
      for (const socket of relayed) socket.destroy();
      terminator.closeAllConnections();
      await new Promise<void>((resolve) => listener.close(() => resolve()));
    },
  };
}

/** A TLS server that answers every request with `{}`: an attacker's API server, or one nobody trusts. */
export async function startTlsEndpoint(certificate: {
  cert: string;
  key: string;
}): Promise<{ url: string; connections: () => number; close(): Promise<void> }> {
  let connections = 0;
  const server = createHttpsServer(certificate, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{}');
  });
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    connections: () => connections,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
