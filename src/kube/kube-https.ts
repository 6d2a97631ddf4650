/**
 * The API server calls a bootstrap request makes on its way (the impersonation guard's Node read, the
 * replay marker's create and read), the expiry ledger's shard reads and writes, the controllers'
 * Node patches (src/kube/patch.ts) and the informers' list pages (`kubeList`, src/kube/informer.ts),
 * over plain HTTPS with one keep-alive agent. Through client-node
 * each such call cost more server CPU than the certificate's signature: a fetch dispatcher chain and
 * its web streams, the object serializer, middleware, and a full exception for every 404 or 409
 * (docs/performance.md). Credentials are applied per call as client-node applies them, so rotated
 * tokens are picked up; the agent's client certificate is fixed for the life of the caller, as with
 * any pooled connection.
 *
 * The pool is bounded ({@link maxKubeConnections}) and its TLS settings are built once: in a
 * 50,000-node join storm an unbounded agent opened a connection for nearly every call in flight
 * (1,500 at once), each a TLS handshake on both sides and a TLS context built again from the
 * kubeconfig's PEM (docs/performance.md). client-go multiplexes about as many streams over one
 * HTTP/2 connection; waiting for a pooled connection counts against the call's deadline.
 */
import type { OutgoingHttpHeaders } from 'node:http';
import type { Agent, AgentOptions, RequestOptions } from 'node:https';
import { createSecureContext } from 'node:tls';
import type { Cluster, KubeConfig } from '@kubernetes/client-node';
import { errorForHttpStatus, type KopsError, TimeoutError, UnavailableError } from '../errors.ts';
import { egressAgent, proxiedAgent } from '../net/egress-proxy.ts';
import { type HttpsAnswer, httpsRequest, StaleConnectionError } from '../net/https-client.ts';
import { retryAfterSeconds } from '../net/retry-after.ts';
import { adviceByStatus, statusMessageOf } from './api-errors.ts';

