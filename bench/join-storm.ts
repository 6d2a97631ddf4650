/**
 * Benchmark: N simulated nodes (default 5,000) join at once: every request is fired together, with a
 * bounded number in flight (default 256), over HTTPS to the real bootstrap server in its own process.
 * - The real `aws` policy (STS replay, replay guard in the API server, EC2 identity) with the AWS
 *   simulator's EC2 throttle on, each node over a new TLS connection of its own: once with this
 *   project's batched EC2 lookups, once with one DescribeInstances per node (kops' design;
 *   bench/identify.ts's lookup). Prints wall time, cloud calls, certificates per second, the ratios.
 * - The plain issuance rate under `insecure-always-approve`, over keep-alive connections and with a
 *   new TLS connection per node, beside `cfssl serve` (Debian golang-cfssl) signing the same CSRs
 *   with the same CA over TLS in the same run, and the ratios (targets: ≥ 1.3 certs/s, ≥ 1.5 cheaper per certificate). Those clients offer
 *   only classical key exchange: Debian's cfssl is built with Go 1.19, which has no ML-KEM, while
 *   this server (OpenSSL 3.5) prefers the hybrid X25519MLKEM768 whenever the client offers it. The
 *   same key exchange on both sides compares the servers; one more storm measures this server with
 *   the hybrid a current client negotiates. The group each storm negotiated is printed.
 * Node keys (ECDSA P-256), CSRs and STS proofs are made before the clock starts; every certificate
 * is verified against the CA afterwards. The clients and the simulators share this process, the
 * server (and cfssl) has its own, and the CPU time of each is printed, so a slow simulator or client
 * shows instead of hiding the server's cost; so is how busy our server's event loop was. The server
 * runs with deploy/openssl.cnf, as the image does.
 *
 * The parts are in bench/join-storm/: the server process (server-process.ts), the nodes (nodes.ts),
 * the clients (client.ts), one storm measured (measure.ts) and its certificates verified
 * (verify.ts), cfssl (cfssl.ts), the plain comparison (plain.ts), the run (run.ts), the report
 * (report.ts).
 *
 *   node bench/join-storm.ts [--nodes N] [--concurrency C] [--rounds R (default 3)] [--workers W (default: cores)] [--plain-only]
 */
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { formatJoinStorm } from './join-storm/report.ts';
import { runJoinStorm } from './join-storm/run.ts';

// What the smoke test (bench/join-storm.test.ts) drives.
export { formatJoinStorm, median } from './join-storm/report.ts';
export { runJoinStorm } from './join-storm/run.ts';
export type { StormFigures } from './join-storm/types.ts';

/** A positive integer option, or an error naming the flag. */
function positiveInteger(flag: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag} must be a positive integer, got ${value}`);
  return n;
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string', default: '5000' },
      concurrency: { type: 'string', default: '256' },
      'plain-only': { type: 'boolean', default: false },
      rounds: { type: 'string', default: '3' },
      workers: { type: 'string', default: String(availableParallelism()) },
    },
  });
  const nodes = positiveInteger('nodes', values.nodes);
  const rounds = positiveInteger('rounds', values.rounds);
  const concurrency = positiveInteger('concurrency', values.concurrency);
  const workers = positiveInteger('workers', values.workers);
  const result = await runJoinStorm({ nodes, concurrency, rounds, workers, plainOnly: values['plain-only'] });
  process.stdout.write(`${formatJoinStorm(result)}\n`);
}
