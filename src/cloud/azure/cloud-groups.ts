/**
 * Azure cloud groups, as kops' GetCloudGroups builds them: the scale sets of the resource group
 * tagged `KubernetesCluster=<cluster>`, each an instance group (its `kops.k8s.io_instancegroup`
 * tag) whose size is the scale set's capacity (kops sets min = max = capacity) and whose members
 * are its VMs. A VM that does not run its scale set's latest model needs an update, as in kops.
 * A scale set whose group tag is no kops instance group name is skipped, and a VM the listing holds
 * twice with different records is left out of its group.
 */
import { type Logger, silentLogger } from '../../log.ts';
import { mapConcurrent } from '../concurrency.ts';
import { instanceGroupNameProblem } from '../instance-group-name.ts';
import type { CloudGroup, CloudGroups } from '../types.ts';
import { type AzureClient, vmsByInstanceId } from './client.ts';
import { formatAzureProviderID } from './resource-id.ts';
import { azureClusterTag, azureInstanceGroupTag } from './tags.ts';

/** Lists a cluster's scale sets and their VMs. */
export class AzureCloudGroups implements CloudGroups {
  readonly #client: Pick<AzureClient, 'listScaleSets' | 'listScaleSetVms'>;
  readonly #logger: Logger;

  constructor(options: { client: Pick<AzureClient, 'listScaleSets' | 'listScaleSetVms'>; logger?: Logger }) {
    this.#client = options.client;
    this.#logger = options.logger ?? silentLogger;
  }

  async list(clusterName: string): Promise<CloudGroup[]> {
    const sets = (await this.#client.listScaleSets()).filter((s) => s.tags[azureClusterTag] === clusterName);
    const groups = await mapConcurrent(sets, 4, async (set): Promise<CloudGroup | undefined> => {
      const instanceGroup = set.tags[azureInstanceGroupTag];
      if (!instanceGroup) {
        this.#logger.warn({ scaleSet: set.name }, `scale set has no ${azureInstanceGroupTag} tag; skipped`);
        return undefined;
      }
      const nameProblem = instanceGroupNameProblem(instanceGroup);
      if (nameProblem) {
        this.#logger.warn(
          { scaleSet: set.name },
          `scale set's ${azureInstanceGroupTag} tag ${nameProblem}; skipped`,
        );
        return undefined;
      }
      // The model a member runs is only known as "the latest" or "older"; that is all kops compares.
      const latest = `${set.name}:latest-model`;
      // A VM listed twice with different records is left out; identical repeats are one member.
      const vms = vmsByInstanceId(await this.#client.listScaleSetVms(set.name), this.#logger);
      const members = [...vms.values()]
        .flatMap((vm) => (vm instanceof Error ? [] : [vm]))
        .map((vm) => ({
          instanceId: vm.ref.name,
          providerID: formatAzureProviderID(vm.ref),
          state: vm.state,
          healthy: vm.state === 'running' || vm.state === 'pending',
          template: vm.latestModelApplied === false ? `${set.name}:older-model` : latest,
        }));
      return {
        instanceGroup,
        cloudName: set.name,
        minSize: set.capacity,
        maxSize: set.capacity,
        targetSize: set.capacity,
        template: latest,
        members,
      };
    });
    return groups.filter((g): g is CloudGroup => g !== undefined);
  }
}
