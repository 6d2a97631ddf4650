/**
 * The impersonation guard kops added (PRs #15351/#15456): no credentials for a node name whose Node
 * is already registered and Ready, so a pod or escaped workload cannot obtain a running node's
 * identity. The Node is read from the API server directly, never from a cache that may lag.
 */
import { Agent, type RequestOptions, request } from 'node:https';
import type { KubeConfig, V1Node } from '@kubernetes/client-node';
import {
  ConflictError,
  ForbiddenError,
  RateLimitedError,
  TimeoutError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';

/** Reads what the guard needs of a Node. */
export type NodeReader = (name: string) => Promise<Pick<V1Node, 'status'> | undefined>;

/** The error for a Node read the API server refused, by status. */
function readFailure(status: number, name: string, body: string): Error {
  let message = body.slice(0, 300);
  try {
    message = (JSON.parse(body) as { message?: string }).message ?? message;
  } catch {
    // Not a Status object: keep the text.
  }
  const text = `read node ${name}: HTTP ${status}: ${message}`;
  if (status === 401) return new UnauthenticatedError(text);
  if (status === 403) return new ForbiddenError(text);
  if (status === 429) return new RateLimitedError(text);
  return new UnavailableError(text);
}

/**
 * A {@link NodeReader} over plain HTTPS with one keep-alive agent. The guard runs on every bootstrap
 * request, and through client-node each read costs more CPU than the rest of an issuance (a new
 * dispatcher per call, and a full exception for every 404 of a node that is not registered yet).
 * Credentials are applied per request as client-node applies them, so rotated tokens are picked up;
 * the agent's client certificate is fixed for the life of the reader, as with pooled connections.
 */
export function httpsNodeReader(kubeConfig: KubeConfig, options: { timeoutMs?: number } = {}): NodeReader {
  const server = (kubeConfig.getCurrentCluster()?.server ?? '').replace(/\/+$/, '');
  const timeoutMs = options.timeoutMs ?? 10_000;
  let agent: Agent | undefined;
  return async (name) => {
    const opts: RequestOptions = { method: 'GET', headers: { accept: 'application/json' } };
    await kubeConfig.applyToHTTPSOptions(opts);
    agent ??= new Agent({
      keepAlive: true,
      ...(opts.ca ? { ca: opts.ca } : {}),
      ...(opts.cert ? { cert: opts.cert } : {}),
      ...(opts.key ? { key: opts.key } : {}),
      ...(opts.rejectUnauthorized === undefined ? {} : { rejectUnauthorized: opts.rejectUnauthorized }),
      ...(opts.servername ? { servername: opts.servername } : {}),
    });
    opts.agent = agent;
    const url = `${server}/api/v1/nodes/${encodeURIComponent(name)}`;
    const get = (): Promise<{ status: number; body: string; staleSocket?: boolean }> =>
      new Promise((resolve, reject) => {
        const req = request(url, opts, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
          res.on('error', reject);
        });
        req.setTimeout(timeoutMs, () =>
          req.destroy(new TimeoutError(`read node ${name}: no answer in ${timeoutMs} ms`)),
        );
        req.on('error', (err: NodeJS.ErrnoException) => {
          // A pooled connection the server closed while idle fails on first use; the GET is safe to resend.
          if (req.reusedSocket && err.code === 'ECONNRESET')
            resolve({ status: 0, body: '', staleSocket: true });
          else
            reject(
              err instanceof TimeoutError
                ? err
                : new UnavailableError(`read node ${name}: ${err.message}`, { cause: err }),
            );
        });
        req.end();
      });
    let answer = await get();
    for (let retries = 0; answer.staleSocket && retries < 3; retries++) answer = await get();
    const { status, body } = answer;
    if (answer.staleSocket) throw new UnavailableError(`read node ${name}: the connection was reset`);
    if (status === 404) return undefined;
    if (status !== 200) throw readFailure(status, name, body);
    return JSON.parse(body) as Pick<V1Node, 'status'>;
  };
}

/** Whether a Node's Ready condition is True. */
export function isNodeReady(node: Pick<V1Node, 'status'>): boolean {
  return (node.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/** Throws a ConflictError (reason `node-already-registered`) when the Node exists and is Ready. */
export async function assertNodeNotRegistered(readNode: NodeReader, name: string): Promise<void> {
  const node = await readNode(name);
  if (node && isNodeReady(node)) {
    throw new ConflictError(
      `node ${name} is already registered and Ready; a running node renews its certificates through the CSR API, and a replaced machine gets a new name`,
      { details: { reason: 'node-already-registered' } },
    );
  }
}
