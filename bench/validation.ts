/**
 * Benchmark: one Prometheus scrape of the eight `kops_*` gauges on a cluster of N nodes (default
 * 5,000) and P pods (default 100,000, one critical kube-proxy per node among them), two ways in the
 * same run against the simulated API server:
 * - kops' exporter design (PR #10175): every scrape lists all Nodes and all pods from the API server,
 *   then validates;
 * - this controller's MetricsServer: Nodes and pods come from watches, so a scrape only validates
 *   the cached records.
 * The cloud's groups are the same in-memory list for both (kops also called the cloud per scrape;
 * leaving that out favours kops). Prints the wall time and API requests per scrape, and the ratio;
 * both must report the same gauge values.
 *
 *   node bench/validation.ts [--nodes N] [--pods P]
 */
import { parseArgs } from 'node:util';
import { CoreV1Api, type V1Node, type V1Pod } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import type { CloudGroup } from '../src/cloud/types.ts';
import { nodeInformer } from '../src/kube/shared-informer.ts';
import {
  type ValidationGauge,
  ValidationMetrics,
  validationGauges,
} from '../src/metrics/validation-metrics.ts';
import { type SimApiServer, startApiServer } from '../src/sim/apiserver/index.ts';
import type { InstanceGroup } from '../src/statestore/kops-types.ts';
import { nodeInfoOf, podInfoOf } from '../src/validation/validate-cluster.ts';
import { listAll } from '../src/validation-io/gather.ts';
import { samplePod } from './informer.ts';

/** Figures of one design. */
export interface ScrapeFigures {
  name: string;
  /** Median wall time of a scrape, in ms. */
  scrapeMs: number;
  /** API server requests one scrape made. */
  apiRequests: number;
  gauges: Record<ValidationGauge, number>;
}

export interface ValidationBenchResult {
  nodes: number;
  pods: number;
  kops: ScrapeFigures;
  ours: ScrapeFigures;
}

const instanceGroups = [
  {
    apiVersion: 'kops.k8s.io/v1alpha2',
    kind: 'InstanceGroup',
    metadata: { name: 'nodes' },
    spec: { role: 'Node' },
  },
] as InstanceGroup[];

function seed(sim: SimApiServer, nodes: number, pods: number): CloudGroup[] {
  const ids = Array.from({ length: nodes }, (_, i) => `i-${i.toString(16).padStart(17, '0')}`);
  for (const [i, id] of ids.entries()) {
    sim.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: id, labels: { 'kubernetes.io/hostname': id } },
      spec: { providerID: `aws:///us-test-1a/${id}` },
      // One node in a thousand is not Ready, so the gauges have something to count.
      status: { conditions: [{ type: 'Ready', status: i % 1000 === 7 ? 'False' : 'True' }] },
    });
    sim.store.create({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { namespace: 'kube-system', name: `kube-proxy-${id}`, labels: { 'k8s-app': 'kube-proxy' } },
      spec: {
        nodeName: id,
        priorityClassName: 'system-node-critical',
        containers: [{ name: 'kube-proxy', image: 'k' }],
      },
      status: { phase: i % 997 === 3 ? 'Pending' : 'Running' },
    });
  }
  for (let i = 0; i < 20; i++) {
    sim.store.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: `team-${i}` } });
  }
  for (let i = 0; i < pods - nodes; i++) sim.store.create(samplePod(i));
  for (const name of ['scheduler', 'controller-manager', 'etcd-0']) {
    sim.store.create({
      apiVersion: 'v1',
      kind: 'ComponentStatus',
      metadata: { name },
      conditions: [{ type: 'Healthy', status: 'True' }],
    });
  }
  return [
    {
      instanceGroup: 'nodes',
      cloudName: 'nodes.c',
      minSize: nodes,
      maxSize: nodes,
      targetSize: nodes,
      members: ids.map((id) => ({
        instanceId: id,
        providerID: `aws:///us-test-1a/${id}`,
        state: 'running',
        healthy: true,
      })),
    },
  ];
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

/** The gauge values in a scrape's text. */
function gaugesOf(text: string): Record<ValidationGauge, number> {
  return Object.fromEntries(
    [...text.matchAll(/^(kops_[a-zA-Z_]+)\{cluster_name="[^"]*"\} (\d+)$/gm)].map((m) => [
      m[1],
      Number(m[2]),
    ]),
  ) as Record<ValidationGauge, number>;
}

