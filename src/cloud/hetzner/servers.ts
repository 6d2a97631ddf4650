/**
 * The Hetzner Cloud servers API (https://docs.hetzner.cloud/reference/cloud#servers), read-only: one
 * server by id, and the servers carrying a label selector, page by page. The cluster and instance
 * group of a server are its labels `kops.k8s.io/cluster` and `kops.k8s.io/instance-group`, set by kops
 * when it creates the server (upup/pkg/fi/cloudup/hetzner/cloud.go).
 *
 * Rate limit (https://docs.hetzner.cloud/reference/cloud#rate-limiting): 3,600 requests per hour per
 * project, refilled at one per second, reported in `RateLimit-Limit`, `RateLimit-Remaining` and
 * `RateLimit-Reset`; over it the API answers 429 `rate_limit_exceeded`. A list page holds at most 50
 * servers (`per_page` ≤ 50), so listing a 5,000-server cluster costs 100 requests.
 */

import { isJsonObject } from '../../json-object.ts';
import { malformedAnswer } from '../api-answer.ts';
import { cloudTime } from '../cloud-time.ts';
import {
  type CloudServer,
  cloudServer,
  DecimalIds,
  ListingGuard,
  maxInt64,
  type ServerDirectory,
  type ServerStatuses,
  schemeProviderIds,
  serverOfAnswer,
  serversOfPage,
} from '../cluster-servers.ts';
import { type AnswerHeaders, type JsonAnswer, type RestJsonClient, retryAfterWait } from '../rest-json.ts';

/** The public API. */
export const defaultHetznerEndpoint = 'https://api.hetzner.cloud/v1';
/** The label naming a server's cluster. */
export const hetznerClusterLabel = 'kops.k8s.io/cluster';
/** The label naming a server's instance group. */
export const hetznerGroupLabel = 'kops.k8s.io/instance-group';
/** The largest page the servers list serves. */
export const hetznerMaxPageSize = 50;

/** The fields of a Hetzner server the controller reads. */
export interface HetznerServer {
  id: number;
  name: string;
  /** running, initializing, starting, stopping, off, deleting, migrating, rebuilding, unknown. */
  status: string;
  public_net?: { ipv4?: { ip: string } | null; ipv6?: { ip: string } | null };
  private_net?: Array<{ network: number; ip: string; alias_ips?: string[] }>;
  labels?: Record<string, string>;
  /**
   * Where the server runs (`fsn1`, `nbg1`, ...). The API dropped `datacenter` (and the
   * `datacenter.location` this was read from) on 2026-07-01; `location` replaced it (hcloud-go
   * hcloud/schema/server.go, https://docs.hetzner.cloud/changelog#2026-07-01-removing-datacenters).
   */
  location?: { name: string };
  /** When the server was created, RFC 3339 (`2016-01-30T23:55:00+00:00`; hcloud-go schema.Server `Created time.Time`). */
  created?: string;
}

interface ServersPage {
  servers: HetznerServer[];
  meta?: { pagination?: { next_page: number | null } };
}

/**
 * How long a 429 asks to wait: `Retry-After` when sent, else one second — the bucket gives back one
 * request per second, and `RateLimit-Reset` is when it is full again, far longer than one request needs.
 */
export function hetznerThrottleWait(headers: AnswerHeaders): number {
  return retryAfterWait(headers) ?? 1;
}

