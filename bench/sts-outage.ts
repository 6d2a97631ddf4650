/**
 * Benchmark: what an outage costs STS when the joining nodes ignore Retry-After, as kops' nodeup
 * does (it retries every ~10 s whatever it is told). A real bootstrap server with the real `aws`
 * policy in front of the simulated API server and AWS (src/testing/bootstrap-harness.ts). `--nodes`
 * nodes post kops' `/bootstrap` every `--retry` seconds (each from a random start within the first
 * period) until they get their certificate. For `--outage` seconds, `--of` fails:
 *
 * - `sts` (default): STS answers 500 to every replay;
 * - `api-server`: the API server answers 503 to every request and the Node watch is cut, so the
 *   impersonation guard cannot read Nodes (each attempt would replay its proof to STS and then fail
 *   at the guard).
 *
 * Then it works again. Two designs run in the same process, one after the other:
 *
 * - **previous**: the failing dependency is called by every request (its circuit never opens);
 * - **paused**: the product's circuit (src/bootstrap/circuit-breaker.ts, its defaults), and for the
 *   API server the guard's pause asked before the policy.
 *
 * Prints, for each, the STS replays sent during the outage, the replays per second in its last half
 * (the steady state of a long outage), the attempts retried (not answered 200), and how long after the recovery
 * the last node got its certificate; then the ratio of the steady replay rates.
 *
 *   node bench/sts-outage.ts [--of sts|api-server] [--nodes N] [--outage SECONDS] [--retry SECONDS]
 */
import { parseArgs } from 'node:util';
import { Registry } from 'prom-client';
import { CircuitBreaker } from '../src/bootstrap/circuit-breaker.ts';
import { stsReplayCall } from '../src/bootstrap/policies/sts-client.ts';
import { cloudCallMetrics } from '../src/cloud/metrics.ts';
import { startBootstrapHarness } from '../src/testing/bootstrap-harness.ts';
import { cloudCallsMade } from '../src/testing/cloud-calls.ts';
import { nodeupBody, postNodeup } from '../src/testing/nodeup.ts';

