/**
 * What a Nova server record says about a node, as kops reads it: providerIDs `openstack://<id>` and
 * `openstack:///<id>`, the server metadata kops writes at creation (`KubernetesCluster`,
 * `KopsInstanceGroup`; pkg/model/openstackmodel/servergroup.go), the status, and the addresses of
 * every network (`fixed` ones are internal, `floating` ones external). Pure.
 */

import { isIP } from 'node:net';
import { ForbiddenError, InvalidInputError } from '../../errors.ts';
import { instanceGroupNameProblem } from '../instance-group-name.ts';
import type { InstanceAddress, InstanceState, NodeIdentity } from '../types.ts';
import { isServerId, type NovaServer } from './nova.ts';

/** Server metadata naming the cluster (kops' `TagClusterName`; bastions lack it). */
export const clusterNameKey = 'KubernetesCluster';
/** Server metadata naming the kops instance group (kops' `TagKopsInstanceGroup`). */
export const instanceGroupKey = 'KopsInstanceGroup';

/** The server id of an `openstack://<id>` or `openstack:///<id>` providerID. */
export function parseOpenStackProviderID(providerID: string): string {
  const match = /^openstack:\/\/\/?([^/]+)$/.exec(providerID);
  if (!match || !isServerId(match[1] as string)) {
    throw new InvalidInputError(`providerID "${providerID}" is not openstack://<server id>`);
  }
  return match[1] as string;
}

const stateByStatus: Record<string, InstanceState> = {
  BUILD: 'pending',
  ACTIVE: 'running',
  REBOOT: 'running',
  HARD_REBOOT: 'running',
  MIGRATING: 'running',
  RESIZE: 'running',
  VERIFY_RESIZE: 'running',
  REVERT_RESIZE: 'running',
  PASSWORD: 'running',
  SHUTOFF: 'stopped',
  STOPPED: 'stopped',
  SUSPENDED: 'stopped',
  PAUSED: 'stopped',
  SHELVED: 'stopped',
  SHELVED_OFFLOADED: 'stopped',
  RESCUE: 'stopped',
  DELETED: 'terminated',
  SOFT_DELETED: 'terminated',
};

/** The normalised state of a Nova status (ERROR and anything unknown are `unknown`). */
export function stateOfServer(server: Pick<NovaServer, 'status'>): InstanceState {
  return stateByStatus[server.status] ?? 'unknown';
}

/** Every address Nova reports for the server, on any network. */
export function serverAddresses(server: NovaServer): InstanceAddress[] {
  const out: InstanceAddress[] = [];
  for (const list of Object.values(server.addresses ?? {})) {
    for (const entry of list ?? []) {
      if (typeof entry?.addr !== 'string' || !entry.addr) continue;
      const type = entry['OS-EXT-IPS:type'] === 'floating' ? 'ExternalIP' : 'InternalIP';
      if (!out.some((a) => a.address === entry.addr)) out.push({ type, address: entry.addr });
    }
  }
  return out;
}

/**
 * The server's access IPs (`accessIPv4`, `accessIPv6`) not already among its addresses: ExternalIP,
 * as the OpenStack cloud controller manager gives them to the Node (cloud-provider-openstack
 * pkg/openstack/instances.go nodeAddresses), so the kubelet's serving CSR that names them is
 * approved. Not a bootstrap certificate's names: those are the addresses Nova lists (kops' rule).
 */
function accessAddresses(server: NovaServer): InstanceAddress[] {
  const listed = new Set(serverAddresses(server).map((a) => a.address));
  return [server.accessIPv4, server.accessIPv6]
    .filter((ip): ip is string => typeof ip === 'string' && isIP(ip) !== 0 && !listed.has(ip))
    .map((address) => ({ type: 'ExternalIP', address }));
}

/**
 * Whether a server is live: ACTIVE (or rebooting, migrating, resizing, which Nova runs through from
 * ACTIVE) or BUILD. ERROR, UNKNOWN, stopped, suspended, shelved and deleted servers are not.
 */
export function isLiveServer(server: Pick<NovaServer, 'status'>): boolean {
  const state = stateOfServer(server);
  return state === 'running' || state === 'pending';
}

/**
 * The identity of a live server of our cluster, or why it is not one: its metadata must name our
 * cluster, it must be live ({@link isLiveServer}: an ERROR or SHUTOFF server gets no identity, so no
 * renewal is approved for it), and its metadata must name an instance group. (kops' identifier checks
 * none of these; its verifier reads the group only. A server of another cluster in the same project
 * would otherwise be labelled, or bootstrapped, as ours.) Another cluster's server is refused with
 * reason `foreign-cluster`, a dead one with `not-running` — both final, even for a Cluster API
 * Machine — one in no group with `no-instance-group`, and one whose group metadata is no name kops
 * writes with `invalid-instance-group`.
 */
export function identityOfServer(
  providerID: string,
  server: NovaServer,
  clusterName: string,
): NodeIdentity | ForbiddenError {
  const cluster = server.metadata?.[clusterNameKey];
  if (cluster !== clusterName) {
    return new ForbiddenError(
      `server ${server.id} belongs to cluster "${cluster ?? ''}" (metadata ${clusterNameKey}), not "${clusterName}"`,
      { details: { instanceId: server.id, reason: 'foreign-cluster' } },
    );
  }
  if (!isLiveServer(server)) {
    return new ForbiddenError(
      `server ${server.id} (${server.name}) is ${server.status}, not ACTIVE or BUILD; it gets no identity`,
      { details: { instanceId: server.id, reason: 'not-running' } },
    );
  }
  const instanceGroup = server.metadata?.[instanceGroupKey];
  if (!instanceGroup) {
    return new ForbiddenError(
      `server ${server.id} has no ${instanceGroupKey} metadata, so it names no kops instance group`,
      { details: { instanceId: server.id, reason: 'no-instance-group' } },
    );
  }
  const nameProblem = instanceGroupNameProblem(instanceGroup);
  if (nameProblem) {
    return new ForbiddenError(`server ${server.id}: its ${instanceGroupKey} metadata ${nameProblem}`, {
      details: { instanceId: server.id, reason: 'invalid-instance-group' },
    });
  }
  const zone = server['OS-EXT-AZ:availability_zone'];
  return {
    providerID,
    instanceId: server.id,
    instanceGroup,
    state: stateOfServer(server),
    addresses: [
      ...serverAddresses(server),
      ...accessAddresses(server),
      { type: 'Hostname', address: server.name },
    ],
    ...(zone ? { zone } : {}),
    ...(server.metadata && apiServerTemplateKey in server.metadata ? { apiServerTagged: true } : {}),
    // Its UUID, which Nova never gives another server: one re-created under the name has another.
    incarnation: { id: server.id, ...(server.createdAt ? { createdAt: server.createdAt } : {}) },
  };
}

/** kops' node-template label for the api-server role in Nova metadata (`/` written as `_`). */
const apiServerTemplateKey =
  'k8s.io_cluster-autoscaler_node-template_label_node-role.kubernetes.io_api-server';
