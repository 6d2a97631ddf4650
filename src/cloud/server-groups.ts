/**
 * Cloud groups of the clouds where no group object exists (Hetzner, DigitalOcean, Linode, OpenStack,
 * Scaleway): kops creates each server itself, marks it with the cluster and the instance group, and
 * finds a group's servers by that mark. No cloud-side object holds a size, so a group's sizes are its
 * member count (kops takes the target from the instance group spec's `minSize`; the metrics and
 * `validate` fall back to the spec where they need a desired size).
 */
import type { CloudGroup, CloudGroupMember } from './types.ts';

/** One server of the cluster: the instance group it names, and it as a member. */
export interface GroupedServer {
  instanceGroup: string;
  member: CloudGroupMember;
}

/** The servers by instance group, sorted by group name; `template` is what current members show. */
export function groupsOfServers(servers: Iterable<GroupedServer>, template?: string): CloudGroup[] {
  const groups = new Map<string, CloudGroup>();
  for (const { instanceGroup, member } of servers) {
    let group = groups.get(instanceGroup);
    if (!group) {
      group = {
        instanceGroup,
        cloudName: instanceGroup,
        minSize: 0,
        maxSize: 0,
        targetSize: 0,
        ...(template === undefined ? {} : { template }),
        members: [],
      };
      groups.set(instanceGroup, group);
    }
    group.members.push(member);
  }
  for (const group of groups.values())
    group.minSize = group.maxSize = group.targetSize = group.members.length;
  return [...groups.values()].sort((a, b) => a.instanceGroup.localeCompare(b.instanceGroup));
}

/** The value of the first tag with `prefix` (`kops-instancegroup:nodes` → `nodes`), as kops reads its tags. */
export function tagValue(tags: readonly string[] | undefined, prefix: string): string | undefined {
  return tags?.find((t) => t.startsWith(prefix))?.slice(prefix.length);
}
