/**
 * What Scaleway's IPAM says about an Instance's addresses, for the node identity
 * (node-identifier.ts) and the `scaleway` bootstrap policy (src/bootstrap/policies/scaleway.ts).
 *
 * IPAM holds an Instance's addresses as records attached to a resource: a routed public IP is a
 * zonal record (`source.zonal`) attached to the server (`resource.type` `instance_server`), a
 * Private-Network address a regional record (`source.subnet_id`) attached to the server's Private NIC
 * (`instance_private_nic`, the NIC's id; the server's id does not find it). Scaleway's cloud
 * controller manager reads a node's Private-Network addresses that way, IPv4 only, in the server's
 * project (scaleway/scaleway-cloud-controller-manager scaleway/instances.go getIPsForPrivateNIC:
 * `ListIPs{ProjectID, ResourceType: instance_private_nic, ResourceID: <nic>, IsIPv6: false}`), and
 * reports them as the Node's InternalIP. We ask for many NICs at once (`resource_ids`, IPAM
 * `ListIPsRequest.resourceIds`: "Only IPs attached to at least one of these resources"), and take a
 * record for a server only if it is attached to the server itself or to one of the NICs the
 * Instance API lists for it, whatever the query asked: an API that ignores a filter never lends a
 * server another resource's address.
 */
import { isIP } from 'node:net';
import type { Instancev1 } from '@scaleway/sdk-instance';
import type { Ipamv1 } from '@scaleway/sdk-ipam';
import { UnavailableError } from '../../errors.ts';
import { malformedAnswer } from '../api-answer.ts';
import type { ScalewayClients } from './client.ts';

/**
 * Records a ListIPs page asks for: the largest page the Instance API documents (`per_page` ≤ 100);
 * the IPAM API's own ceiling is not published in its SDK, and a smaller page it might answer is read
 * on (see {@link listIpamIps}).
 */
const ipamPageSize = 100;

/** Resource ids one listing filters by at most (each a UUID in the query string: about 5 KB for 100). */
const maxIdsPerIpamListing = 100;

/**
 * Most pages one listing takes. A listing of at most 100 resources' IPv4 records fits in one or two;
 * one announcing more than this many pages is the API misbehaving (a filter ignored in a large
 * region, a wrong total), a fault rather than a long walk.
 */
const maxIpamPages = 20;

/** The clients a listing needs. */
export type IpamClients = Pick<ScalewayClients, 'ipam' | 'call' | 'projectId'>;

/** The IPv4 address of an IPAM record (`10.0.0.5/22` → `10.0.0.5`). */
function ipv4Of(ip: Ipamv1.IP): string | undefined {
  const address = ip.address.split('/')[0] ?? '';
  return !ip.isIpv6 && isIP(address) === 4 ? address : undefined;
}

/** The server's own Private NICs: those its record lists that name it as their server. */
export function privateNicsOf(server: Instancev1.Server): Instancev1.PrivateNIC[] {
  return (server.privateNics ?? []).filter((nic) => nic.serverId === server.id);
}

/** A server's IPv4 addresses in IPAM: on its Private NICs (regional) and its routed public IPs (zonal). */
export interface ServerIpamAddresses {
  private: string[];
  public: string[];
}

/**
 * The records' IPv4 addresses that belong to `server`: each record must be attached to the server
 * itself (a routed public IP: zonal, of its zone) or to one of its own Private NICs (a
 * Private-Network address, with a private source), whatever the query asked: another resource's
 * address is never taken for the server's. Each address once, in the records' order.
 */
export function ipamAddressesOf(ips: readonly Ipamv1.IP[], server: Instancev1.Server): ServerIpamAddresses {
  const nics = new Set(privateNicsOf(server).map((nic) => nic.id));
  const out: ServerIpamAddresses = { private: [], public: [] };
  const add = (list: string[], address: string) => {
    if (!list.includes(address)) list.push(address);
  };
  for (const ip of ips) {
    const address = ipv4Of(ip);
    const { resource, source } = ip;
    if (address === undefined || !resource || !source) continue;
    if (resource.type === 'instance_private_nic') {
      const privateSource = source.privateNetworkId ?? source.subnetId ?? source.vpcId;
      if (nics.has(resource.id) && privateSource) add(out.private, address);
    } else if (resource.type === 'instance_server' && resource.id === server.id) {
      if (source.zonal === server.zone) add(out.public, address);
    }
  }
  return out;
}

