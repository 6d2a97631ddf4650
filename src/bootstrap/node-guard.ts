/**
 * The impersonation guard kops added (PRs #15351/#15456): no credentials for a node name whose Node
 * is already registered and Ready, so a pod or escaped workload cannot obtain a running node's
 * identity. kops reads the Node from the API server on every request, and at 5,000 nodes those reads
 * hit its client-side rate limits. Here a watch of Nodes answers the common case, "no such Node",
 * but only while that watch is provably current; every other answer comes from a direct read
 * (docs/security.md, "The impersonation guard").
 */
import type { OutgoingHttpHeaders } from 'node:http';
import { Agent, type RequestOptions } from 'node:https';
import type { KubeConfig, V1Node } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import {
  ConflictError,
  ForbiddenError,
  RateLimitedError,
  TimeoutError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { Informer, kubeList, kubeWatch } from '../kube/informer.ts';
import type { Logger } from '../log.ts';
import { type HttpsAnswer, httpsRequest, StaleConnectionError } from '../net/https-client.ts';
import { dependencyFault } from './dependency.ts';

/** Reads what the guard needs of a Node. */
export type NodeReader = (name: string) => Promise<Pick<V1Node, 'status'> | undefined>;

/** A Node is a few kilobytes; its status lists at most 50 images. Anything larger is not one. */
const maxNodeBytes = 4 * 1024 * 1024;

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
    const pool = agent;
    const read = (): Promise<HttpsAnswer> =>
      httpsRequest({
        url: new URL(`${server}/api/v1/nodes/${encodeURIComponent(name)}`),
        headers: opts.headers as OutgoingHttpHeaders,
        auth: opts.auth ?? undefined,
        agent: pool,
        timeoutMs,
        maxBodyBytes: maxNodeBytes,
      });
    let answer: HttpsAnswer | undefined;
    for (let retries = 0; !answer; retries++) {
      try {
        answer = await read();
      } catch (err) {
        // A pooled connection the server closed while idle fails on first use; the GET is safe to resend.
        if (err instanceof StaleConnectionError && retries < 3) continue;
        const text = `read node ${name}: ${(err as Error).message}`;
        throw err instanceof TimeoutError
          ? new TimeoutError(text)
          : new UnavailableError(text, { cause: err });
      }
    }
    const { status } = answer;
    const body = answer.body.toString('utf8');
    if (status === 404) return undefined;
    if (status !== 200) throw readFailure(status, name, body);
    return JSON.parse(body) as Pick<V1Node, 'status'>;
  };
}

/**
 * How long a watch that has gone quiet is still taken to be current: the API server sends a bookmark
 * on every watch about once a minute, so a stream silent for longer than this may be stalled.
 */
export const maxWatchSilenceMs = 90_000;

/** What {@link watchedNodeReader} needs of a Node informer (whose records only mark presence). */
export type NodePresence = Pick<Informer<V1Node, true>, 'hasSynced' | 'get' | 'watchSilenceMs'>;

/** Where an answer of the guard came from, for the metrics. */
export type GuardReadSource = 'watch' | 'api';

/**
 * A {@link NodeReader} that answers "not registered" from `nodes` when the watch behind it is
 * current: synced, with an open stream that delivered an event or bookmark within `maxSilenceMs`.
 * A Node can only become Ready after its creation was written, and a current watch has delivered
 * that creation, so the cache cannot miss a Ready Node by more than the watch's delivery delay.
 * Otherwise (not synced, reconnecting, silent too long), and whenever the cache knows the Node,
 * `direct` reads it: the 409 itself always rests on the API server's answer.
 */
export function watchedNodeReader(
  nodes: NodePresence,
  direct: NodeReader,
  options: { maxSilenceMs?: number; onRead?: (source: GuardReadSource) => void } = {},
): NodeReader {
  return async (name) => {
    if (watchIsCurrent(nodes, options.maxSilenceMs) && nodes.get(name) === undefined) {
      options.onRead?.('watch');
      return undefined;
    }
    options.onRead?.('api');
    return direct(name);
  };
}

/** Whether a Node watch is current enough to answer "not registered" (see {@link watchedNodeReader}). */
export function watchIsCurrent(nodes: NodePresence, maxSilenceMs = maxWatchSilenceMs): boolean {
  const silence = nodes.watchSilenceMs();
  return nodes.hasSynced() && silence !== undefined && silence <= maxSilenceMs;
}

/** A watch of every Node that keeps only names: what {@link watchedNodeReader} reads. */
export function nodePresenceInformer(
  kubeConfig: KubeConfig,
  options: { registry?: Registry; logger?: Logger } = {},
): Informer<V1Node, true> {
  return new Informer<V1Node, true>({
    // Its own resource label: the NodeController's informer of the same process is named "nodes".
    name: 'nodes-guard',
    path: '/api/v1/nodes',
    list: kubeList<V1Node>(kubeConfig, '/api/v1/nodes'),
    watch: kubeWatch(kubeConfig),
    transform: () => true,
    ...options,
  });
}

/** Whether a Node's Ready condition is True. */
export function isNodeReady(node: Pick<V1Node, 'status'>): boolean {
  return (node.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/**
 * Throws a ConflictError (reason `node-already-registered`) when the Node exists and is Ready, and a
 * dependency fault when the Node cannot be read — whatever the API server answered (403 included: a
 * permission the controller lacks says nothing about the node), so that it is retried, never taken
 * for "not registered" and never for a refusal.
 */
export async function assertNodeNotRegistered(readNode: NodeReader, name: string): Promise<void> {
  const node = await readNode(name).catch((err: unknown) => {
    throw dependencyFault('kubernetes-api', err);
  });
  if (node && isNodeReady(node)) {
    throw new ConflictError(
      `node ${name} is already registered and Ready; a running node renews its certificates through the CSR API, and a replaced machine gets a new name`,
      { details: { reason: 'node-already-registered' } },
    );
  }
}
