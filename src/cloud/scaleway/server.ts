/**
 * What a Scaleway Instance record says about a node, as kops reads it: providerIDs
 * `scaleway://instance/<zone>/<server id>` (kops splits what follows the scheme into exactly three
 * parts), the tags kops writes at creation (`noprefix=kops.k8s.io/cluster=<name>`,
 * `noprefix=kops.k8s.io/instance-group=<ig>`; upup/pkg/fi/cloudup/scaleway/cloud.go) and the state.
 * Pure.
 */
import { isIP } from 'node:net';
import type { Instancev1 } from '@scaleway/sdk-instance';
import { ForbiddenError, InvalidInputError } from '../../errors.ts';
import { malformedAnswer } from '../api-answer.ts';
import { instanceGroupNameProblem } from '../instance-group-name.ts';
import { tagValue } from '../server-groups.ts';
import type { InstanceAddress, InstanceState, NodeIdentity } from '../types.ts';
import { zonePattern } from './client.ts';

/** The tag naming the cluster (kops' `TagClusterName`, then `=<cluster>`). */
export const clusterTagPrefix = 'noprefix=kops.k8s.io/cluster=';
/** The tag naming the instance group (kops' `TagInstanceGroup`, then `=<ig>`). */
export const instanceGroupTagPrefix = 'noprefix=kops.k8s.io/instance-group=';
/** The tag kops puts on servers a rolling update must replace. */
export const needsUpdateTag = 'noprefix=kops.k8s.io/needs-update';

/**
 * The servers of page `page` of a ListServers answer, `perPage` a page. The SDK reads a missing
 * `servers` as an empty list (unmarshalArrayOfObject), but the Instance API always says how many
 * servers match (`X-Total-Count`, copied to `totalCount` by the SDK's fixLegacyTotalCount): a page
 * without that count, or holding fewer servers than it says this page holds, is an answer we cannot
 * read (a 200 from a proxy, a body cut short) — a fault, never an empty cluster or a missing server.
 */
export function listedServersOfPage(
  answer: Pick<Instancev1.ListServersResponse, 'servers' | 'totalCount'>,
  page: number,
  perPage: number,
): Instancev1.Server[] {
  const total: unknown = answer.totalCount;
  if (typeof total !== 'number' || !Number.isSafeInteger(total) || total < 0) {
    throw malformedAnswer(`ListServers answered page ${page} without the number of servers it matches`);
  }
  const expected = Math.min(perPage, Math.max(0, total - (page - 1) * perPage));
  if (answer.servers.length < expected) {
    throw malformedAnswer(
      `ListServers answered page ${page} with ${answer.servers.length} servers where its count of ${total} says ${expected}`,
    );
  }
  return answer.servers;
}

/** A server in one zone. */
export interface ScalewayServerRef {
  zone: string;
  id: string;
}

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Whether `id` can be a Scaleway server id (a UUID). */
export function isScalewayServerId(id: string): boolean {
  return uuidPattern.test(id);
}

/** The zone and server id of a `scaleway://<kind>/<zone>/<id>` providerID. */
export function parseScalewayProviderID(providerID: string): ScalewayServerRef {
  const parts = providerID.startsWith('scaleway://') ? providerID.slice('scaleway://'.length).split('/') : [];
  const [, zone, id] = parts;
  if (parts.length !== 3 || !zone || !id || !zonePattern.test(zone) || !isScalewayServerId(id)) {
    throw new InvalidInputError(`providerID "${providerID}" is not scaleway://instance/<zone>/<server id>`);
  }
  return { zone, id };
}

/** The providerID Scaleway's cloud controller manager gives a server's Node. */
export function scalewayProviderID(ref: ScalewayServerRef): string {
  return `scaleway://instance/${ref.zone}/${ref.id}`;
}

const stateByServerState: Record<string, InstanceState> = {
  starting: 'pending',
  running: 'running',
  stopping: 'stopping',
  'stopped in place': 'stopped',
  stopped: 'stopped',
  locked: 'unknown',
};

/** The normalised state of a server. */
export function stateOfServer(server: Pick<Instancev1.Server, 'state'>): InstanceState {
  return stateByServerState[server.state] ?? 'unknown';
}

/**
 * The addresses the Instance record itself carries (public IPs, the legacy private IP), and the DNS
 * names Scaleway gives a server by its id, as the Scaleway cloud controller manager puts them in the
 * Node's addresses (scaleway/scaleway-cloud-controller-manager scaleway/instances.go
 * instanceAddresses): `<id>.pub.instances.scw.cloud` (ExternalDNS) with a public IPv4,
 * `<id>.priv.instances.scw.cloud` (InternalDNS) with the legacy private IP. The kubelet asks for
 * these in its serving certificate. (The Private-Network IPs the CCM reads from IPAM are not on the
 * record: see {@link identityOfServer}.)
 */