/** The error envelope: `{ "error": { "code": "not_found", "message": "..." } }`. */
export function hetznerErrorMessage(body: unknown): string | undefined {
  const error = (body as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  if (typeof error?.message !== 'string') return undefined;
  return typeof error.code === 'string' ? `${error.code}: ${error.message}` : error.message;
}

const hetznerStatuses: ServerStatuses = {
  states: {
    running: 'running',
    initializing: 'pending',
    starting: 'pending',
    migrating: 'running',
    rebuilding: 'pending',
    stopping: 'stopping',
    off: 'stopped',
    deleting: 'terminated',
  },
  /** The statuses kops' Hetzner identifier accepts (pkg/nodeidentity/hetzner/identify.go). */
  live: new Set(['running', 'starting']),
};

/** The server as the identifier sees it: its labels, its private network addresses and public IPv4. */
export function hetznerCloudServer(server: HetznerServer): CloudServer {
  const labels: unknown = server.labels;
  if (labels !== undefined && labels !== null && !isJsonObject(labels)) {
    throw malformedAnswer(`the record of Hetzner server ${server.id}: its labels are not an object`);
  }
  const publicIp = server.public_net?.ipv4?.ip;
  return cloudServer(hetznerStatuses, {
    id: server.id,
    name: server.name,
    status: server.status,
    clusterName: server.labels?.[hetznerClusterLabel],
    instanceGroup: server.labels?.[hetznerGroupLabel],
    privateIps: (server.private_net ?? []).flatMap((net) => (net.ip ? [net.ip] : [])),
    publicIps: publicIp ? [publicIp] : [],
    zone: server.location?.name,
    createdAt: cloudTime(server.created, `the record of Hetzner server ${server.id}: its creation time`),
  });
}

/** Hetzner server ids: positive decimal integers (kops parses them as int64). */
export const hetznerServerIds = new DecimalIds('Hetzner server id', 19, maxInt64);

/** `hcloud://<server id>`, as the Hetzner cloud controller manager sets it. */
export const hetznerProviderIds = schemeProviderIds({
  scheme: 'hcloud',
  cloud: 'Hetzner',
  idNoun: 'server id',
  ids: hetznerServerIds,
});

/** The servers of one cluster through the Hetzner Cloud API. */
export class HetznerServers implements ServerDirectory {
  readonly pageSize = hetznerMaxPageSize;
  readonly #api: RestJsonClient;
  readonly #clusterName: string;

  constructor(api: RestJsonClient, clusterName: string) {
    this.#api = api;
    this.#clusterName = clusterName;
  }

  /** GET /servers/{id}; a 200 without a server record is a malformed answer (a 404 is not-found). */
  async get(id: string): Promise<CloudServer> {
    const answer = await this.#api.get<{ server?: unknown }>(
      'servers.get',
      `/servers/${encodeURIComponent(id)}`,
    );
    return serverOfAnswer(
      'Hetzner server',
      (answer.body as { server?: unknown } | null)?.server,
      hetznerCloudServer,
    );
  }

  /**
   * GET /servers?label_selector=kops.k8s.io/cluster=<cluster>, every page. Hetzner numbers pages
   * 1, 2, 3…; a next page that is not the one after (repeated, behind, skipping some) would loop
   * or lose servers, so it ends the listing as a malformed answer, as do pages that never end
   * ({@link ListingGuard}).
   */
  async listCluster(): Promise<CloudServer[]> {
    const out: CloudServer[] = [];
    const title = 'the Hetzner Cloud API servers.list';
    const guard = new ListingGuard(title, this.pageSize);
    const selector = encodeURIComponent(`${hetznerClusterLabel}=${this.#clusterName}`);
    for (let page: number | null = 1; page !== null; ) {
      const answer: JsonAnswer<ServersPage> = await this.#api.get<ServersPage>(
        'servers.list',
        `/servers?label_selector=${selector}&page=${page}&per_page=${this.pageSize}`,
      );
      const servers = serversOfPage(title, answer.body, 'servers', 'Hetzner server', hetznerCloudServer);
      const next: unknown = answer.body.meta?.pagination?.next_page ?? null;
      if (next !== null && next !== page + 1) {
        throw malformedAnswer(
          `${title} answered page ${page} with next page ${JSON.stringify(next)?.slice(0, 40)}, not ${page + 1}`,
        );
      }
      guard.page(servers, next !== null);
      out.push(...servers);
      page = next as number | null;
    }
    return out;
  }
}
