/**
 * Benchmark: does a node get through an API-server 503 storm? A real bootstrap server with the real
 * `aws` and `gce` policies in front of the simulated API server and clouds
 * (src/testing/bootstrap-harness.ts); the API server answers 503 to every request (`--scope all`, the
 * default; an EC2 instance joins) or only to the replay-marker writes (`--scope replay-marker`; a GCE
 * instance joins, since an AWS proof covers its body and writes no marker) for `--storm` seconds
 * (default 30), while the real `join`, with its default retry settings, asks from the storm's first
 * second. Prints each answer the node was
 * given and when, whether and when the join succeeded (from the storm's start and after its end),
 * and how many requests the server answered 503, by dependency.
 *
 *   node bench/join-dependency-storm.ts [--storm SECONDS] [--scope all|replay-marker] [--timeout SECONDS]
 */
import { parseArgs } from 'node:util';
import { type BootstrapHarness, startBootstrapHarness } from '../src/testing/bootstrap-harness.ts';

/** What a storm run measured. */
export interface StormResult {
  stormSeconds: number;
  scope: 'all' | 'replay-marker';
  joined: boolean;
  /** Seconds from the storm's start to the join's success or failure. */
  finishedAfterSeconds: number;
  /** Why the join failed, when it did. */
  error?: string;
  /** The node's progress lines, with seconds since the storm started. */
  progress: { atSeconds: number; line: string }[];
  /** Requests the server answered 503, by dependency. */
  dependencyFailures: Record<string, number>;
}

async function dependencyFailures(harness: BootstrapHarness): Promise<Record<string, number>> {
  const metric = await harness.registry
    .getSingleMetric('kops_controller_bootstrap_dependency_failures_total')
    ?.get();
  return Object.fromEntries((metric?.values ?? []).map((v) => [String(v.labels['dependency']), v.value]));
}

/** Runs one storm against one joining node. */
export async function runStorm(options: {
  stormSeconds: number;
  scope?: 'all' | 'replay-marker';
  timeoutSeconds?: number;
}): Promise<StormResult> {
  const scope = options.scope ?? 'all';
  const harness = await startBootstrapHarness();
  try {
    const node = scope === 'replay-marker' ? harness.addGceNode() : harness.addNode();
    const progress: StormResult['progress'] = [];
    const started = performance.now();
    const since = () => Math.round(performance.now() - started) / 1000;
    harness.api.faults.errors({
      rate: 1,
      status: 503,
      ...(scope === 'replay-marker' ? { resource: 'configmaps', verbs: ['create'] } : {}),
    });
    const stormEnds = setTimeout(() => harness.api.faults.reset(), options.stormSeconds * 1000);
    let error: string | undefined;
    try {
      await harness.join(node, {
        timeoutMs: (options.timeoutSeconds ?? 3600) * 1000,
        progress: (line) => progress.push({ atSeconds: since(), line }),
      });
    } catch (err) {
      error = (err as Error).message;
    } finally {
      clearTimeout(stormEnds);
      harness.api.faults.reset();
    }
    const finishedAfterSeconds = since();
    return {
      stormSeconds: options.stormSeconds,
      scope,
      joined: error === undefined,
      finishedAfterSeconds,
      ...(error === undefined ? {} : { error }),
      progress,
      dependencyFailures: await dependencyFailures(harness),
    };
  } finally {
    await harness.close();
  }
}

/** The report printed for a run. */
export function formatStorm(result: StormResult): string {
  const lines = [
    `API-server 503 storm: ${result.stormSeconds} s, on ${result.scope === 'all' ? 'every request' : 'the replay-marker writes'}; the join starts with it`,
    ...result.progress.map((p) => `  ${p.atSeconds.toFixed(1).padStart(6)} s  ${p.line}`),
    result.joined
      ? `joined: yes, ${result.finishedAfterSeconds.toFixed(1)} s after the storm began (${(result.finishedAfterSeconds - result.stormSeconds).toFixed(1)} s after it ended)`
      : `joined: NO, gave up after ${result.finishedAfterSeconds.toFixed(1)} s: ${result.error}`,
    `answered 503 by dependency: ${JSON.stringify(result.dependencyFailures)}`,
  ];
  return lines.join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      storm: { type: 'string', default: '30' },
      scope: { type: 'string', default: 'all' },
      timeout: { type: 'string', default: '3600' },
    },
  });
  const scope = values.scope === 'replay-marker' ? 'replay-marker' : 'all';
  const result = await runStorm({
    stormSeconds: Number(values.storm),
    scope,
    timeoutSeconds: Number(values.timeout),
  });
  process.stdout.write(`${formatStorm(result)}\n`);
  process.exitCode = result.joined ? 0 : 1;
}
