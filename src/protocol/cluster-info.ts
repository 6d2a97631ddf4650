/**
 * The cluster-info document, as both sides of discovery speak it (kubeadm's format). It is a
 * ConfigMap whose `kubeconfig` key names the API server(s) and embeds the CA bundle, and whose
 * `jws-kubeconfig-<token-id>` keys hold a detached HS256 JWS of that kubeconfig for every token
 * allowed to sign. A node that knows a token can check the document came from someone who knows the
 * token; a node that knows the CA pin checks the bundle itself. The document is the same whether read
 * from `kube-public/cluster-info`, from `GET /cluster-info` on the bootstrap server, or from a file
 * published to the state store. Pure: the server publishes it (src/bootstrap/discovery.ts), the node
 * fetches and checks it (src/agent/discovery.ts).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { parse, stringify } from 'yaml';
import { InvalidInputError } from '../errors.ts';
import { validateServerUrl } from '../pki/kubeconfig.ts';
import { decodePem } from '../pki/pem.ts';

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
