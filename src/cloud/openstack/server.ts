/**
 * What a Nova server record says about a node, as kops reads it: providerIDs `openstack://<id>` and
 * `openstack:///<id>`, the server metadata kops writes at creation (`KubernetesCluster`,
 * `KopsInstanceGroup`; pkg/model/openstackmodel/servergroup.go), the status, and the addresses of
 * every network (`fixed` ones are internal, `floating` ones external). Pure.
 */
import { ForbiddenError, InvalidInputError } from '../../errors.ts';
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
 * The identity of a server of our cluster, or why it is not one: its metadata must name our cluster
 * and an instance group. (kops' identifier checks neither; its verifier reads the group only. A
 * server of another cluster in the same project would otherwise be labelled, or bootstrapped, as
 * ours.)
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
      { details: { reason: 'foreign-cluster' } },
    );
  }
  const instanceGroup = server.metadata?.[instanceGroupKey];
  if (!instanceGroup) {
    return new ForbiddenError(
      `server ${server.id} has no ${instanceGroupKey} metadata, so it names no kops instance group`,
    );
  }
  const zone = server['OS-EXT-AZ:availability_zone'];
  return {
    providerID,
    instanceId: server.id,
    instanceGroup,
    state: stateOfServer(server),
    addresses: [...serverAddresses(server), { type: 'Hostname', address: server.name }],
    ...(zone ? { zone } : {}),
  };
}
