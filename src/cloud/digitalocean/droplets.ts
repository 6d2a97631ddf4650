/**
 * The DigitalOcean droplets API (https://docs.digitalocean.com/reference/api/digitalocean/#tag/Droplets),
 * read-only: one droplet by id, and the droplets carrying a tag, page by page. kops tags each droplet
 * it creates `KubernetesCluster:<cluster name with dots as dashes>` and `kops-instancegroup:<group>`
 * (pkg/model/domodel/droplets.go; tags may not contain dots).
 *
 * Rate limit (https://docs.digitalocean.com/reference/api/digitalocean/#section/Introduction/Rate-Limit):
 * 5,000 requests per hour and 250 per minute per token, reported in `ratelimit-limit`,
 * `ratelimit-remaining` and `ratelimit-reset` (when the oldest counted request expires, epoch
 * seconds); over it the API answers 429 `too_many_requests`. A list page holds at most 200 droplets,
 * so listing a 5,000-droplet cluster costs 25 requests.
 */

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
import {
  type AnswerHeaders,
  headerValue,
  type JsonAnswer,
  type RestJsonClient,
  retryAfterWait,
} from '../rest-json.ts';
import { tagValue } from '../server-groups.ts';

/** The public API. */
export const defaultDigitalOceanEndpoint = 'https://api.digitalocean.com/v2';
/** The tag prefix naming a droplet's cluster. */
export const doClusterTagPrefix = 'KubernetesCluster:';
/** The tag prefix naming a droplet's instance group. */
export const doGroupTagPrefix = 'kops-instancegroup:';
/** The largest page the droplets list serves. */
export const doMaxPageSize = 200;

/** kops' tag spelling of a cluster name (`do.SafeClusterName`: dots become dashes). */
export function doSafeClusterName(clusterName: string): string {
  return clusterName.replaceAll('.', '-');
}

/** The fields of a droplet the controller reads. */
export interface Droplet {
  id: number;
  name: string;
  /** new, active, off, archive. */
  status: string;
  networks?: {
    v4?: Array<{ ip_address: string; type: string }>;
    v6?: Array<{ ip_address: string; type: string }>;
  };
  tags?: string[];
  region?: { slug: string };
  /**
   * When the droplet was created, RFC 3339 (`2020-07-21T18:37:44Z`: the API's `created_at`, `format:
   * date-time`; godo's Droplet keeps it as the string `Created`).
   */
  created_at?: string;
}

interface DropletsPage {
  droplets?: Droplet[];
  links?: { pages?: { next?: string } };
}

/** The error envelope: `{ "id": "not_found", "message": "..." }`. */
export function doErrorMessage(body: unknown): string | undefined {
  const error = body as { id?: unknown; message?: unknown } | undefined;
  if (typeof error?.message !== 'string') return undefined;
  return typeof error.id === 'string' ? `${error.id}: ${error.message}` : error.message;
}

/** A 429's wait: `Retry-After`, else until `ratelimit-reset`, when the oldest counted request expires. */
export function doThrottleWait(headers: AnswerHeaders): number | undefined {
  const retryAfter = retryAfterWait(headers);
  if (retryAfter !== undefined) return retryAfter;
  const reset = Number(headerValue(headers, 'ratelimit-reset'));
  return Number.isFinite(reset) && reset > 0 ? Math.max(1, Math.ceil(reset - Date.now() / 1000)) : undefined;
}

const doStatuses: ServerStatuses = {
  states: { new: 'pending', active: 'running', off: 'stopped', archive: 'terminated' },
  /** The statuses kops' DigitalOcean identifier accepts (pkg/nodeidentity/do/identify.go). */
  live: new Set(['active', 'new']),
};

/** The droplet as the identifier sees it: its tags, and its private and public v4 and v6 addresses. */
export function doCloudServer(droplet: Droplet): CloudServer {
  const nets = [...(droplet.networks?.v4 ?? []), ...(droplet.networks?.v6 ?? [])];
  const ofType = (type: string) => nets.filter((net) => net.type === type).map((net) => net.ip_address);
  return cloudServer(doStatuses, {
    id: droplet.id,
    name: droplet.name,
    status: droplet.status,
    clusterName: tagValue(droplet.tags, doClusterTagPrefix),
    instanceGroup: tagValue(droplet.tags, doGroupTagPrefix),
    privateIps: ofType('private'),
    publicIps: ofType('public'),
    zone: droplet.region?.slug,
    createdAt: cloudTime(droplet.created_at, `the record of droplet ${droplet.id}: its creation time`),
  });
}

/** Droplet ids: positive decimal integers (kops parses them with Atoi). */
export const dropletIds = new DecimalIds('droplet id', 19, maxInt64);

/** `digitalocean://<droplet id>`, as the DigitalOcean cloud controller manager sets it. */
export const doProviderIds = schemeProviderIds({
  scheme: 'digitalocean',
  cloud: 'DigitalOcean',
  idNoun: 'droplet id',
  ids: dropletIds,
});

/** The droplets of one cluster through the DigitalOcean API. */
export class DigitalOceanDroplets implements ServerDirectory {
  readonly pageSize = doMaxPageSize;
  readonly #api: RestJsonClient;
  readonly #tag: string;

  constructor(api: RestJsonClient, clusterName: string) {
    this.#api = api;
    this.#tag = `${doClusterTagPrefix}${doSafeClusterName(clusterName)}`;
  }

  /** GET /droplets/{id}; a 200 without a droplet record is a malformed answer (a 404 is not-found). */
  async get(id: string): Promise<CloudServer> {
    const answer = await this.#api.get<{ droplet?: unknown }>(
      'droplets.get',
      `/droplets/${encodeURIComponent(id)}`,
    );
    return serverOfAnswer('droplet', (answer.body as { droplet?: unknown } | null)?.droplet, doCloudServer);
  }

  /** GET /droplets?tag_name=KubernetesCluster:<cluster>, every page, guarded against pages that never end. */
  async listCluster(): Promise<CloudServer[]> {
    const out: CloudServer[] = [];
    const title = 'the DigitalOcean API droplets.list';
    const guard = new ListingGuard(title, this.pageSize);
    const tag = encodeURIComponent(this.#tag);
    for (let page = 1; ; page++) {
      const answer: JsonAnswer<DropletsPage> = await this.#api.get<DropletsPage>(
        'droplets.list',
        `/droplets?tag_name=${tag}&page=${page}&per_page=${this.pageSize}`,
      );
      const droplets = serversOfPage(title, answer.body, 'droplets', 'droplet', doCloudServer);
      // The API links the next page while there is one; its page number is ours plus one.
      const more = Boolean(answer.body.links?.pages?.next);
      guard.page(droplets, more);
      out.push(...droplets);
      if (!more) return out;
    }
  }
}