/** One call: a method, a path under the cluster's server URL, a JSON body. */
export interface KubeCall {
  /** What the call does, for its errors ("read node x"). */
  action: string;
  method: 'GET' | 'POST' | 'PUT' | 'PATCH';
  path: string;
  body?: string;
  /** The body's media type (default `application/json`; a patch names its kind). */
  contentType?: string;
  /** The longest answer read (default 1 MiB). */
  maxBodyBytes?: number;
  /** Gives up on the call when it aborts (its caller stopping): the connection is closed, the call rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Sends one call; resolves to the answer whatever its status, rejects with TimeoutError or UnavailableError. */
export type KubeHttps = (call: KubeCall) => Promise<HttpsAnswer>;

/** How many times a call found on a connection the server had closed while idle is sent again. */
const staleRetries = 3;

/** Connections to the API server one caller keeps at most. */
export const maxKubeConnections = 64;

/** The longest Node answer read: a Node is a few kilobytes, its status lists at most 50 images. */
export const maxNodeBytes = 4 * 1024 * 1024;

/** Idle pooled connections are closed after this long. */
const idleConnectionMs = 30_000;

/**
 * A {@link KubeHttps} for the current context of `kubeConfig`. A call that meets a pooled connection
 * the server closed while it idled is sent again on another: nothing reached the server, so even a
 * create is safe to resend.
 */
export function kubeHttps(kubeConfig: KubeConfig, options: { timeoutMs: number }): KubeHttps {
  const cluster = kubeConfig.getCurrentCluster();
  const server = (cluster?.server ?? '').replace(/\/+$/, '');
  const proxy = httpProxyOf(cluster);
  // Through a SOCKS proxy (the kubeconfig's proxy-url) or to a plain-HTTP server (`kubectl proxy`),
  // the agent client-node makes for the kubeconfig, which it caches; the pool below is for HTTPS,
  // directly or tunnelled through an HTTP(S) proxy-url.
  const clientNodeAgent = (Boolean(cluster?.proxyUrl) && !proxy) || server.startsWith('http:');
  let pooled: Agent | undefined;
  return async (call) => {
    const headers: OutgoingHttpHeaders = { accept: 'application/json', 'user-agent': 'kops-controller' };
    if (call.body !== undefined) headers['content-type'] = call.contentType ?? 'application/json';
    call.signal?.throwIfAborted();
    const opts: RequestOptions = { method: call.method, headers };
    await kubeConfig.applyToHTTPSOptions(opts);
    let agent = opts.agent as Agent;
    if (!clientNodeAgent) {
      pooled ??= pooledAgent(opts, proxy);
      agent = pooled;
    }
    const send = (): Promise<HttpsAnswer> =>
      httpsRequest({
        url: new URL(`${server}${call.path}`),
        method: call.method,
        headers: opts.headers as OutgoingHttpHeaders,
        ...(call.body === undefined ? {} : { body: call.body }),
        auth: opts.auth ?? undefined,
        agent,
        timeoutMs: options.timeoutMs,
        maxBodyBytes: call.maxBodyBytes ?? 1024 * 1024,
        ...(call.signal ? { signal: call.signal } : {}),
      });
    for (let retries = 0; ; retries++) {
      try {
        return await send();
      } catch (err) {
        if (call.signal?.aborted) throw call.signal.reason;
        if (err instanceof StaleConnectionError && retries < staleRetries) continue;
        const text = `${call.action}: ${(err as Error).message}`;
        throw err instanceof TimeoutError
          ? new TimeoutError(text)
          : new UnavailableError(text, { cause: err });
      }
    }
  };
}

/** The bounded keep-alive pool of a caller, its TLS context built once from the kubeconfig's material. */
function pooledAgent(opts: RequestOptions, proxy: URL | undefined): Agent {
  const options: AgentOptions = {
    keepAlive: true,
    maxSockets: maxKubeConnections,
    // The most recently used connection first, so that the others idle out after a storm.
    scheduling: 'lifo',
    timeout: idleConnectionMs,
    ...tlsOptionsOf(opts),
  };
  return proxy ? proxiedAgent('https:', proxy, options) : egressAgent('https:', options);
}

/** The TLS material and checks of `opts` (after client-node's `applyToHTTPSOptions`), as one context. */
function tlsOptionsOf(opts: RequestOptions): AgentOptions {
  return {
    secureContext: createSecureContext({
      ...(opts.ca ? { ca: opts.ca } : {}),
      ...(opts.cert ? { cert: opts.cert } : {}),
      ...(opts.key ? { key: opts.key } : {}),
    }),
    ...(opts.rejectUnauthorized === undefined ? {} : { rejectUnauthorized: opts.rejectUnauthorized }),
    ...(opts.servername ? { servername: opts.servername } : {}),
  };
}

/** The cluster's HTTP(S) `proxy-url` for an HTTPS server; undefined without one, or for a SOCKS one. */
function httpProxyOf(cluster: Cluster | null | undefined): URL | undefined {
  if (!cluster?.proxyUrl || !cluster.server.startsWith('https:')) return undefined;
  try {
    const proxy = new URL(cluster.proxyUrl);
    return proxy.protocol === 'http:' || proxy.protocol === 'https:' ? proxy : undefined;
  } catch {
    return undefined;
  }
}

/**
 * For a cluster reached through an HTTP(S) `proxy-url` (set by the kubeconfig, or from the
 * environment by src/kube/client.ts), an agent of src/net/egress-proxy.ts tunnelling through it with
 * the kubeconfig's TLS material, in place of the one client-node puts in `opts` (hpagent): hpagent's
 * CONNECT is not ended by destroying the request, so a call given up on while a stalled proxy has not
 * answered keeps its connection there, and Node reports the abort only when the proxy answers. One
 * connection, not pooled (a watch holds its connection for minutes). Undefined for any other cluster:
 * client-node's agent in `opts` is then the one to use.
 */
export function kubeProxyAgent(kubeConfig: KubeConfig, opts: RequestOptions): Agent | undefined {
  const proxy = httpProxyOf(kubeConfig.getCurrentCluster());
  return proxy ? proxiedAgent('https:', proxy, tlsOptionsOf(opts)) : undefined;
}

/**
 * The typed error of an answer that is not a success, as client-node's would be mapped
 * (src/kube/api-errors.ts): the status's kind, the Status message, the status kept as
 * `upstreamStatus` and the answer's `Retry-After` as `retryAfterSeconds`.
 */
export function kubeAnswerError(answer: HttpsAnswer, action: string): KopsError {
  const { status } = answer;
  const detail = statusMessageOf(answer.body.toString('utf8'));
  const retryAfter = answer.headers['retry-after'];
  return errorForHttpStatus(
    status,
    `${action}: HTTP ${status}${detail ? `: ${detail}` : ''}${adviceByStatus[status] ?? ''}`,
    {
      upstreamStatus: status,
      retryAfterSeconds: retryAfterSeconds(Array.isArray(retryAfter) ? retryAfter[0] : retryAfter),
    },
    'unavailable',
  );
}

/**
 * The object of a successful answer. An answer that is not JSON (a proxy's error page sent with 200)
 * is the API server being unusable, as a 503 would be, not a bug of the caller.
 */
export function kubeJson<T>(answer: HttpsAnswer, action: string): T {
  try {
    return JSON.parse(answer.body.toString('utf8')) as T;
  } catch (err) {
    throw new UnavailableError(`${action}: HTTP ${answer.status} with a body that is not JSON`, {
      cause: err,
    });
  }
}