/** What one design measured. */
export interface OutageResult {
  design: 'previous' | 'paused';
  /** Replays sent to STS while it failed, and in the outage's second half. */
  replaysDuringOutage: number;
  replaysInSecondHalf: number;
  /** Attempts not answered 200 (a 503, or a connection that failed), in all. */
  retried: number;
  /** Nodes that got their certificate, and seconds from STS's recovery to the last of them. */
  joined: number;
  lastJoinAfterRecoverySeconds: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What fails in the outage. */
export type OutageOf = 'sts' | 'api-server';

/** Options of {@link runOutage}. */
export interface OutageOptions {
  nodes: number;
  outageSeconds: number;
  retrySeconds: number;
  /** What fails (default `sts`). */
  of?: OutageOf;
  /** The paused design's circuit of what fails (default: the product's). */
  circuit?: CircuitBreaker;
}

/** A circuit that never opens: the previous design, which called the dependency on every request. */
const neverOpens = (name: string) => new CircuitBreaker({ name, failuresToOpen: Number.POSITIVE_INFINITY });

/** Runs one design. */
export async function runOutage(
  design: OutageResult['design'],
  options: OutageOptions,
): Promise<OutageResult> {
  const of = options.of ?? 'sts';
  const circuit = design === 'previous' ? neverOpens(of) : options.circuit;
  const calls = new Registry();
  const harness = await startBootstrapHarness({
    aws: { cloudCalls: cloudCallMetrics(calls), ...(of === 'sts' && circuit ? { circuit } : {}) },
    ...(of === 'api-server' && circuit ? { guardCircuit: circuit } : {}),
  });
  const replays = () => cloudCallsMade(calls, 'aws', stsReplayCall);
  try {
    // Each node posts from an address of its own in 127.0.0.0/8: the server caps connections per source.
    const nodes = Array.from({ length: options.nodes }, (_, i) => ({
      node: harness.addNode(),
      body: nodeupBody(),
      source: `127.0.${1 + Math.floor(i / 250)}.${1 + (i % 250)}`,
    }));
    if (of === 'sts')
      harness.aws.faults.add({ service: 'sts', error: { code: 'InternalFailure', status: 500 } });
    else {
      harness.api.faults.errors({ rate: 1, status: 503 });
      harness.api.faults.dropWatches({ resource: 'nodes' });
    }
    const started = performance.now();
    let recoveredAt = Number.POSITIVE_INFINITY;
    let retried = 0;
    const joinedAt: number[] = [];
    const periodMs = options.retrySeconds * 1000;
    const deadline = started + (options.outageSeconds + 10 * options.retrySeconds + 30) * 1000;
    const nodeup = async ({ node, body, source }: (typeof nodes)[number]) => {
      await sleep(Math.random() * periodMs);
      while (performance.now() < deadline) {
        const asked = performance.now();
        const authorization = await node.proof(Buffer.from(body));
        // A connection that fails is retried like a 503, as nodeup does.
        const reply = await postNodeup(
          harness.url,
          body,
          authorization ?? '',
          harness.caBundlePem,
          source,
        ).catch(() => ({ status: 0 }));
        if (reply.status === 200) {
          joinedAt.push(performance.now());
          return;
        }
        retried++;
        await sleep(Math.max(0, periodMs - (performance.now() - asked)));
      }
    };
    const running = Promise.all(nodes.map(nodeup));
    await sleep((options.outageSeconds * 1000) / 2);
    const atHalf = await replays();
    await sleep((options.outageSeconds * 1000) / 2);
    const atRecovery = await replays();
    harness.aws.faults.reset();
    harness.api.faults.reset();
    recoveredAt = performance.now();
    await running;
    return {
      design,
      replaysDuringOutage: atRecovery,
      replaysInSecondHalf: atRecovery - atHalf,
      retried,
      joined: joinedAt.length,
      lastJoinAfterRecoverySeconds: (Math.max(...joinedAt) - recoveredAt) / 1000,
    };
  } finally {
    await harness.close();
  }
}

/** The report of both designs. */
export function formatOutage(results: OutageResult[], options: OutageOptions): string {
  const half = options.outageSeconds / 2;
  const failing = options.of === 'api-server' ? 'the API server' : 'STS';
  const lines = [
    `${failing} outage: ${options.nodes} nodes posting /bootstrap every ${options.retrySeconds} s whatever they are told (as nodeup), ${failing} failing for ${options.outageSeconds} s; STS replays counted`,
    'design     replays in outage   replays/s, 2nd half   retries   joined   last join after recovery',
  ];
  for (const r of results) {
    lines.push(
      `${r.design.padEnd(10)} ${String(r.replaysDuringOutage).padStart(17)}   ${(r.replaysInSecondHalf / half).toFixed(2).padStart(19)}   ${String(r.retried).padStart(7)}   ${`${r.joined}/${options.nodes}`.padStart(6)}   ${r.lastJoinAfterRecoverySeconds.toFixed(1).padStart(6)} s`,
    );
  }
  const [previous, paused] = results;
  if (previous && paused) {
    const steady =
      paused.replaysInSecondHalf === 0
        ? `none once paused, against ${(previous.replaysInSecondHalf / half).toFixed(0)} a second`
        : `${(previous.replaysInSecondHalf / paused.replaysInSecondHalf).toFixed(0)}x fewer replays a second once paused`;
    const whole = previous.replaysDuringOutage / Math.max(1, paused.replaysDuringOutage);
    lines.push(`ratio      ${steady}; ${whole.toFixed(1)}x fewer over the whole outage`);
  }
  return lines.join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      of: { type: 'string', default: 'sts' },
      nodes: { type: 'string', default: '300' },
      outage: { type: 'string', default: '30' },
      retry: { type: 'string', default: '2' },
    },
  });
  if (values.of !== 'sts' && values.of !== 'api-server')
    throw new Error(`--of ${values.of}: sts or api-server`);
  const options: OutageOptions = {
    of: values.of,
    nodes: Number(values.nodes),
    outageSeconds: Number(values.outage),
    retrySeconds: Number(values.retry),
  };
  const results = [await runOutage('previous', options), await runOutage('paused', options)];
  process.stdout.write(`${formatOutage(results, options)}\n`);
  process.exitCode = results.every((r) => r.joined === options.nodes) ? 0 : 1;
}
