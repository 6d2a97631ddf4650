/**
 * OpenStack has no instance-group object kops uses for sizes: kops creates each server itself and
 * finds a group's servers by their metadata (`KopsInstanceGroup` and the cluster name;
 * `osBuildCloudInstanceGroup`). So do we, from one listing of the project's servers (server-groups.ts).
 */
import { instanceGroupNameProblem } from '../instance-group-name.ts';
import { type GroupedServer, groupsOfServers } from '../server-groups.ts';
import type { CloudGroup, CloudGroups } from '../types.ts';
import type { NovaClient } from './nova.ts';
import { clusterNameKey, instanceGroupKey, stateOfServer } from './server.ts';

/** The providerID the OpenStack cloud controller manager gives a server's Node. */
export function openstackProviderID(serverId: string): string {
  return `openstack:///${serverId}`;
}

/** The cluster's servers grouped by instance group. */
export class OpenStackCloudGroups implements CloudGroups {
  readonly #nova: Pick<NovaClient, 'listServers'>;

  constructor(nova: Pick<NovaClient, 'listServers'>) {
    this.#nova = nova;
  }

  async list(clusterName: string): Promise<CloudGroup[]> {
    const ours: GroupedServer[] = [];
    for (const server of await this.#nova.listServers()) {
      const instanceGroup = server.metadata?.[instanceGroupKey];
      if (server.metadata?.[clusterNameKey] !== clusterName || !instanceGroup) continue;
      // A group name kops never writes names no instance group (see instance-group-name.ts).
      if (instanceGroupNameProblem(instanceGroup)) continue;
      const state = stateOfServer(server);
      ours.push({
        instanceGroup,
        member: {
          instanceId: server.id,
          providerID: openstackProviderID(server.id),
          state,
          healthy: state === 'running',
        },
      });
    }
    return groupsOfServers(ours);
  }
}
