/**
 * Benchmark: the label storm (bench/label-storm.ts) on Azure, N nodes in five scale sets: batched,
 * this project's AzureNodeIdentifier answering from one paged VM listing and one paged interface
 * listing per scale set, with ARM's subscription read bucket on (250 reads, refilled at 25 per
 * second); per-node, kops' nodeidentity/azure, one scale-set VM GET per node, with the bucket off so
 * that it finishes — the least time the bucket would let it take is computed from its call count.
 *
 *   node bench/label-storm-azure.ts [--nodes N]
 */
import { AzureClient } from '../src/cloud/azure/client.ts';
import { AzureNodeIdentifier } from '../src/cloud/azure/node-identifier.ts';
import { parseAzureProviderID } from '../src/cloud/azure/resource-id.ts';
import { azureInstanceGroupTag } from '../src/cloud/azure/tags.ts';
import type { CloudCallRecorder } from '../src/cloud/metrics.ts';
import { armReadBucket } from '../src/sim/azure/arm.ts';
import { startAzureSimulator } from '../src/sim/azure/simulator.ts';
import { labelStormMain, type StormCloud, type StormResult } from './label-storm.ts';

const clusterName = 'bench.example.com';
const scaleSets = 5;

/** Counts the ARM requests a client sends (retries included) and those ARM throttled. */
function armCalls(): { recorder: CloudCallRecorder; total: number; throttled: number } {
  const counts = {
    total: 0,
    throttled: 0,
    recorder: {
      request: (_cloud, _call, result) => {
        counts.total++;
        if (result === 'throttled') counts.throttled++;
      },
      duration: () => undefined,
    } as CloudCallRecorder,
  };
  return counts;
}

/** The least seconds ARM's read bucket lets the per-node calls take. */
function perNodeSecondsAtArmLimit(result: StormResult): number {
  return Math.max(0, result.perNode.calls - armReadBucket.capacity) / armReadBucket.refillPerSecond;
}

/** Azure: scale sets `<group>.<cluster>` of VMs tagged with their instance group. */
export const azureStorm: StormCloud = {
  name: 'azure',
  through: `the Azure simulator in ${scaleSets} scale sets (ARM read bucket ${armReadBucket.capacity}, refill ${armReadBucket.refillPerSecond}/s)`,
  rateLimit: {
    batched: { requests: armReadBucket.capacity, windowSeconds: 10 },
    perNode: { requests: armReadBucket.capacity, windowSeconds: 10 },
  },
  notes: (result) => [
    `per-node needs at least ${perNodeSecondsAtArmLimit(result).toFixed(0)} s under ARM's read bucket`,
  ],
  start: async (nodes, rateLimited) => {
    const sim = await startAzureSimulator();
    if (!rateLimited) sim.setReadBucket(undefined);
    const groups = Array.from({ length: scaleSets }, (_, i) => ({
      name: `nodes-${i}`,
      count: Math.floor(nodes / scaleSets) + (i < nodes % scaleSets ? 1 : 0),
    }));
    const groupOf = new Map<string, string>();
    for (const [group, vms] of sim.world.seedKopsCluster(clusterName, groups))
      for (const vm of vms) groupOf.set(sim.world.providerID(vm), group);
    const counts = armCalls();
    const client = new AzureClient({
      subscriptionId: sim.world.subscriptionId,
      resourceGroup: sim.world.resourceGroup,
      credential: sim.credential,
      endpoint: sim.armEndpoint,
      caPem: sim.caPem,
      cloudCalls: counts.recorder,
    });
    return {
      providerIDs: [...groupOf.keys()],
      identifier: new AzureNodeIdentifier({ client, clusterName }),
      getOne: async (id) => (await client.getVm(parseAzureProviderID(id))).tags[azureInstanceGroupTag],
      groupOf: (id) => groupOf.get(id) ?? '',
      calls: () => ({ total: counts.total, throttled: counts.throttled }),
      close: () => sim.close(),
    };
  },
};

if (import.meta.main) await labelStormMain(azureStorm);
