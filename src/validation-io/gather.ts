/**
 * What `validate` looks at, read once: the instance groups from the state store, the cloud's groups
 * of the cluster, and every Node and pod from the API server (paged lists, decoded as plain JSON).
 * The reading lives here, outside src/validation, so that validation stays a pure function of what
 * was read; the `/metrics` exporter reads the same facts its own way (watches and a timed refresh).
 */
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { KubeConfig, V1Node, V1Pod } from '@kubernetes/client-node';
import { type CloudOverrides, cloudFromConfig } from '../cloud/from-config.ts';
import type { Config } from '../config/schema.ts';
import { bounded } from '../deadline.ts';
import { ConfigError, UnavailableError } from '../errors.ts';
import { kubeList } from '../kube/informer.ts';
import type { Logger } from '../log.ts';
import { ClusterStore } from '../statestore/cluster-store.ts';
import type { Cluster } from '../statestore/kops-types.ts';
import { openVfs, type VfsOptions } from '../statestore/open.ts';
import {
  isPlaceholderAddress,
  nodeInfoOf,
  podInfoOf,
  type ValidationInput,
} from '../validation/validate-cluster.ts';

/** Where `gatherValidationInput` reads from. */
export interface GatherOptions {
  config: Config;
  kubeConfig: KubeConfig;
  vfsOptions?: VfsOptions;
  cloud?: CloudOverrides;
  logger?: Logger;
  /** How the API server's name is resolved; default the system's resolver. */
  resolve?: Resolver;
  /**
   * How long listing the cloud's groups may take, its SDK's retries included (default
   * {@link validationReadTimeoutMs}).
   */
  cloudTimeoutMs?: number;
}

/**
 * How long a read for validation may take (the cloud's groups, the SDK's retries included), for
 * `validate` and the `kops_*` gauges alike: a cloud that accepts the connection and never answers
 * would otherwise hold them forever, as it holds kops' validate. Past it, the read fails as timed out.
 */
export const validationReadTimeoutMs = 30_000;

/** Every object of a resource, page by page (500 a page, as the informers list). */
export async function listAll<T>(kubeConfig: KubeConfig, path: string): Promise<T[]> {
  const list = kubeList(kubeConfig, path);
  const items: T[] = [];
  let cont: string | undefined;
  do {
    const page = await list({ limit: 500, _continue: cont });
    items.push(...(page.items as T[]));
    cont = page.metadata?._continue || undefined;
  } while (cont);
  return items;
}

/** Resolves a name to all its addresses (`dns.lookup`, as the kube client connects). */
export type Resolver = (host: string) => Promise<string[]>;

const systemResolver: Resolver = async (host) =>
  (await lookup(host, { all: true })).map((entry) => entry.address);

/**
 * What the API server's name resolves to, for the placeholder check; undefined when the server is
 * given by address. A name that does not resolve is an outage (kops fails validation the same way).
 */
export async function apiServerAddresses(
  serverUrl: string,
  resolve: Resolver = systemResolver,
): Promise<ValidationInput['apiServer']> {
  const host = new URL(serverUrl).hostname.replace(/^\[|\]$/g, '');
  if (isIP(host)) return undefined;
  try {
    return { host, addresses: await resolve(host) };
  } catch (err) {
    throw new UnavailableError(
      `cannot resolve the API server name ${host}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      { cause: err },
    );
  }
}

/**
 * Whether kops publishes the cluster's DNS records, so that the API name may still point at its
 * placeholder: not with `dns: None` (v1alpha2 `spec.topology.dns.type`, v1alpha3
 * `spec.networking.topology.dns`; kops' pkg/apis/kops/cluster.go PublishesDNSRecords and UsesNoneDNS),
 * nor for a gossip cluster, whose name ends in `.k8s.local` (pkg/dns/gossip.go IsGossipClusterName,
 * until kOps 1.37 removed gossip).
 */
export function publishesDnsRecords(cluster: Cluster): boolean {
  const spec = cluster.spec as {
    topology?: { dns?: { type?: unknown } };
    networking?: { topology?: { dns?: unknown } };
  };
  const dns = spec.networking?.topology?.dns ?? spec.topology?.dns?.type;
  if (dns === 'None') return false;
  return !cluster.metadata.name.replace(/\.$/, '').endsWith('.k8s.local');
}

/** Reads the instance groups, cloud groups, Nodes and pods of the configured cluster. */
export async function gatherValidationInput(
  options: GatherOptions,
): Promise<Omit<ValidationInput, 'maxUnreadyNodes'>> {
  const { config } = options;
  if (!config.configBase) {
    throw new ConfigError('configBase is not set: validation needs the instance groups from the state store');
  }
  const vfs = openVfs(config.configBase, options.vfsOptions);
  const store = new ClusterStore(vfs);
  // First, as in kops: while the name points at the placeholder, nothing else can be reached. A
  // cluster that publishes no DNS records has no placeholder to find.
  const server = options.kubeConfig.getCurrentCluster()?.server;
  const apiServer =
    server && publishesDnsRecords(await store.cluster())
      ? await apiServerAddresses(server, options.resolve)
      : undefined;
  if (apiServer?.addresses.some(isPlaceholderAddress)) {
    // The instance groups still, so that a cluster without any is refused first, as kops does.
    return { apiServer, instanceGroups: await store.instanceGroups(), cloudGroups: [], nodes: [], pods: [] };
  }
  const cloud = await cloudFromConfig(config, vfs, options.cloud, options.logger);
  try {
    const [instanceGroups, cloudGroups, nodes, pods] = await Promise.all([
      store.instanceGroups(),
      // The listing takes no signal: at the deadline it is dropped, and closing the cloud below ends it.
      bounded(
        () => cloud.cloudGroups.list(config.clusterName),
        options.cloudTimeoutMs ?? validationReadTimeoutMs,
        'list the cloud groups',
      ),
      listAll<V1Node>(options.kubeConfig, '/api/v1/nodes'),
      listAll<V1Pod>(options.kubeConfig, '/api/v1/pods'),
    ]);
    return {
      ...(apiServer ? { apiServer } : {}),
      instanceGroups,
      cloudGroups,
      nodes: nodes.map(nodeInfoOf),
      pods: pods.map(podInfoOf),
      // On metal the Nodes carry no providerID: the members are matched to them by name.
      identifiesByNodeName: cloud.identifiesByNodeName,
    };
  } finally {
    cloud.close();
  }
}
