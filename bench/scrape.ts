/**
 * Benchmark: the cost of one Prometheus scrape of the validation gauges (the eight `kops_*` gauges and
 * the per-instance-group ones) on a cluster of N nodes (default 5,000) and P pods (default 100,000),
 * two ways in the same run, from the same watch caches of the simulated API server:
 * - validate on scrape (the design before the counts were kept from events): every scrape validates
 *   all cached records from scratch and counts each group's nodes, then writes the exposition;
 * - kept counts: the informers' events keep the counts, so a scrape reads them and writes the
 *   exposition.
 * Prints p50/p99 per scrape, the API requests a scrape makes, the ratio, and whether both report the
 * same values; also what the kept counts cost elsewhere: recounting every node when the slow inputs
 * are refreshed (once a minute), and one watch event.
 *
 *   node bench/scrape.ts [--nodes N] [--pods P] [--scrapes S]
 */
import { parseArgs } from 'node:util';
import { CoreV1Api } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import type { CloudGroup } from '../src/cloud/types.ts';
import { nodeInformer } from '../src/kube/shared-informer.ts';
import { IncrementalValidation } from '../src/metrics/incremental-validation.ts';
import { type InstanceGroupHealth, instanceGroupHealth } from '../src/metrics/instance-group-health.ts';
import {
  type ValidationGauge,
  ValidationMetrics,
  type ValidationSnapshot,
  validationGauges,
} from '../src/metrics/validation-metrics.ts';
import { type SimApiServer, startApiServer } from '../src/sim/apiserver/index.ts';
import { type Cluster, type InstanceGroup, parseCluster } from '../src/statestore/kops-types.ts';
import { samplePod } from './informer.ts';

/** Figures of one design. */
export interface ScrapeDesignFigures {
  name: string;
  p50Ms: number;
  p99Ms: number;
  /** API server requests during all its scrapes. */
  apiRequests: number;
}

export interface ScrapeBenchResult {
  nodes: number;
  pods: number;
  scrapes: number;
  fromScratch: ScrapeDesignFigures;
  kept: ScrapeDesignFigures;
  /** The gauges both report, or undefined when they differ. */
  gauges: Record<ValidationGauge, number> | undefined;
  /** Recounting every cached node against new slow inputs (a refresh), in ms. */
  refreshMs: number;
  /** Applying one Node update event, in µs (median). */
  nodeEventUs: number;
}

const clusterName = 'scrape.example.com';
const controlPlaneNodes = 3;

const cluster: Cluster = parseCluster(`apiVersion: kops.k8s.io/v1alpha2
kind: Cluster
metadata:
  name: ${clusterName}
spec:
  kubernetesVersion: v1.32.0
`);

const instanceGroup = (name: string, role: InstanceGroup['spec']['role']) =>
  ({
    apiVersion: 'kops.k8s.io/v1alpha2',
    kind: 'InstanceGroup',
    metadata: { name },
    spec: { role },
  }) as InstanceGroup;
const instanceGroups = [instanceGroup('control-plane', 'ControlPlane'), instanceGroup('nodes', 'Node')];

const idOf = (i: number) => `i-${i.toString(16).padStart(17, '0')}`;

/**
 * Seeds the cluster: three control-plane nodes running their static pods, workers with a critical
 * kube-proxy each (one node in a thousand not Ready, one kube-proxy in 997 Pending), Deployment pods;
 * one worker in fifty runs an older launch template version.
 */
