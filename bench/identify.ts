/**
 * Benchmark: identify N nodes (default 5,000) through the AWS simulator with the documented EC2
 * throttle on (bucket 100, refill 20/s), two ways in the same run:
 * - batched: this project's AwsNodeIdentifier, every node asked for separately (as Node events
 *   arrive) and coalesced into DescribeInstances calls of up to 1,000 ids;
 * - per-node: what kops-controller does, one DescribeInstances per node, one node at a time (its
 *   node reconciler runs a single worker).
 * Prints the cloud calls (served and throttled) and wall time of each and the ratios.
 *
 *   node bench/identify.ts [--nodes N]
 */
import { parseArgs } from 'node:util';
import { DescribeInstancesCommand, type EC2Client } from '@aws-sdk/client-ec2';
import { createAwsClients } from '../src/cloud/aws/clients.ts';
import { awsCallError } from '../src/cloud/aws/errors.ts';
import { AwsNodeIdentifier } from '../src/cloud/aws/identify.ts';
import { type InstanceIdentity, identityFromInstance } from '../src/cloud/aws/instance.ts';
import { parseAwsProviderID } from '../src/cloud/aws/providerid.ts';
import { isRetryable } from '../src/errors.ts';
import { awsProviderID, clusterInstances } from '../src/sim/aws/scenario.ts';
import { type AwsSimulator, startAwsSimulator } from '../src/sim/aws/server.ts';

const clusterName = 'bench.example.com';

/** Calls and time of one way of identifying the nodes. */
export interface PathFigures {
  /** DescribeInstances calls EC2 served. */
  calls: number;
  /** Calls EC2 refused with RequestLimitExceeded (the SDK retried them). */
  throttled: number;
  /** Nodes identified to the right instance group. */
  identified: number;
  wallMs: number;
}

/** The figures of a run. */
export interface IdentifyBenchResult {
  nodes: number;
  batched: PathFigures;
  perNode: PathFigures;
}

/**
 * kops' way of looking an instance up: its own DescribeInstances, checked as the batched path checks
 * it; a call still throttled after the SDK's retries is retried (the bench/join-storm per-node path
 * uses it too).
 */
export async function describeInstancePerNode(
  ec2: EC2Client,
  instanceId: string,
  cluster: string,
): Promise<InstanceIdentity> {
  for (;;) {
    try {
      const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
      const instance = out.Reservations?.[0]?.Instances?.[0];
      if (!instance) throw new Error(`missing instance id ${instanceId}`);
      return identityFromInstance(instance, cluster);
    } catch (err) {
      // Past the SDK's own retries, the node is requeued, as controller-runtime would.
      if (!isRetryable(awsCallError(err, 'ec2:DescribeInstances', 'ec2:DescribeInstances'))) throw err;
    }
  }
}

/** kops' node identification: one DescribeInstances per node. */
async function identifyPerNode(ec2: EC2Client, providerID: string): Promise<string> {
  const { instanceId } = parseAwsProviderID(providerID);
  return (await describeInstancePerNode(ec2, instanceId, clusterName)).instanceGroup;
}

async function measure(sim: AwsSimulator, run: () => Promise<number>): Promise<PathFigures> {
  sim.calls.reset();
  sim.throttling.bucket.reset();
  const started = performance.now();
  const identified = await run();
  return {
    calls: sim.calls.count('DescribeInstances'),
    throttled: sim.calls.throttled('DescribeInstances'),
    identified,
    wallMs: performance.now() - started,
  };
}

/** Runs both paths against one simulator seeded with `nodes` instances. */
export async function runIdentifyBench(nodes: number): Promise<IdentifyBenchResult> {
  const sim = await startAwsSimulator({ throttling: true });
  const clients = await createAwsClients({
    region: sim.region,
    endpoint: sim.endpoint,
    credentials: sim.credentials,
  });
  try {
    const instances = clusterInstances({ cluster: clusterName, instanceGroup: 'nodes', count: nodes });
    sim.ec2.addInstances(instances);
    const providerIDs = instances.map(awsProviderID);

    const batched = await measure(sim, async () => {
      const identifier = new AwsNodeIdentifier({ ec2: clients.ec2, clusterName });
      const results = await Promise.all(providerIDs.map((p) => identifier.identify([p])));
      return results.filter((r, i) => {
        const result = r.get(providerIDs[i] as string);
        return result?.ok && result.identity.instanceGroup === 'nodes';
      }).length;
    });

    const perNode = await measure(sim, async () => {
      let identified = 0;
      for (const providerID of providerIDs) {
        if ((await identifyPerNode(clients.ec2, providerID)) === 'nodes') identified++;
      }
      return identified;
    });
    return { nodes, batched, perNode };
  } finally {
    clients.destroy();
    await sim.close();
  }
}

/** The report the benchmark prints. */
export function formatIdentifyBench(result: IdentifyBenchResult): string {
  const row = (name: string, f: PathFigures) =>
    `${name.padEnd(9)} calls=${String(f.calls).padEnd(6)} throttled=${String(f.throttled).padEnd(6)} ` +
    `identified=${String(f.identified).padEnd(6)} wall=${(f.wallMs / 1000).toFixed(2)}s`;
  const callRatio = result.perNode.calls / Math.max(1, result.batched.calls);
  const timeRatio = result.perNode.wallMs / Math.max(1, result.batched.wallMs);
  return [
    `identify: ${result.nodes} nodes through the AWS simulator, EC2 throttling on (bucket 100, refill 20/s)`,
    row('batched', result.batched),
    row('per-node', result.perNode),
    `ratio     ${callRatio.toFixed(0)}x fewer calls, ${timeRatio.toFixed(1)}x less wall time (per-node / batched)`,
  ].join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { nodes: { type: 'string', default: '5000' } } });
  const nodes = Number(values.nodes);
  if (!Number.isInteger(nodes) || nodes < 1)
    throw new Error(`--nodes must be a positive integer, got ${values.nodes}`);
  process.stdout.write(`${formatIdentifyBench(await runIdentifyBench(nodes))}\n`);
}
