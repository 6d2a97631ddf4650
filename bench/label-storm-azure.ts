/**
 * Benchmark: a label storm of N nodes (default 5,000, in five scale sets) identified through the
 * Azure simulator, two ways in the same run:
 * - batched: this project's AzureNodeIdentifier, every node asked for separately (as Node events
 *   arrive), answered from one paged VM listing and one paged interface listing per scale set,
 *   with ARM's subscription read bucket on (250 reads, refilled at 25 per second);
 * - per-node: what kops' nodeidentity/azure does, one scale-set VM GET per node, one node at a time
 *   (its node reconciler runs a single worker). Run with the bucket off so that it finishes; the
 *   least time ARM's bucket would let it take is computed from its call count and printed apart.
 * Prints the ARM calls (and how many ARM throttled), the wall time and the ratios.
 *
 *   node bench/label-storm-azure.ts [--nodes N]
 */
import { parseArgs } from 'node:util';
import { AzureClient } from '../src/cloud/azure/client.ts';
import { AzureNodeIdentifier } from '../src/cloud/azure/node-identifier.ts';
import { parseAzureProviderID } from '../src/cloud/azure/resource-id.ts';
import { azureInstanceGroupTag } from '../src/cloud/azure/tags.ts';
import type { CloudCallRecorder } from '../src/cloud/metrics.ts';
import { armReadBucket } from '../src/sim/azure/arm.ts';
import { type AzureSimulator, startAzureSimulator } from '../src/sim/azure/simulator.ts';

const clusterName = 'bench.example.com';
const scaleSets = 5;

/** Calls and time of one way of identifying the nodes. */
export interface StormFigures {
  /** ARM requests sent (retries included). */
  calls: number;
  /** Requests ARM answered 429. */
  throttled: number;
  /** Nodes identified to their instance group. */
  identified: number;
  wallMs: number;
}

/** The figures of a run. */
export interface AzureStormResult {
  nodes: number;
  batched: StormFigures;
  perNode: StormFigures;
  /** The least seconds ARM's read bucket lets the per-node calls take. */
  perNodeMinSecondsAtArmLimit: number;
}

function counter(): { recorder: CloudCallRecorder; calls: number; throttled: number } {
  const counts = {
    calls: 0,
    throttled: 0,
    recorder: {
      request: (_cloud, _call, result) => {
        counts.calls++;
        if (result === 'throttled') counts.throttled++;
      },
      duration: () => undefined,
    } as CloudCallRecorder,
  };
  return counts;
}

function client(sim: AzureSimulator, recorder: CloudCallRecorder): AzureClient {
  return new AzureClient({
    subscriptionId: sim.world.subscriptionId,
    resourceGroup: sim.world.resourceGroup,
    credential: sim.credential,
    endpoint: sim.armEndpoint,
    caPem: sim.caPem,
    cloudCalls: recorder,
  });
}

/** Runs both paths against one simulated cluster of `nodes` nodes. */
export async function runAzureLabelStorm(nodes: number): Promise<AzureStormResult> {
  const sim = await startAzureSimulator();
  try {
    const groups = Array.from({ length: scaleSets }, (_, i) => ({
      name: `nodes-${i}`,
      count: Math.floor(nodes / scaleSets) + (i < nodes % scaleSets ? 1 : 0),
    }));
    const seeded = sim.world.seedKopsCluster(clusterName, groups);
    const expected = new Map<string, string>();
    for (const [group, vms] of seeded) for (const vm of vms) expected.set(sim.world.providerID(vm), group);
    const providerIDs = [...expected.keys()];

    const batchedCount = counter();
    const identifier = new AzureNodeIdentifier({ client: client(sim, batchedCount.recorder), clusterName });
    let started = performance.now();
    const results = await Promise.all(providerIDs.map((id) => identifier.identify([id])));
    const batched: StormFigures = {
      calls: batchedCount.calls,
      throttled: batchedCount.throttled,
      identified: results.filter((r, i) => {
        const result = r.get(providerIDs[i] as string);
        return result?.ok && result.identity.instanceGroup === expected.get(providerIDs[i] as string);
      }).length,
      wallMs: performance.now() - started,
    };

    // kops' path, unthrottled so that it ends; its time under ARM's bucket is computed below.
    sim.setReadBucket(undefined);
    const perNodeCount = counter();
    const kops = client(sim, perNodeCount.recorder);
    started = performance.now();
    let identified = 0;
    for (const id of providerIDs) {
      const vm = await kops.getVm(parseAzureProviderID(id));
      if (vm.tags[azureInstanceGroupTag] === expected.get(id)) identified++;
    }
    const perNode: StormFigures = {
      calls: perNodeCount.calls,
      throttled: perNodeCount.throttled,
      identified,
      wallMs: performance.now() - started,
    };
    const beyondBucket = Math.max(0, perNode.calls - armReadBucket.capacity);
    return {
      nodes,
      batched,
      perNode,
      perNodeMinSecondsAtArmLimit: beyondBucket / armReadBucket.refillPerSecond,
    };
  } finally {
    await sim.close();
  }
}

/** The report the benchmark prints. */
export function formatAzureLabelStorm(result: AzureStormResult): string {
  const row = (name: string, f: StormFigures) =>
    `${name.padEnd(9)} calls=${String(f.calls).padEnd(6)} throttled=${String(f.throttled).padEnd(6)} ` +
    `identified=${String(f.identified).padEnd(6)} wall=${(f.wallMs / 1000).toFixed(2)}s`;
  const callRatio = result.perNode.calls / Math.max(1, result.batched.calls);
  return [
    `label storm: ${result.nodes} nodes in ${scaleSets} scale sets through the Azure simulator; ARM read bucket ` +
      `${armReadBucket.capacity}, refill ${armReadBucket.refillPerSecond}/s (on for batched, off for per-node)`,
    row('batched', result.batched),
    row('per-node', result.perNode),
    `ratio     ${callRatio.toFixed(0)}x fewer ARM calls (per-node / batched); per-node needs at least ` +
      `${result.perNodeMinSecondsAtArmLimit.toFixed(0)} s under ARM's read bucket`,
  ].join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { nodes: { type: 'string', default: '5000' } } });
  const nodes = Number(values.nodes);
  if (!Number.isInteger(nodes) || nodes < 1)
    throw new Error(`--nodes must be a positive integer, got ${values.nodes}`);
  process.stdout.write(`${formatAzureLabelStorm(await runAzureLabelStorm(nodes))}\n`);
}
