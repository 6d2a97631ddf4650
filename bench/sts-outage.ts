/**
 * Benchmark: what an STS outage costs STS when the joining nodes ignore Retry-After, as kops' nodeup
 * does (it retries every ~10 s whatever it is told). A real bootstrap server with the real `aws`
 * policy in front of the simulated API server and AWS (src/testing/bootstrap-harness.ts). `--nodes`
 * nodes post kops' `/bootstrap` every `--retry` seconds (each from a random start within the first
 * period) until they get their certificate. STS answers 500 to every replay for `--outage` seconds,
 * then works again. Two designs run in the same process, one after the other:
 *
 * - **previous**: every request replays its proof to STS (a breaker that never opens);
 * - **paused**: the product's STS circuit (src/bootstrap/circuit-breaker.ts, its defaults).
 *
 * Prints, for each, the replays sent during the outage, the replays per second in its last half
 * (the steady state of a long outage), the requests answered 503, and how long after STS recovered
 * the last node got its certificate; then the ratio of the steady replay rates.
 *
 *   node bench/sts-outage.ts [--nodes N] [--outage SECONDS] [--retry SECONDS]
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
  /** Requests answered 503 in all. */
  retried: number;
  /** Nodes that got their certificate, and seconds from STS's recovery to the last of them. */
  joined: number;
  lastJoinAfterRecoverySeconds: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs one design. */
export async function runOutage(
  design: OutageResult['design'],
  options: {
    nodes: number;
    outageSeconds: number;
    retrySeconds: number;
    /** The paused design's circuit (default: the product's, as the aws policy makes it). */
    circuit?: CircuitBreaker;
  },
): Promise<OutageResult> {
  const calls = new Registry();
  const harness = await startBootstrapHarness({
    aws: {
      cloudCalls: cloudCallMetrics(calls),
      ...(design === 'previous'
        ? { circuit: new CircuitBreaker({ name: 'STS', failuresToOpen: Number.POSITIVE_INFINITY }) }
        : options.circuit
          ? { circuit: options.circuit }
          : {}),
    },
  });
  const replays = () => cloudCallsMade(calls, 'aws', stsReplayCall);
  try {
    // Each node posts from an address of its own in 127.0.0.0/8: the server caps connections per source.
    const nodes = Array.from({ length: options.nodes }, (_, i) => ({
      node: harness.addNode(),
      body: nodeupBody(),
      source: `127.0.${1 + Math.floor(i / 250)}.${1 + (i % 250)}`,
    }));
    harness.aws.faults.add({ service: 'sts', error: { code: 'InternalFailure', status: 500 } });
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
export function formatOutage(
  results: OutageResult[],
  options: { nodes: number; outageSeconds: number; retrySeconds: number },
): string {
  const half = options.outageSeconds / 2;
  const lines = [
    `STS outage: ${options.nodes} nodes posting /bootstrap every ${options.retrySeconds} s whatever they are told (as nodeup), STS failing for ${options.outageSeconds} s`,
    'design     replays in outage   replays/s, 2nd half   503 answers   joined   last join after recovery',
  ];
  for (const r of results) {
    lines.push(
      `${r.design.padEnd(10)} ${String(r.replaysDuringOutage).padStart(17)}   ${(r.replaysInSecondHalf / half).toFixed(2).padStart(19)}   ${String(r.retried).padStart(11)}   ${`${r.joined}/${options.nodes}`.padStart(6)}   ${r.lastJoinAfterRecoverySeconds.toFixed(1).padStart(6)} s`,
    );
  }
  const [previous, paused] = results;
  if (previous && paused) {
    const ratio = previous.replaysInSecondHalf / Math.max(1, paused.replaysInSecondHalf);
    lines.push(
      `ratio      ${ratio.toFixed(0)}x fewer replays a second once paused; ${(previous.replaysDuringOutage / Math.max(1, paused.replaysDuringOutage)).toFixed(1)}x fewer over the whole outage`,
    );
  }
  return lines.join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string', default: '300' },
      outage: { type: 'string', default: '30' },
      retry: { type: 'string', default: '2' },
    },
  });
  const options = {
    nodes: Number(values.nodes),
    outageSeconds: Number(values.outage),
    retrySeconds: Number(values.retry),
  };
  const results = [await runOutage('previous', options), await runOutage('paused', options)];
  process.stdout.write(`${formatOutage(results, options)}\n`);
  process.exitCode = results.every((r) => r.joined === options.nodes) ? 0 : 1;
}
