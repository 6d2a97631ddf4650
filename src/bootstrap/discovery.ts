/**
 * The server side of discovery: the cluster-info document (src/protocol/cluster-info.ts) signed with
 * the stored tokens, kept current in `kube-public/cluster-info` by the leader, and served on
 * `GET /cluster-info` by every replica.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CoreV1Api, V1ConfigMap } from '@kubernetes/client-node';
import { bounded } from '../deadline.ts';
import { MethodNotAllowedError, UnavailableError } from '../errors.ts';
import { fromApiException, httpStatusOfApiError } from '../kube/api-errors.ts';
import { abortingWith } from '../kube/call-options.ts';
import { type Logger, RecurringFailureLog, silentLogger } from '../log.ts';
import {
  type ClusterInfoDocument,
  clusterInfoName,
  clusterInfoNamespace,
  detachedJws,
  jwsKeyPrefix,
  kubeconfigKey,
} from '../protocol/cluster-info.ts';
import { type Clock, systemClock } from '../runtime/clock.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { sendError, sendJson } from './http.ts';
import {
  canSign,
  defaultTokenReadTimeoutMs,
  nextExpiry,
  runOnTokenChanges,
  type StoredToken,
  storedTokenOf,
  type TokenSecretSource,
} from './tokens.ts';

/** The full document for a kubeconfig and the stored tokens: a signature for every token that may sign. */
export function buildClusterInfo(
  kubeconfig: string,
  tokens: readonly StoredToken[],
  now: Date,
  base: Record<string, string> = {},
): ClusterInfoDocument {
  const data: Record<string, string> = {};
  // Keys that are not ours (set by someone else on the ConfigMap) are kept; stale signatures are not.
  for (const [key, value] of Object.entries(base)) if (!key.startsWith(jwsKeyPrefix)) data[key] = value;
  data[kubeconfigKey] = kubeconfig;
  for (const token of [...tokens].sort((a, b) => a.id.localeCompare(b.id))) {
    if (canSign(token, now)) data[jwsKeyPrefix + token.id] = detachedJws(kubeconfig, token.id, token.secret);
  }
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: clusterInfoName, namespace: clusterInfoNamespace },
    data,
  };
}

/** Signs the kubeconfig with every token the source holds (for `discovery publish`). */
export async function signedClusterInfo(
  kubeconfig: string,
  source: TokenSecretSource,
  now: Date,
): Promise<ClusterInfoDocument> {
  const tokens = (await source.list()).flatMap((s) => storedTokenOf(s) ?? []);
  return buildClusterInfo(kubeconfig, tokens, now);
}

function sameData(a: Record<string, string> | undefined, b: Record<string, string>): boolean {
  const aKeys = Object.keys(a ?? {});
  return aKeys.length === Object.keys(b).length && aKeys.every((k) => a?.[k] === b[k]);
}

/** Options of a {@link ClusterInfoPublisher}. */
export interface ClusterInfoPublisherOptions {
  core: CoreV1Api;
  /** The token Secrets; a source that can {@link TokenSecretSource.subscribe} makes signing immediate. */
  source: TokenSecretSource;
  /** The kubeconfig to publish (see {@link renderClusterInfoKubeconfig}); read on every pass, so it may change. */
  kubeconfig: () => string;
  /** How often to look again without a change notification; default every 10 minutes for a watched source, every minute otherwise. */
  resyncMs?: number;
  clock?: Clock;
  logger?: Logger;
}

/**
 * Keeps ConfigMap `kube-public/cluster-info` current (leader only): the kubeconfig plus a signature for
 * every token valid for signing, recomputed when the source reports a token change (a watch event:
 * a new token signs within moments, not at the next poll) or a token expires; written only when the
 * data differs, with the resourceVersion read, so a concurrent writer makes it retry, not overwrite.
 */
export class ClusterInfoPublisher implements LeaderComponent {
  readonly name = 'cluster-info-publisher';
  readonly #options: ClusterInfoPublisherOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;