function seed(sim: SimApiServer, nodes: number, pods: number): CloudGroup[] {
  const members = (from: number, to: number) =>
    Array.from({ length: to - from }, (_, k) => {
      const id = idOf(from + k);
      return {
        instanceId: id,
        providerID: `aws:///us-test-1a/${id}`,
        state: 'running' as const,
        healthy: true,
        template: (from + k) % 50 === 9 ? 'lt-0abc:6' : 'lt-0abc:7',
      };
    });
  const create = sim.store.create.bind(sim.store);
  for (let i = 0; i < nodes; i++) {
    const id = idOf(i);
    const controlPlane = i < controlPlaneNodes;
    create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name: id,
        labels: {
          'kubernetes.io/hostname': id,
          'kops.k8s.io/instancegroup': controlPlane ? 'control-plane' : 'nodes',
          ...(controlPlane ? { 'node-role.kubernetes.io/control-plane': '' } : {}),
        },
      },
      spec: { providerID: `aws:///us-test-1a/${id}` },
      status: { conditions: [{ type: 'Ready', status: i % 1000 === 7 ? 'False' : 'True' }] },
    });
    const apps = controlPlane
      ? ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler']
      : ['kube-proxy'];
    for (const app of apps) {
      create({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { namespace: 'kube-system', name: `${app}-${id}`, labels: { 'k8s-app': app } },
        spec: {
          nodeName: id,
          priorityClassName: 'system-node-critical',
          containers: [{ name: app, image: 'k' }],
        },
        status: { phase: i % 997 === 3 ? 'Pending' : 'Running' },
      });
    }
  }
  for (let i = 0; i < 20; i++)
    create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: `team-${i}` } });
  const systemPods = nodes + 2 * controlPlaneNodes;
  for (let i = 0; i < pods - systemPods; i++) create(samplePod(i));
  for (const name of ['scheduler', 'controller-manager', 'etcd-0']) {
    create({
      apiVersion: 'v1',
      kind: 'ComponentStatus',
      metadata: { name },
      conditions: [{ type: 'Healthy', status: 'True' }],
    });
  }
  const group = (name: string, from: number, to: number): CloudGroup => ({
    instanceGroup: name,
    cloudName: `${name}.${clusterName}`,
    minSize: to - from,
    maxSize: to - from,
    targetSize: to - from,
    template: 'lt-0abc:7',
    members: members(from, to),
  });
  return [group('control-plane', 0, controlPlaneNodes), group('nodes', controlPlaneNodes, nodes)];
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] as number;
}

/** The eight gauges' values in a scrape's text. */
function gaugesOf(text: string): Record<string, number> {
  return Object.fromEntries(
    [...text.matchAll(/^(kops_[a-zA-Z_]+)\{cluster_name="[^"]*"\} (\d+)$/gm)].map((m) => [
      m[1],
      Number(m[2]),
    ]),
  );
}