export async function runValidationBench(options: {
  nodes: number;
  pods: number;
  scrapes?: number;
}): Promise<ValidationBenchResult> {
  const scrapes = options.scrapes ?? 3;
  const sim = await startApiServer();
  try {
    const cloudGroups = seed(sim, options.nodes, options.pods);
    const kubeConfig = sim.kubeConfig();
    let requests = 0;
    // Counts the API requests a scrape makes (the sim's fault plan is consulted once per request).
    const plan = sim.faults.plan.bind(sim.faults);
    sim.faults.plan = (resource, verb) => {
      requests++;
      return plan(resource, verb);
    };
    const core = kubeConfig.makeApiClient(CoreV1Api);

    // kops' design: list everything on every scrape.
    const kopsTimes: number[] = [];
    let kopsGauges: Record<ValidationGauge, number> | undefined;
    let kopsRequests = 0;
    for (let i = 0; i < scrapes; i++) {
      const before = requests;
      const started = performance.now();
      const [nodes, pods, statuses] = await Promise.all([
        listAll<V1Node>(kubeConfig, '/api/v1/nodes'),
        listAll<V1Pod>(kubeConfig, '/api/v1/pods'),
        core.listComponentStatus(),
      ]);
      kopsGauges = validationGauges({
        instanceGroups,
        cloudGroups,
        nodes: nodes.map(nodeInfoOf),
        pods: pods.map(podInfoOf),
        components: statuses.items.map((c) => ({
          name: c.metadata?.name ?? '',
          healthy: (c.conditions ?? []).every((x) => x.status === 'True'),
        })),
      });
      kopsTimes.push(performance.now() - started);
      kopsRequests = requests - before;
    }

    // This controller: watches fill the caches once; a scrape reads them.
    const registry = new Registry();
    const metrics = new ValidationMetrics({
      clusterName: 'bench.example.com',
      kubeConfig,
      nodes: nodeInformer(kubeConfig),
      core,
      cloudGroups: { list: async () => cloudGroups },
      instanceGroups: async () => instanceGroups,
      registry,
    });
    const stop = new AbortController();
    const running = metrics.start(stop.signal);
    try {
      while (!metrics.snapshot()) await new Promise((resolve) => setTimeout(resolve, 50));
      const ourTimes: number[] = [];
      let text = '';
      let ourRequests = 0;
      for (let i = 0; i < scrapes; i++) {
        const before = requests;
        const started = performance.now();
        text = await registry.metrics();
        ourTimes.push(performance.now() - started);
        ourRequests = requests - before;
      }
      return {
        nodes: options.nodes,
        pods: options.pods,
        kops: {
          name: "kops' exporter: list on every scrape",
          scrapeMs: median(kopsTimes),
          apiRequests: kopsRequests,
          gauges: kopsGauges as Record<ValidationGauge, number>,
        },
        ours: {
          name: 'MetricsServer: counts kept from watch events',
          scrapeMs: median(ourTimes),
          apiRequests: ourRequests,
          gauges: gaugesOf(text),
        },
      };
    } finally {
      stop.abort();
      await running;
    }
  } finally {
    await sim.close();
  }
}

/** The gauges as JSON with sorted keys, so two results compare as text. */
function canonical(gauges: Record<string, number>): string {
  return JSON.stringify(Object.fromEntries(Object.entries(gauges).sort(([a], [b]) => a.localeCompare(b))));
}

export function formatValidationBench(result: ValidationBenchResult): string {
  const row = (f: ScrapeFigures) =>
    `${f.name.padEnd(44)} ${`${f.scrapeMs.toFixed(1)} ms`.padStart(11)} ${String(f.apiRequests).padStart(13)}`;
  return [
    `validation scrape: ${result.nodes} nodes, ${result.pods} pods (simulated API server over HTTPS; median of the scrapes)`,
    `${'design'.padEnd(44)} ${'per scrape'.padStart(11)} ${'API requests'.padStart(13)}`,
    row(result.kops),
    row(result.ours),
    `ratio  ${(result.kops.scrapeMs / result.ours.scrapeMs).toFixed(0)}x faster scrapes; gauges ${
      canonical(result.kops.gauges) === canonical(result.ours.gauges) ? 'identical' : 'DIFFER'
    }: ${canonical(result.ours.gauges)}`,
  ].join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: { nodes: { type: 'string', default: '5000' }, pods: { type: 'string', default: '100000' } },
  });
  const nodes = Number(values.nodes);
  const pods = Number(values.pods);
  if (!Number.isInteger(nodes) || nodes < 1 || !Number.isInteger(pods) || pods < nodes) {
    throw new Error('--nodes must be a positive integer and --pods at least --nodes');
  }
  process.stdout.write(`${formatValidationBench(await runValidationBench({ nodes, pods }))}\n`);
}
