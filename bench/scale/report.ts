/** The scale benchmark's report: every row with its figure, its target and figure / target. */
import { defaultPollIntervalMs } from '../../src/statestore/cluster-store.ts';
import type { ScaleResult, StartFigures } from './run.ts';

/** One row: what was measured, the figure, the target, and figure / target (≤ 1 meets an upper bound). */
interface Row {
  workload: string;
  figure: string;
  target: string;
  /** figure / target for an upper bound, target / figure for a lower one: ≤ 1.00 meets the target. */
  ratio: number | undefined;
  note?: string;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const mib = (n: number) => `${n.toFixed(0)} MiB`;

function startRows(name: string, f: StartFigures, nodes: number): Row[] {
  // The storm's own calls are the NodeController's lookups by id; the listings are the gauges' refresh
  // of the cluster's instances (every 60 s, storm or not), counted apart.
  const calls = f.cloud.describeById;
  return [
    {
      workload: `${name}: every Node reconciled`,
      figure: seconds(f.reconciledMs),
      target: '≤ 60 s',
      ratio: f.reconciledMs / 60_000,
      note: Object.entries(f.reconciles)
        .map(([result, n]) => `${result}=${n}`)
        .join(' '),
    },
    {
      workload: `${name}: cloud calls`,
      figure: `${calls} DescribeInstances`,
      target: '≤ 100',
      ratio: calls / 100,
      note: `by id; the gauges' listing ${f.cloud.describeListing} more; throttled=${f.cloud.throttled} all AWS calls=${f.cloud.all} for ${nodes} nodes`,
    },
  ];
}

/** The report printed by bench/scale-50k.ts. */
export function formatScale(r: ScaleResult): string {
  const { size } = r;
  const rows: Row[] = [
    {
      workload: 'informer sync (nodes, pods)',
      figure: seconds(r.first.syncMs),
      target: '-',
      ratio: undefined,
      note: `${size.apiNodes} nodes, ${size.apiPods} pods in pages of 500`,
    },
    {
      workload: 'controller RSS, cache synced',
      figure: mib(r.first.atSync.rssMiB),
      target: '≤ 1536 MiB',
      ratio: r.first.atSync.rssMiB / 1536,
      note: `at sync (heap ${mib(r.first.atSync.heapUsedMiB)}); after the storm ${mib(r.settled.rssMiB)} (heap after a full GC ${mib(r.settled.heapUsedMiB)})`,
    },
    {
      workload: 'scrape of /metrics, p50',
      figure: `${r.scrape.p50Ms.toFixed(2)} ms`,
      target: '≤ 20 ms',
      ratio: r.scrape.p50Ms / 20,
      note: `p99 ${r.scrape.p99Ms.toFixed(2)} ms over ${r.scrape.count} scrapes; ${r.scrape.apiRequests} API requests; kops_node_ready=${r.scrape.nodeReady}`,
    },
    ...startRows('label storm, first start (no Node labelled)', r.first, size.nodes),
    ...startRows('label storm after restart (all labelled)', r.restart, size.nodes),
    {
      workload: `IG edit → ${r.edit.nodes} nodes relabelled`,
      figure: seconds(r.edit.ms),
      target: '≤ 15 s',
      ratio: r.edit.ms / 15_000,
      note: `${r.edit.relabelled}/${r.edit.nodes}; from the state-store write; the first relabelled at ${seconds(r.edit.noticedMs)} (the controller polls every ${seconds(defaultPollIntervalMs)}, stateStore.pollInterval's default), the rest in ${seconds(r.edit.ms - r.edit.noticedMs)}`,
    },
  ];
  if (r.join) {
    const { batched, perNodeSample, perNodeProjectedMs } = r.join;
    const speedup = perNodeProjectedMs / batched.wallMs;
    const calls = batched.cloud?.describeInstances ?? 0;
    rows.push(
      {
        workload: `join storm, ${batched.nodes} nodes, aws policy`,
        figure: `${speedup.toFixed(1)}x faster`,
        target: '≥ 20x',
        ratio: 20 / speedup,
        note: `batched ${seconds(batched.wallMs)} (${batched.verified}/${batched.nodes} verified, ${batched.retries ?? 0} retries after a 503, ${((batched.serverCpuSeconds * 1000) / batched.verified).toFixed(2)} ms server CPU/cert); per-node ${seconds(perNodeSample.wallMs)} for ${perNodeSample.nodes} (${perNodeSample.verified} verified, ${perNodeSample.retries ?? 0} retries), projected ${seconds(perNodeProjectedMs)} for ${batched.nodes}${
          batched.firstFailure ? `; first failure: ${batched.firstFailure}` : ''
        }`,
      },
      {
        workload: 'join storm: EC2 calls',
        figure: `${calls} DescribeInstances`,
        target: '≤ 100',
        ratio: calls / 100,
        note: `throttled=${batched.cloud?.throttled ?? 0} STS=${batched.cloud?.sts ?? 0}; per-node sample ${perNodeSample.cloud?.describeInstances ?? 0} calls`,
      },
    );
  }
  const width = Math.max(...rows.map((row) => row.workload.length));
  const lines = rows.map(
    (row) =>
      `${row.workload.padEnd(width)}  ${row.figure.padStart(18)}  ${row.target.padStart(10)}  ${
        row.ratio === undefined ? '     -' : row.ratio.toFixed(2).padStart(6)
      }${row.note ? `  ${row.note}` : ''}`,
  );
  return [
    `scale: ${size.nodes} nodes (${size.groupNodes} in the edited instance group), ${size.pods} pods; ` +
      `world seeded in ${seconds(r.world.seedMs)}, its process ${mib(r.world.rssMiB)} RSS; ` +
      `${r.labelled.nodes}/${r.labelled.of} nodes labelled after the first start`,
    `${'workload'.padEnd(width)}  ${'figure'.padStart(18)}  ${'target'.padStart(10)}  ${'/target'.padStart(6)}  (≤ 1.00 meets it)`,
    ...lines,
  ].join('\n');
}