/** The per-instance-group samples in a scrape's text, keyed `<gauge>/<group>[/<state>]`. */
function groupSamplesOf(text: string): Record<string, number> {
  return Object.fromEntries(
    [
      ...text.matchAll(
        /^kops_instance_group_(\w+)\{cluster_name="[^"]*",instance_group="([^"]+)"(?:,state="(\w+)")?\} (\d+)$/gm,
      ),
    ].map(([, gauge, group, state, value]) => [
      [gauge, group, state].filter(Boolean).join('/'),
      Number(value),
    ]),
  );
}

/** The same samples from a from-scratch count. */
function expectedGroupSamples(groups: InstanceGroupHealth[]): Record<string, number> {
  const samples: Record<string, number> = {};
  const put = (key: string, value: number | undefined) => {
    if (value !== undefined) samples[key] = value;
  };
  for (const g of groups) {
    put(`nodes/${g.instanceGroup}/ready`, g.ready);
    put(`nodes/${g.instanceGroup}/not_ready`, g.notReady);
    put(`nodes/${g.instanceGroup}/missing`, g.missing);
    put(`desired_nodes/${g.instanceGroup}`, g.desired);
    put(`nodes_label_drift/${g.instanceGroup}`, g.labelDrift);
    put(`nodes_needing_update/${g.instanceGroup}`, g.needingUpdate);
  }
  return samples;
}

const canonical = (values: object) => JSON.stringify(values, Object.keys(values).sort());

export async function runScrapeBench(options: {
  nodes: number;
  pods: number;
  scrapes?: number;
}): Promise<ScrapeBenchResult> {
  const scrapes = options.scrapes ?? 200;
  const sim = await startApiServer();
  try {
    const cloudGroups = seed(sim, options.nodes, options.pods);
    let requests = 0;
    // Counts API requests (the simulator consults its fault plan once per request).
    const plan = sim.faults.plan.bind(sim.faults);
    sim.faults.plan = (resource, verb) => {
      requests++;
      return plan(resource, verb);
    };
    const kubeConfig = sim.kubeConfig();
    const registry = new Registry();
    const metrics = new ValidationMetrics({
      clusterName,
      kubeConfig,
      nodes: nodeInformer(kubeConfig),
      core: kubeConfig.makeApiClient(CoreV1Api),
      cloudGroups: { list: async () => cloudGroups },
      instanceGroups: async () => instanceGroups,
      cluster: async () => cluster,
      registry,
    });
    const stop = new AbortController();
    const running = metrics.start(stop.signal);
    try {
      while (!metrics.snapshot() || !(await registry.metrics()).includes('kops_node_ready{')) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const snapshot = metrics.snapshot() as ValidationSnapshot;

      const time = async (n: number, scrape: () => Promise<unknown>) => {
        const before = requests;
        const times: number[] = [];
        for (let i = 0; i < n; i++) {
          const started = performance.now();
          await scrape();
          times.push(performance.now() - started);
        }
        return {
          p50Ms: percentile(times, 0.5),
          p99Ms: percentile(times, 0.99),
          apiRequests: requests - before,
        };
      };
      const fromScratch = await time(Math.max(5, Math.floor(scrapes / 4)), async () => {
        const now = metrics.snapshot() as ValidationSnapshot;
        validationGauges(now);
        instanceGroupHealth(now);
        return registry.metrics();
      });
      const kept = await time(scrapes, () => registry.metrics());

      const text = await registry.metrics();
      const expected = validationGauges(metrics.snapshot() as ValidationSnapshot);
      const same =
        canonical(gaugesOf(text)) === canonical(expected) &&
        canonical(groupSamplesOf(text)) ===
          canonical(expectedGroupSamples(instanceGroupHealth(metrics.snapshot() as ValidationSnapshot)));

      // What the kept counts cost instead: a refresh recounts every node; an event adjusts them.
      const incremental = new IncrementalValidation();
      incremental.setSlowInputs({ instanceGroups, cloudGroups, cluster });
      for (const node of snapshot.nodes) incremental.nodeChanged(undefined, node);
      for (const pod of snapshot.pods) incremental.podChanged(undefined, pod);
      const refreshStarted = performance.now();
      incremental.setSlowInputs({ instanceGroups, cloudGroups, cluster });
      const refreshMs = performance.now() - refreshStarted;
      const eventTimes: number[] = [];
      for (const node of snapshot.nodes.slice(0, 1000)) {
        const flipped = {
          ...node,
          readyStatus: node.readyStatus === 'True' ? ('False' as const) : ('True' as const),
        };
        const started = performance.now();
        incremental.nodeChanged(node, flipped);
        eventTimes.push((performance.now() - started) * 1000);
        incremental.nodeChanged(flipped, node);
      }

      return {
        nodes: options.nodes,
        pods: options.pods,
        scrapes,
        fromScratch: { name: 'validate on scrape (previous design)', ...fromScratch },
        kept: { name: 'counts kept from watch events', ...kept },
        gauges: same ? expected : undefined,
        refreshMs,
        nodeEventUs: percentile(eventTimes, 0.5),
      };
    } finally {
      stop.abort();
      await running;
    }
  } finally {
    await sim.close();
  }
}

export function formatScrapeBench(result: ScrapeBenchResult): string {
  const row = (f: ScrapeDesignFigures) =>
    `${f.name.padEnd(38)} ${`${f.p50Ms.toFixed(2)} ms`.padStart(10)} ${`${f.p99Ms.toFixed(2)} ms`.padStart(10)} ${String(f.apiRequests).padStart(13)}`;
  return [
    `validation scrape: ${result.nodes} nodes, ${result.pods} pods (simulated API server over HTTPS; same caches for both)`,
    `${'design'.padEnd(38)} ${'p50'.padStart(10)} ${'p99'.padStart(10)} ${'API requests'.padStart(13)}`,
    row(result.fromScratch),
    row(result.kept),
    `ratio  ${(result.fromScratch.p50Ms / result.kept.p50Ms).toFixed(0)}x faster scrapes (p50); values ${
      result.gauges ? `identical: ${canonical(result.gauges)}` : 'DIFFER'
    }`,
    `kept counts elsewhere: refresh recount ${result.refreshMs.toFixed(1)} ms (once a minute), one Node event ${result.nodeEventUs.toFixed(1)} µs (median)`,
  ].join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string', default: '5000' },
      pods: { type: 'string', default: '100000' },
      scrapes: { type: 'string', default: '200' },
    },
  });
  const nodes = Number(values.nodes);
  const pods = Number(values.pods);
  const scrapes = Number(values.scrapes);
  if (
    !Number.isInteger(nodes) ||
    nodes <= controlPlaneNodes ||
    !Number.isInteger(pods) ||
    pods < nodes + 2 * controlPlaneNodes
  ) {
    throw new Error(
      `--nodes must be an integer above ${controlPlaneNodes} and --pods at least --nodes + ${2 * controlPlaneNodes}`,
    );
  }
  if (!Number.isInteger(scrapes) || scrapes < 1) throw new Error('--scrapes must be a positive integer');
  process.stdout.write(`${formatScrapeBench(await runScrapeBench({ nodes, pods, scrapes }))}\n`);
}
