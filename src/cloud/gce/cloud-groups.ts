/**
 * The cloud groups of a kops cluster on GCE: its managed instance groups, found by the metadata kops
 * writes into their (immutable) instance templates, with target size, current template and members
 * (each with the template it runs). kops creates one zonal MIG per instance group and zone, so one
 * instance group may appear as several cloud groups.
 */

import { type Logger, silentLogger } from '../../log.ts';
import { mapConcurrent } from '../concurrency.ts';
import { instanceGroupNameProblem } from '../instance-group-name.ts';
import type { CloudGroup, CloudGroupMember, CloudGroups, InstanceState } from '../types.ts';
import {
  type ComputeClient,
  type GceInstanceGroupManager,
  type GceManagedInstance,
  lastComponent,
} from './compute.ts';
import { formatGceProviderID, parseTemplateUrl, parseZonalUrl } from './resource-names.ts';
import { TemplateGroups } from './template-groups.ts';

/** Options of {@link GceCloudGroups}. */
export interface GceCloudGroupsOptions {
  compute: ComputeClient;
  logger?: Logger;
  /** Parallel member listings at most (default 16). */
  concurrency?: number;
}

const memberState: Record<string, InstanceState> = {
  PROVISIONING: 'pending',
  STAGING: 'pending',
  RUNNING: 'running',
  STOPPING: 'stopping',
  STOPPED: 'stopped',
  SUSPENDED: 'stopped',
  TERMINATED: 'stopped',
};

/**
 * A template URL in one spelling (`projects/<p>/global/instanceTemplates/<name>`), so that the MIG's and
 * a member's compare whatever host or API version their URLs carry; an unparseable URL as it is.
 */
function templateKey(url: string | undefined): string | undefined {
  if (!url) return undefined;
  const ref = parseTemplateUrl(url);
  return ref ? `projects/${ref.project}/global/instanceTemplates/${ref.name}` : url;
}

/**
 * The template the MIG creates instances from, as kops compares members with it (gce GetCloudGroups:
 * the MIG's instanceTemplate). A MIG that names only versions is taken at its single version; with
 * several (a canary) there is no one current template, so none is known.
 */
function currentTemplate(mig: GceInstanceGroupManager): string | undefined {
  if (mig.instanceTemplate) return templateKey(mig.instanceTemplate);
  return mig.versions?.length === 1 ? templateKey(mig.versions[0]?.instanceTemplate) : undefined;
}

/** Lists a cluster's MIGs: one aggregated MIG listing, one member listing per MIG, templates cached. */
export class GceCloudGroups implements CloudGroups {
  readonly #compute: ComputeClient;
  readonly #templates: TemplateGroups;
  readonly #concurrency: number;
  readonly #logger: Logger;

  constructor(options: GceCloudGroupsOptions) {
    this.#compute = options.compute;
    this.#concurrency = options.concurrency ?? 16;
    this.#logger = options.logger ?? silentLogger;
    this.#templates = new TemplateGroups(options.compute, {
      concurrency: this.#concurrency,
      logger: this.#logger,
    });
  }

  /** The MIGs whose template names `clusterName` and an instance group, sorted by group then MIG name. */
  async list(clusterName: string): Promise<CloudGroup[]> {
    // The aggregated list holds regional MIGs too (scope `regions/<r>`, `region` and no `zone`). kops
    // creates and lists zonal MIGs only (one per instance group and zone), and a regional one has no
    // zonal member listing: it is left out, as kops leaves it out, instead of failing the listing.
    const all = await this.#compute.aggregatedListInstanceGroupManagers();
    const migs = all.filter((mig): mig is GceInstanceGroupManager & { zone: string } => {
      if (mig.zone) return true;
      this.#logger.debug(
        { mig: mig.name, region: mig.region },
        'skipping a regional MIG: kops creates zonal ones',
      );
      return false;
    });
    const templateOf = new Map<string, string>();
    for (const mig of migs) {
      const ref = parseTemplateUrl(mig.instanceTemplate ?? mig.versions?.[0]?.instanceTemplate ?? '');
      if (ref && ref.project === this.#compute.project) templateOf.set(mig.selfLink, ref.name);
    }
    const facts = await this.#templates.facts([...templateOf.values()]);
    const ours = migs.flatMap((mig) => {
      const template = facts.get(templateOf.get(mig.selfLink) ?? '');
      if (!template) return [];
      // An unreadable template must fail the listing, or validation would silently miss a group.
      if (template instanceof Error) throw template;
      if (template.clusterName !== clusterName || !template.instanceGroup) return [];
      // A group name kops never writes names no instance group (see instance-group-name.ts).
      const nameProblem = instanceGroupNameProblem(template.instanceGroup);
      if (nameProblem) {
        this.#logger.warn(
          { mig: mig.name },
          `the MIG's template: its group metadata ${nameProblem}; skipped`,
        );
        return [];
      }
      return [{ mig, instanceGroup: template.instanceGroup }];
    });

    const groups = await mapConcurrent(ours, this.#concurrency, async ({ mig, instanceGroup }) => {
      const zone = lastComponent(mig.zone);
      const members = await this.#compute.listManagedInstances(zone, mig.name);
      const template = currentTemplate(mig);
      return {
        instanceGroup,
        cloudName: mig.name,
        // A MIG has only a target size; min and max belong to an autoscaler kops does not create.
        minSize: mig.targetSize,
        maxSize: mig.targetSize,
        targetSize: mig.targetSize,
        ...(template ? { template } : {}),
        members: members.flatMap((m) => this.#member(m)),
      };
    });
    this.#logger.debug({ cluster: clusterName, migs: groups.length }, 'listed GCE cloud groups');
    return groups.sort(
      (a, b) => a.instanceGroup.localeCompare(b.instanceGroup) || a.cloudName.localeCompare(b.cloudName),
    );
  }

  #member(member: GceManagedInstance): CloudGroupMember[] {
    const ref = parseZonalUrl(member.instance);
    if (!ref) return [];
    const state =
      memberState[member.instanceStatus ?? ''] ??
      (member.currentAction === 'CREATING' ? 'pending' : 'unknown');
    const template = templateKey(member.version?.instanceTemplate);
    return [
      {
        instanceId: ref.name,
        providerID: formatGceProviderID({ project: ref.project, zone: ref.zone, name: ref.name }),
        state,
        // NONE is the MIG's steady state; any other action means the member is being changed or replaced.
        healthy: member.currentAction === 'NONE' && member.instanceStatus === 'RUNNING',
        ...(template ? { template } : {}),
      },
    ];
  }
}