export function serverRecordAddresses(server: Instancev1.Server): InstanceAddress[] {
  const out: InstanceAddress[] = [];
  if (server.privateIp) {
    out.push({ type: 'InternalIP', address: server.privateIp });
    out.push({ type: 'InternalDNS', address: `${server.id}.priv.instances.scw.cloud` });
  }
  let publicIPv4 = false;
  for (const ip of [...(server.publicIps ?? []), ...(server.publicIp ? [server.publicIp] : [])]) {
    if (!ip.address || out.some((a) => a.address === ip.address)) continue;
    out.push({ type: 'ExternalIP', address: ip.address });
    if (isIP(ip.address) === 4) publicIPv4 = true;
  }
  if (publicIPv4) out.push({ type: 'ExternalDNS', address: `${server.id}.pub.instances.scw.cloud` });
  return out;
}

/** `addresses` and then each of `ips` not among them as InternalIP. */
function withInternalIPs(addresses: InstanceAddress[], ips: readonly string[]): InstanceAddress[] {
  const out = [...addresses];
  for (const address of ips) {
    if (!out.some((a) => a.address === address)) out.push({ type: 'InternalIP', address });
  }
  return out;
}

/**
 * The server's names: its name (kops' node name) and, when it differs, its host name, which the
 * Scaleway cloud controller manager reports as the Node's Hostname (instances.go instanceAddresses).
 */
export function serverHostnames(server: Instancev1.Server): InstanceAddress[] {
  const names = [server.name];
  if (server.hostname && server.hostname.toLowerCase() !== server.name.toLowerCase()) {
    names.push(server.hostname);
  }
  return names.map((address) => ({ type: 'Hostname', address }));
}

/** Running or starting: the states kops' identifier accepts (pkg/nodeidentity/scaleway). */
export function isLiveState(state: InstanceState): boolean {
  return state === 'running' || state === 'pending';
}

/**
 * The identity of a live server of our cluster, or why it is not one: it must be in our project
 * (`SCW_DEFAULT_PROJECT_ID`: an API key may read several projects, and GetServer by zone and id
 * answers for any of them), its tags must name our cluster, it must be running or starting (as
 * kops' identifier requires: a locked, stopping or stopped server gets no identity), and it must
 * carry an instance-group tag. (kops' identifier reads only the role tag, its verifier the group tag:
 * a server of another cluster would otherwise pass as ours.) Another project's or cluster's server
 * is refused with reason `foreign-cluster`, a dead one with `not-running` — both final, even for a
 * Cluster API Machine — and one in no group with `no-instance-group`.
 *
 * Its addresses are the record's, its names, and `privateNetworkIps`: the IPv4 addresses IPAM lists
 * for its Private NICs (ipam.ts), which the Scaleway cloud controller manager gives the Node as
 * InternalIP (instances.go instanceAddresses, getPrivateNetworkAddresses). On a kops cluster with a
 * Private Network and routed IPs (no legacy private IP) they are the Node's only InternalIPs.
 */
export function identityOfServer(
  providerID: string,
  server: Instancev1.Server,
  clusterName: string,
  projectId: string,
  privateNetworkIps: readonly string[] = [],
): NodeIdentity | ForbiddenError {
  if (server.project !== projectId) {
    return new ForbiddenError(
      `server ${server.id} is in project ${server.project || '(none)'}, not this cluster's project ${projectId}`,
      { details: { instanceId: server.id, reason: 'foreign-cluster' } },
    );
  }
  const cluster = tagValue(server.tags, clusterTagPrefix);
  if (cluster !== clusterName) {
    return new ForbiddenError(
      `server ${server.id} belongs to cluster "${cluster ?? ''}" (tag ${clusterTagPrefix}…), not "${clusterName}"`,
      { details: { instanceId: server.id, reason: 'foreign-cluster' } },
    );
  }
  const state = stateOfServer(server);
  if (!isLiveState(state)) {
    return new ForbiddenError(
      `server ${server.id} (${server.name}) is ${server.state}, not running or starting; it gets no identity`,
      { details: { instanceId: server.id, reason: 'not-running' } },
    );
  }
  const instanceGroup = tagValue(server.tags, instanceGroupTagPrefix);
  if (!instanceGroup) {
    return new ForbiddenError(
      `server ${server.id} has no ${instanceGroupTagPrefix}… tag, so it names no kops instance group`,
      { details: { instanceId: server.id, reason: 'no-instance-group' } },
    );
  }
  const nameProblem = instanceGroupNameProblem(instanceGroup);
  if (nameProblem) {
    return new ForbiddenError(`server ${server.id}: its ${instanceGroupTagPrefix}… tag ${nameProblem}`, {
      details: { instanceId: server.id, reason: 'invalid-instance-group' },
    });
  }
  return {
    providerID,
    instanceId: server.id,
    instanceGroup,
    state,
    addresses: [
      ...withInternalIPs(serverRecordAddresses(server), privateNetworkIps),
      ...serverHostnames(server),
    ],
    zone: server.zone,
    // Its UUID, which the Instance API never gives another server: one re-created under the name
    // has another. (`creation_date` was checked as the answer was read: client.ts.)
    incarnation: { id: server.id, ...(server.creationDate ? { createdAt: server.creationDate } : {}) },
  };
}
