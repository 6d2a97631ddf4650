/**
 * Discovery in the kubeadm format. The `cluster-info` document is a ConfigMap whose `kubeconfig` key
 * names the API server(s) and embeds the CA bundle, and whose `jws-kubeconfig-<token-id>` keys hold a
 * detached HS256 JWS of that kubeconfig for every token allowed to sign. A node that knows a token can
 * check the document came from someone who knows the token; a node that knows the CA pin checks the
 * bundle itself. The document is the same whether read from `kube-public/cluster-info`, from
 * `GET /cluster-info` on the bootstrap server, or from a file published to the state store.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CoreV1Api, V1ConfigMap } from '@kubernetes/client-node';
import { parse, stringify } from 'yaml';
import { describeError, InvalidInputError, UnavailableError } from '../errors.ts';
import { fromApiException, httpStatusOfApiError } from '../kube/api-errors.ts';
import { type Clock, systemClock } from '../kube/clock.ts';
import { type Logger, silentLogger } from '../log.ts';
import { validateServerUrl } from '../pki/kubeconfig.ts';
import { decodePem } from '../pki/pem.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { sendError, sendJson } from './http.ts';
import {
  canSign,
  nextExpiry,
  runOnTokenChanges,
  type StoredToken,
  storedTokenOf,
  type TokenSecretSource,
} from './tokens.ts';

/** The namespace and name of the published ConfigMap, as kubeadm names them. */
export const clusterInfoNamespace = 'kube-public';
export const clusterInfoName = 'cluster-info';
/** The data key of the kubeconfig, and the prefix of the signature keys. */
export const kubeconfigKey = 'kubeconfig';
export const jwsKeyPrefix = 'jws-kubeconfig-';
/** The path the bootstrap server and `discovery serve` answer on. */
export const clusterInfoPath = '/cluster-info';

/** The cluster-info document: a ConfigMap object (what the apiserver returns for it). */
export interface ClusterInfoDocument {
  apiVersion: 'v1';
  kind: 'ConfigMap';
  metadata: { name: string; namespace: string };
  data: Record<string, string>;
}

/** go-jose refuses HMAC keys shorter than 256 bits, so kubeadm pads the token secret with zeros. */
function hmacKey(secret: string): Buffer {
  const bytes = Buffer.from(secret, 'utf8');
  if (bytes.length >= 32) return bytes;
  const key = Buffer.alloc(32);
  bytes.copy(key);
  return key;
}

/** The detached JWS (`header..signature`) kubeadm computes over `content` for a token. */
export function detachedJws(content: string, tokenId: string, tokenSecret: string): string {
  // The header must be these exact bytes (key order, no spaces) for kubeadm to compute the same value.
  const header = Buffer.from(`{"alg":"HS256","kid":${JSON.stringify(tokenId)}}`).toString('base64url');
  const payload = Buffer.from(content, 'utf8').toString('base64url');
  const signature = createHmac('sha256', hmacKey(tokenSecret)).update(`${header}.${payload}`).digest();
  return `${header}..${signature.toString('base64url')}`;
}

/** Whether `jws` is the detached JWS of `content` for the token; compared in constant time. */
export function verifyDetachedJws(
  jws: string,
  content: string,
  tokenId: string,
  tokenSecret: string,
): boolean {
  const expected = Buffer.from(detachedJws(content, tokenId, tokenSecret));
  const presented = Buffer.from(jws);
  return presented.length === expected.length && timingSafeEqual(presented, expected);
}

/** What the cluster-info kubeconfig says: where the API servers are and which CA they chain to. */
export interface ClusterInfo {
  /** API server URLs (https), first preferred. */
  servers: string[];
  caBundlePem: string;
}

/** Renders the cluster-info kubeconfig: one cluster entry per server, each with the CA bundle. */
export function renderClusterInfoKubeconfig(info: ClusterInfo): string {
  if (info.servers.length === 0) throw new InvalidInputError('cluster-info needs at least one server URL');
  decodePem(info.caBundlePem, 'CERTIFICATE', 'the CA bundle');
  const caData = Buffer.from(info.caBundlePem).toString('base64');
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: info.servers.map((server, i) => ({
      // kubeadm names its single cluster ""; further servers get their index.
      name: i === 0 ? '' : String(i),
      cluster: { 'certificate-authority-data': caData, server: validateServerUrl(server) },
    })),
    contexts: [],
    'current-context': '',
    preferences: {},
    users: [],
  });
}

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
  /** How often to look again without a change notification; default {@link tokenResyncMs}. */
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
    await runOnTokenChanges(this.#options, this.#clock, () => this.sync(), signal);
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
 */
export function clusterInfoHandler(
  source: ClusterInfoSource,
  logger: Logger = silentLogger,
): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      sendError(
        res,
        new InvalidInputError(`${req.method} is not allowed on ${clusterInfoPath}: use GET`, {
          details: { reason: 'method-not-allowed', httpStatus: 405, allow: 'GET, HEAD' },
        }),
      );
      return;
    }
    Promise.resolve()
      .then(source)
      .then((document) => {
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
        logger.warn({ err: describeError(err) }, 'cannot read cluster-info');
        sendError(res, new UnavailableError('cluster-info is unavailable; retry shortly'));
      });
  };
}