  constructor(options: ClusterInfoPublisherOptions) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#logger = (options.logger ?? silentLogger).child({ component: this.name });
  }

  /** Brings the ConfigMap up to date; returns whether it wrote, and when the next token expires (epoch ms). */
  async sync(): Promise<{ written: boolean; nextExpiry: number | undefined }> {
    const { core } = this.#options;
    const now = new Date(this.#clock.now());
    const tokens = (await this.#options.source.list()).flatMap((s) => storedTokenOf(s) ?? []);
    let current: V1ConfigMap | undefined;
    try {
      current = await core.readNamespacedConfigMap({
        name: clusterInfoName,
        namespace: clusterInfoNamespace,
      });
    } catch (err) {
      if (httpStatusOfApiError(err) !== 404)
        throw fromApiException(err, 'read configmap kube-public/cluster-info');
    }
    const desired = buildClusterInfo(this.#options.kubeconfig(), tokens, now, current?.data ?? {});
    const next = nextExpiry(tokens, now);
    if (current && sameData(current.data, desired.data)) return { written: false, nextExpiry: next };
    try {
      if (current) {
        await core.replaceNamespacedConfigMap({
          name: clusterInfoName,
          namespace: clusterInfoNamespace,
          body: { ...current, data: desired.data },
        });
      } else {
        await core.createNamespacedConfigMap({ namespace: clusterInfoNamespace, body: desired });
      }
    } catch (err) {
      throw fromApiException(err, 'write configmap kube-public/cluster-info');
    }
    const signers = Object.keys(desired.data).filter((k) => k.startsWith(jwsKeyPrefix)).length;
    this.#logger.info({ signatures: signers }, 'published cluster-info');
    return { written: true, nextExpiry: next };
  }

  async start(signal: AbortSignal): Promise<void> {
    await runOnTokenChanges(
      { ...this.#options, logger: this.#logger },
      this.#clock,
      () => this.sync(),
      signal,
    );
  }
}

/** Where the handler gets the document from; undefined while there is none yet (answered with 503). */
export type ClusterInfoSource = () =>
  | ClusterInfoDocument
  | undefined
  | Promise<ClusterInfoDocument | undefined>;

/**
 * `GET /cluster-info` for node:http: the document as JSON, the ConfigMap object exactly as the
 * apiserver serves `kube-public/cluster-info`, so one client reads either. HEAD works; other methods get
 * 405, and 503 while there is no document; errors have the bootstrap API's `{"error": {...}}` shape.
 * A source that fails (the API server down) is logged when it starts failing, then every ten minutes
 * with how many requests failed, and once when it answers again: not once per request, which during
 * an outage is once per waiting node every few seconds.
 */
export function clusterInfoHandler(
  source: ClusterInfoSource,
  logger: Logger = silentLogger,
  clock: Clock = systemClock,
): (req: IncomingMessage, res: ServerResponse) => void {
  const failures = new RecurringFailureLog(logger, {
    message: 'cannot read cluster-info',
    recoveredMessage: 'cluster-info read again',
    now: () => clock.monotonic(),
  });
  return (req, res) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      sendError(res, new MethodNotAllowedError('GET, HEAD'));
      return;
    }
    Promise.resolve()
      .then(source)
      .then((document) => {
        failures.succeeded();
        if (document) sendJson(res, 200, document);
        else
          sendError(
            res,
            new UnavailableError('cluster-info is not published yet; retry shortly', {
              details: { reason: 'not-published' },
            }),
          );
      })
      .catch((err: unknown) => {
        failures.failed(err);
        sendError(res, new UnavailableError('cluster-info is unavailable; retry shortly'));
      });
  };
}

/** Options of {@link configMapClusterInfoSource}. */
export interface ConfigMapSourceOptions {
  /** How long one read of the ConfigMap serves requests; default 5 s. */
  maxAgeMs?: number;
  /** Deadline of one read of the ConfigMap (default 5 s, as a token Secret's read). */
  timeoutMs?: number;
  clock?: Clock;
}

/**
 * A {@link ClusterInfoSource} reading `kube-public/cluster-info` as the leader published it, for the
 * bootstrap server on every replica. One read serves all requests for `maxAgeMs` and concurrent
 * requests share one read, so a join storm costs the apiserver a read every few seconds, not one per node.
 * A read has a deadline (`timeoutMs`): an API server that accepts the connection and never answers
 * fails the requests waiting on it (503 with Retry-After) and the read is aborted, and the next request
 * reads again; a failed read is never shared past its own end, nor cached.
 */
export function configMapClusterInfoSource(
  core: CoreV1Api,
  options: ConfigMapSourceOptions = {},
): ClusterInfoSource {
  const clock = options.clock ?? systemClock;
  const maxAgeMs = options.maxAgeMs ?? 5000;
  const timeoutMs = options.timeoutMs ?? defaultTokenReadTimeoutMs;
  let cached: { at: number; document: ClusterInfoDocument | undefined } | undefined;
  let reading: Promise<ClusterInfoDocument | undefined> | undefined;
  const read = async (): Promise<ClusterInfoDocument | undefined> => {
    const action = 'read configmap kube-public/cluster-info';
    let configMap: V1ConfigMap;
    try {
      configMap = await bounded(
        (signal) =>
          core.readNamespacedConfigMap(
            { name: clusterInfoName, namespace: clusterInfoNamespace },
            abortingWith(signal),
          ),
        timeoutMs,
        action,
      );
    } catch (err) {
      if (httpStatusOfApiError(err) === 404) return undefined;
      throw fromApiException(err, action);
    }
    const data = configMap.data ?? {};
    if (typeof data[kubeconfigKey] !== 'string') return undefined;
    return {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: clusterInfoName, namespace: clusterInfoNamespace },
      data,
    };
  };
  return () => {
    if (cached && clock.monotonic() - cached.at < maxAgeMs) return cached.document;
    reading ??= read()
      .then((document) => {
        cached = { at: clock.monotonic(), document };
        return document;
      })
      .finally(() => {
        reading = undefined;
      });
    return reading;
  };
}