/**
 * Every record a ListIPs query selects, page by page (`page_size` {@link ipamPageSize}), each page
 * one call with its retries. A page is read on until the records read reach the `total_count` every
 * page announces. An answer that cannot be right is a fault (`malformed-answer`), never a shorter
 * list, which would drop a node's addresses: no `total_count`, a page that brings no record not
 * read before while more are announced, more pages than {@link maxIpamPages}. So is a `total_count` that changes between
 * pages: page-number paging over a set that changed may have skipped a record.
 */
export async function listIpamIps(
  clients: Pick<IpamClients, 'ipam' | 'call'>,
  what: string,
  request: Ipamv1.ListIPsRequest & { region: string },
): Promise<Ipamv1.IP[]> {
  const records = new Map<string, Ipamv1.IP>();
  let announced: number | undefined;
  for (let page = 1; page <= maxIpamPages; page++) {
    const answer = await clients.call(what, () =>
      // Awaited, the SDK's paginated answer is the one page asked for.
      clients.ipam.listIPs({ ...request, page, pageSize: ipamPageSize }),
    );
    const total = answer.totalCount;
    if (typeof total !== 'number' || !Number.isSafeInteger(total) || total < 0) {
      throw malformedAnswer(`IPAM ${what}: page ${page} has no total_count`);
    }
    if (announced !== undefined && total !== announced) {
      throw new UnavailableError(
        `IPAM ${what}: the listing changed while it was read (total_count ${announced}, then ${total}); it is read again later`,
        { details: { reason: 'listing-changed' } },
      );
    }
    announced = total;
    if (Math.ceil(total / ipamPageSize) > maxIpamPages) {
      throw malformedAnswer(`IPAM ${what}: total_count ${total} is beyond ${maxIpamPages} pages`);
    }
    const before = records.size;
    for (const ip of answer.ips) {
      // A record without an id cannot be told from another; repeats (page-number paging gives them)
      // are one record.
      if (typeof ip.id !== 'string') {
        throw malformedAnswer(`IPAM ${what}: page ${page} lists an IP without an id`);
      }
      records.set(ip.id, ip);
    }
    if (records.size >= total) return [...records.values()];
    if (records.size === before) {
      throw malformedAnswer(
        `IPAM ${what}: page ${page} lists no IP not listed before, though total_count is ${total}`,
      );
    }
  }
  throw malformedAnswer(`IPAM ${what}: the listing did not end within ${maxIpamPages} pages`);
}

/**
 * The Private-Network IPv4 addresses of each of `servers` (all in `region`), by server id, as the
 * cloud controller manager reports them: one listing for the Private NICs of all of them (a listing
 * per {@link maxIdsPerIpamListing} NICs), so a batch of servers costs one listing, not one per server
 * or NIC. A server without a Private NIC has none and costs nothing. A failed listing rejects: no
 * server's addresses are answered short.
 */
export async function privateNetworkAddresses(
  clients: IpamClients,
  region: string,
  servers: readonly Instancev1.Server[],
): Promise<Map<string, string[]>> {
  const nicIds = servers.flatMap((server) => privateNicsOf(server).map((nic) => nic.id));
  const records: Ipamv1.IP[] = [];
  for (let i = 0; i < nicIds.length; i += maxIdsPerIpamListing) {
    records.push(
      ...(await listIpamIps(clients, 'ipam.listIPs (private NICs)', {
        region,
        projectId: clients.projectId,
        resourceType: 'instance_private_nic',
        resourceIds: nicIds.slice(i, i + maxIdsPerIpamListing),
        isIpv6: false,
      })),
    );
  }
  return new Map(servers.map((server) => [server.id, ipamAddressesOf(records, server).private]));
}
