/**
 * Scaleway has no instance-group object: kops creates each server itself, tagged with the cluster
 * and the instance group, and finds a group's servers by those tags (`GetCloudGroups`,
 * `findServerGroups`). So do we: one tag-filtered, paginated ListServers in the cluster's zone. A
 * server kops tagged `needs-update` (a rolling update must replace it) is reported as launched from
 * something other than the group's current spec. Sizes: server-groups.ts.
 */
import { instanceGroupNameProblem } from '../instance-group-name.ts';
import { type GroupedServer, groupsOfServers, tagValue } from '../server-groups.ts';
import type { CloudGroup, CloudGroups } from '../types.ts';
import type { ScalewayClients } from './client.ts';
import { maxServersPerCall } from './node-identifier.ts';
import {
  clusterTagPrefix,
  instanceGroupTagPrefix,
  listedServersOfPage,
  needsUpdateTag,
  scalewayProviderID,
  stateOfServer,
} from './server.ts';

/** What members launched from the group's current spec are marked with (see CloudGroup.template). */
const currentSpec = 'current';

/** Most pages one listing takes (100 servers each); beyond it the API is misbehaving. */
const maxPages = 1_000;

/** The cluster's servers grouped by instance group. */
export class ScalewayCloudGroups implements CloudGroups {
  readonly #clients: Pick<ScalewayClients, 'instance' | 'call' | 'zone' | 'projectId'>;

  constructor(clients: Pick<ScalewayClients, 'instance' | 'call' | 'zone' | 'projectId'>) {
    this.#clients = clients;
  }

  async list(clusterName: string): Promise<CloudGroup[]> {
    // By server id: a server listed twice with different records (a paging glitch, a proxy mixing
    // answers) is left out; identical repeats, which page-number paging can give, are one member.
    const ours = new Map<string, { record: string; grouped: GroupedServer } | 'conflict'>();
    const clients = this.#clients;
    for (let page = 1; page <= maxPages; page++) {
      const answer = await clients.call('instance.listServers', () =>
        // Awaited, the SDK's paginated answer is the one page asked for.
        clients.instance.listServers({
          zone: clients.zone,
          project: clients.projectId,
          tags: [`${clusterTagPrefix}${clusterName}`],
          perPage: maxServersPerCall,
          page,
        }),
      );
      const servers = listedServersOfPage(answer, page, maxServersPerCall);
      for (const server of servers) {
        const instanceGroup = tagValue(server.tags, instanceGroupTagPrefix);
        if (tagValue(server.tags, clusterTagPrefix) !== clusterName || !instanceGroup) continue;
        // A group tag kops never writes names no instance group (see instance-group-name.ts).
        if (instanceGroupNameProblem(instanceGroup)) continue;
        const state = stateOfServer(server);
        const member = {
          instanceId: server.id,
          providerID: scalewayProviderID({ zone: server.zone, id: server.id }),
          state,
          healthy: state === 'running',
          template: server.tags.includes(needsUpdateTag) ? 'needs-update' : currentSpec,
        };
        const record = JSON.stringify([instanceGroup, member, server.name, server.project]);
        const before = ours.get(server.id);
        if (before === undefined) ours.set(server.id, { record, grouped: { instanceGroup, member } });
        else if (before !== 'conflict' && before.record !== record) ours.set(server.id, 'conflict');
      }
      if (servers.length < maxServersPerCall) break;
    }
    return groupsOfServers(
      [...ours.values()].flatMap((s) => (s === 'conflict' ? [] : [s.grouped])),
      currentSpec,
    );
  }
}
