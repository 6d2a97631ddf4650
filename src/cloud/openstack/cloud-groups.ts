/**
 * OpenStack has no instance-group object kops uses for sizes: kops creates each server itself and
 * finds a group's servers by their metadata (`KopsInstanceGroup` and the cluster name;
 * `osBuildCloudInstanceGroup`). So do we, from one listing of the project's servers. kops takes the
 * group's target size from the instance group spec's `minSize`; the cloud knows only the servers it
 * runs, so here the sizes are the member count, and the metrics and `validate` fall back to the
 * spec where they need a desired size.
 */
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
    const groups = new Map<string, CloudGroup>();
    for (const server of await this.#nova.listServers()) {
      const instanceGroup = server.metadata?.[instanceGroupKey];
      if (server.metadata?.[clusterNameKey] !== clusterName || !instanceGroup) continue;
      let group = groups.get(instanceGroup);
      if (!group) {
        group = {
          instanceGroup,
          cloudName: instanceGroup,
          minSize: 0,
          maxSize: 0,
          targetSize: 0,
          members: [],
        };
        groups.set(instanceGroup, group);
      }
      const state = stateOfServer(server);
      group.members.push({
        instanceId: server.id,
        providerID: openstackProviderID(server.id),
        state,
        healthy: state === 'running',
      });
    }
    for (const group of groups.values()) {
      group.minSize = group.maxSize = group.targetSize = group.members.length;
    }
    return [...groups.values()];
  }
}