/** Options of {@link configMapClusterInfoSource}. */
export interface ConfigMapSourceOptions {
  /** How long one read of the ConfigMap serves requests; default 5 s. */
  maxAgeMs?: number;
  clock?: Clock;
}

/**
 * A {@link ClusterInfoSource} reading `kube-public/cluster-info` as the leader published it, for the
 * bootstrap server on every replica. One read serves all requests for `maxAgeMs` and concurrent
 * requests share one read, so a join storm costs the apiserver a read every few seconds, not one per node.
 */
export function configMapClusterInfoSource(
  core: CoreV1Api,
  options: ConfigMapSourceOptions = {},
): ClusterInfoSource {
  const clock = options.clock ?? systemClock;
  const maxAgeMs = options.maxAgeMs ?? 5000;
  let cached: { at: number; document: ClusterInfoDocument | undefined } | undefined;
  let reading: Promise<ClusterInfoDocument | undefined> | undefined;
  const read = async (): Promise<ClusterInfoDocument | undefined> => {
    let configMap: V1ConfigMap;
    try {
      configMap = await core.readNamespacedConfigMap({
        name: clusterInfoName,
        namespace: clusterInfoNamespace,
      });
    } catch (err) {
      if (httpStatusOfApiError(err) === 404) return undefined;
      throw fromApiException(err, 'read configmap kube-public/cluster-info');
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
    if (cached && clock.now() - cached.at < maxAgeMs) return cached.document;
    reading ??= read()
      .then((document) => {
        cached = { at: clock.now(), document };
        return document;
      })
      .finally(() => {
        reading = undefined;
      });
    return reading;
  };
}

/** Parses a cluster-info document (JSON ConfigMap); throws InvalidInputError when it is not one. */
export function parseClusterInfoDocument(text: string, source = 'cluster-info'): ClusterInfoDocument {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new InvalidInputError(`${source} is not JSON: ${(err as Error).message}`, { cause: err });
  }
  const data = (value as { data?: unknown } | null)?.data;
  if (
    !data ||
    typeof data !== 'object' ||
    Array.isArray(data) ||
    !Object.values(data).every((v) => typeof v === 'string') ||
    typeof (data as Record<string, unknown>)[kubeconfigKey] !== 'string'
  ) {
    throw new InvalidInputError(
      `${source} is not a cluster-info ConfigMap: it needs data.kubeconfig (string)`,
    );
  }
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: clusterInfoName, namespace: clusterInfoNamespace },
    data: data as Record<string, string>,
  };
}

/** Reads the servers and CA bundle out of a cluster-info kubeconfig; every cluster must embed the same CA. */
export function parseClusterInfoKubeconfig(kubeconfig: string): ClusterInfo {
  let config: unknown;
  try {
    config = parse(kubeconfig);
  } catch (err) {
    throw new InvalidInputError(`the cluster-info kubeconfig is not YAML: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const clusters = (config as { clusters?: unknown } | null)?.clusters;
  const entries = Array.isArray(clusters)
    ? clusters.map((c) => (c as { cluster?: Record<string, unknown> } | null)?.cluster ?? {})
    : [];
  const caData = entries.map((c) => c['certificate-authority-data']);
  const servers = entries.map((c) => c['server']);
  if (
    entries.length === 0 ||
    !servers.every((s): s is string => typeof s === 'string') ||
    typeof caData[0] !== 'string' ||
    !caData.every((d) => d === caData[0])
  ) {
    throw new InvalidInputError(
      'the cluster-info kubeconfig needs clusters with a server and the same certificate-authority-data',
    );
  }
  const caBundlePem = Buffer.from(caData[0], 'base64').toString('utf8');
  decodePem(caBundlePem, 'CERTIFICATE', 'the cluster-info CA bundle');
  return { servers: servers.map((s) => validateServerUrl(s)), caBundlePem };
}
