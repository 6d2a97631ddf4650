/**
 * Benchmark: certificates issued per second in process, for an ECDSA P-256 and an RSA-2048 CA key,
 * beside the raw `crypto.sign` rate of the same key over data of a certificate's size in the same
 * run. The ratio (issuance / raw signing) shows what the issuance work around the signature costs;
 * p50 / p99 are per-issuance latencies. Each issuance is a full kubelet client certificate for a
 * fresh node name from a bare P-256 public key (what kops' bootstrap protocol sends).
 *
 *   node bench/issue.ts [--iterations N]
 */
import { sign } from 'node:crypto';
import { parseArgs } from 'node:util';
import { createCa } from '../src/pki/ca.ts';
import { generateKey } from '../src/pki/keys.ts';
import { issueCertificate, publicKeyRequest } from '../src/pki/profiles.ts';

/** CA key types measured. */
export const benchAlgorithms = ['ecdsa-p256', 'rsa-2048'] as const;

/** The figures for one CA key type. */
export interface IssueFigures {
  algorithm: (typeof benchAlgorithms)[number];
  iterations: number;
  issuedPerSecond: number;
  signsPerSecond: number;
  /** issuedPerSecond / signsPerSecond. */
  ratio: number;
  p50Micros: number;
  p99Micros: number;
  /** Size of one issued certificate (DER), the size signed in the raw baseline. */
  certificateBytes: number;
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

/** Measures one CA key type over `iterations` issuances and as many raw signatures. */
export function benchIssue(algorithm: IssueFigures['algorithm'], iterations: number): IssueFigures {
  const ca = createCa({ algorithm });
  const request = publicKeyRequest(generateKey('ecdsa-p256'));
  const issue = (i: number) => issueCertificate(ca, 'kubelet', request, { name: `node-${i}` });
  const sample = issue(0);
  const tbsSized = sample.der.subarray(0, sample.der.length - 80);
  const warmup = Math.min(200, iterations);
  for (let i = 0; i < warmup; i++) {
    issue(i);
    sign(ca.signer.scheme.hash, tbsSized, ca.signer.key);
  }

  // Issuance and raw signing alternate in small blocks, so that load from elsewhere on the machine
  // slows both alike instead of skewing the ratio.
  const latencies: number[] = new Array(iterations);
  let issueNanos = 0n;
  let signNanos = 0n;
  const block = 50;
  for (let done = 0; done < iterations; done += block) {
    const end = Math.min(iterations, done + block);
    const issueStart = process.hrtime.bigint();
    for (let i = done; i < end; i++) {
      const started = process.hrtime.bigint();
      issue(i);
      latencies[i] = Number(process.hrtime.bigint() - started) / 1000;
    }
    const signStart = process.hrtime.bigint();
    issueNanos += signStart - issueStart;
    for (let i = done; i < end; i++) sign(ca.signer.scheme.hash, tbsSized, ca.signer.key);
    signNanos += process.hrtime.bigint() - signStart;
  }
  const issueSeconds = Number(issueNanos) / 1e9;
  const signSeconds = Number(signNanos) / 1e9;

  latencies.sort((a, b) => a - b);
  const issuedPerSecond = iterations / issueSeconds;
  const signsPerSecond = iterations / signSeconds;
  return {
    algorithm,
    iterations,
    issuedPerSecond,
    signsPerSecond,
    ratio: issuedPerSecond / signsPerSecond,
    p50Micros: percentile(latencies, 50),
    p99Micros: percentile(latencies, 99),
    certificateBytes: sample.der.length,
  };
}

/** The report the benchmark prints. */
export function formatIssueBench(results: readonly IssueFigures[]): string {
  const header = 'CA key       issued/s   crypto.sign/s   ratio   p50 µs   p99 µs   cert bytes';
  const rows = results.map(
    (r) =>
      `${r.algorithm.padEnd(12)} ${r.issuedPerSecond.toFixed(0).padStart(8)}   ${r.signsPerSecond.toFixed(0).padStart(13)}   ` +
      `${r.ratio.toFixed(2).padStart(5)}   ${r.p50Micros.toFixed(0).padStart(6)}   ${r.p99Micros.toFixed(0).padStart(6)}   ` +
      `${String(r.certificateBytes).padStart(10)}`,
  );
  return [
    `issue: kubelet client certificates, ${results[0]?.iterations ?? 0} per CA key type, in process`,
    header,
    ...rows,
  ].join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { iterations: { type: 'string', default: '5000' } } });
  const iterations = Number(values.iterations);
  if (!Number.isInteger(iterations) || iterations < 1) {
    throw new Error(`--iterations must be a positive integer, got ${values.iterations}`);
  }
  process.stdout.write(`${formatIssueBench(benchAlgorithms.map((a) => benchIssue(a, iterations)))}\n`);
}
