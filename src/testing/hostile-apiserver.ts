/**
 * A programmable API server on loopback for the tests that treat the API server's answers as
 * untrusted input: every request goes to the test's handler, which answers whatever it likes (wrong
 * JSON types, looping continue tokens, odd watch events, odd statuses and headers), over real HTTP.
 * Plain HTTP, as `kubectl proxy` serves it (client-node asks for `insecure-skip-tls-verify` with it).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { KubeConfig } from '@kubernetes/client-node';

/** One request as the handler sees it. */
export interface HostileRequest {
  method: string;
  /** The path without the query. */
  path: string;
  query: URLSearchParams;
  /** `?watch=true`. */
  watch: boolean;
  body: string;
  headers: IncomingMessage['headers'];
}

/** Answers one request; it may write a stream and leave it open. */
export type HostileHandler = (request: HostileRequest, res: ServerResponse) => unknown;

export interface HostileApiServer {
  url: string;
  kubeConfig: KubeConfig;
  /** Every request received, in order. */
  requests: HostileRequest[];
  /** Responses still open (watch streams). */
  open(): number;
  close(): Promise<void>;
}

export async function hostileApiServer(handler: HostileHandler): Promise<HostileApiServer> {
  const requests: HostileRequest[] = [];
  const open = new Set<ServerResponse>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const request: HostileRequest = {
        method: req.method ?? 'GET',
        path: url.pathname,
        query: url.searchParams,
        watch: url.searchParams.get('watch') === 'true',
        body: Buffer.concat(chunks).toString('utf8'),
        headers: req.headers,
      };
      requests.push(request);
      open.add(res);
      res.on('close', () => open.delete(res));
      res.on('error', () => undefined);
      Promise.resolve(handler(request, res)).catch((err: unknown) => {
        if (!res.headersSent) res.writeHead(500);
        res.end(String(err));
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [{ name: 'hostile', server: url, skipTLSVerify: true }],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'hostile', cluster: 'hostile', user: 'u' }],
    currentContext: 'hostile',
  });
  return {
    url,
    kubeConfig,
    requests,
    open: () => open.size,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Answers `body` as JSON (a string is sent as it is). */
export function answer(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
}

/** Starts a watch stream (200, JSON), leaving it open. */
export function startStream(res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
  res.flushHeaders();
}

/** One watch line. */
export function watchLine(type: unknown, object: unknown): string {
  return `${JSON.stringify({ type, object })}\n`;
}

/** Polls (in real time) until `condition` holds; fails after `ms` instead of hanging. */
export async function eventually(condition: () => boolean, what: string, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}
