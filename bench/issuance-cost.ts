/**
 * Benchmark: what one certificate costs the server in CPU, for plain issuance
 * (`insecure-always-approve`) and for the `aws` policy (STS replay, replay marker in the API server,
 * batched EC2 lookup, impersonation guard), over keep-alive connections and with a new TLS connection
 * per node. The figure is the server process's CPU time over the storm divided by the certificates
 * that verified; the difference between the two policies over the same kind of connection is what
 * the `aws` checks cost. The server runs in a process of its own (bench/join-storm's server process:
 * the real bootstrap server, deploy/openssl.cnf); the clients, the simulated API server and AWS (EC2
 * throttling on, its bucket refilled before each storm) share this process.
 *
 * The same storms also run against two floors (bench/tls-floor.ts) answering every request with one
 * of our real answers: a bare `node:https` server with the same TLS settings, serving certificate and
 * clients (what Node's TLS and HTTP cost), and the product's hardened server (src/net/hardened-server.ts)
 * with that answer as its handler. Hardened minus bare is what the hardened server costs; plain
 * issuance minus the hardened floor is the bootstrap handler's cost, signature and CSR check included.
 *
 * With `--baseline DIR` (another checkout of this repository whose node_modules resolves, e.g.
 * `git archive HEAD | tar -x -C /tmp/old && ln -s $PWD/node_modules /tmp/old/`), the same storms run
 * against that tree's server too, in the same run, alternating which tree goes first each round, so
 * that the machine's other load hits both alike; the report gives the medians side by side.
 *
 * Every server gets unmeasured warm-up storms first (V8 optimises the request path over the first
 * ten thousand or so requests; a controller serves for days). Each aws storm signs a fresh proof per
 * node just before it starts.
 *
 * The defaults are a storm as a large cluster sees one: 10,000 nodes, 1,000 in flight. Then a batch
 * of EC2 lookups fills to DescribeInstances' 1,000 ids and goes at once instead of waiting for the
 * call budget (with fewer in flight, every batch waits up to 3 s and the storm measures the server
 * idling through those waits), and each keep-alive connection carries ten joins, not one or two.
 *
 *   node bench/issuance-cost.ts [--nodes N (10000)] [--rounds R (3)] [--concurrency C (1000)] [--baseline DIR]
 */
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { signAwsStsProof } from '../src/agent/aws-proof.ts';
import { servingCertificate } from '../src/bootstrap/server.ts';
import { bundlePem, createCa } from '../src/pki/ca.ts';
import { privateKeyPem } from '../src/pki/keys.ts';
import { startApiServer } from '../src/sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../src/sim/aws/server.ts';
import { post } from './join-storm/client.ts';
import { measureStorm, type StormCheck } from './join-storm/measure.ts';
import { stormNodes } from './join-storm/nodes.ts';
import { median } from './join-storm/report.ts';
import type { ServerMode, ServerSpec } from './join-storm/server-process.ts';
import type { ServerProcess, StormFigures, StormNode, StormRequest } from './join-storm/types.ts';
import { bootstrapCertificate } from './join-storm/verify.ts';
import { floorAnswers, startFloorServer } from './tls-floor.ts';

/** The two approval paths measured. */
export const policies = ['plain', 'aws'] as const;
export type Policy = (typeof policies)[number];
/** The two kinds of connection measured. */
export const connections = ['keep-alive', 'new-tls'] as const;
export type Connection = (typeof connections)[number];

const modeOf: Record<Policy, ServerMode> = { plain: 'insecure-always-approve', aws: 'aws-batched' };

/** What a storm measured: a bootstrap server approving by a policy, or the floor (bench/tls-floor.ts). */
export type Measured = Policy | 'floor';
/**
 * The floors' labels in the samples: the bare `node:https` server and src/net/hardened-server.ts
 * (this tree's), each measured once whatever the trees.
 */
export const floors = ['node:https', 'hardened-server'] as const;

/** One measured storm. */
export interface CostSample {
  tree: string;
  policy: Measured;
  connection: Connection;
  round: number;
  figures: StormFigures;
}

/** Options of {@link runIssuanceCost}. */
export interface IssuanceCostOptions {
  nodes: number;
  rounds: number;
  concurrency: number;
  /** Unmeasured keep-alive storms per server before the first measured one (default 4). */
  warmUpStorms?: number;
  /** Trees to measure, by label: this one (`this tree`) and, optionally, a baseline checkout. */
  trees: readonly { label: string; dir: string }[];
}

/** Starts a server process from `dir`'s copy of bench/join-storm/server-process.ts. */
type StartServer = (spec: ServerSpec) => Promise<ServerProcess>;

async function serverStarter(dir: string): Promise<StartServer> {
  const module = (await import(resolve(dir, 'bench/join-storm/server-process.ts'))) as {
    startServerProcess: StartServer;
  };
  return module.startServerProcess;
}

/** The storm's requests: for the aws policy each carries a proof signed now, spent by this storm. */
function requestsOf(policy: Policy, nodes: readonly StormNode[], aws: AwsSimulator): StormRequest[] {
  return nodes.map((node) => ({
    path: '/v1/certificates',
    body: node.body,
    ...(policy === 'aws'
      ? { authorization: signAwsStsProof(node.body, node.credentials, aws.region, 1) }
      : {}),
  }));
}

/** Runs the storms of every tree and policy, in rounds; the samples in the order they ran. */
export async function runIssuanceCost(options: IssuanceCostOptions): Promise<CostSample[]> {
  const aws = await startAwsSimulator({ throttling: true });
  const api = await startApiServer();
  const servers: { tree: string; policy: Measured; server: ServerProcess }[] = [];
  try {
    const ca = createCa();
    const caPem = bundlePem(ca);
    const nodes = stormNodes(aws, options.nodes);
    const check: StormCheck = { nodes, certificateOf: bootstrapCertificate, caPem };
    const spec = (policy: Policy): ServerSpec => ({
      mode: modeOf[policy],
      kubeconfig: api.kubeconfig(),
      aws: { endpoint: aws.endpoint, region: aws.region, credentials: aws.credentials },
      ca: { cert: caPem, key: privateKeyPem(ca.signer.key) },
      // One serving process: CPU per certificate, not how many cores serve (bench/join-storm.ts).
      workers: 1,
    });
    let floorCheck: StormCheck | undefined;
    const storm = async (server: ServerProcess, policy: Measured, connection: Connection, name: string) => {
      aws.throttling.bucket.reset();
      aws.calls.reset();
      const requests = requestsOf(policy === 'aws' ? 'aws' : 'plain', nodes, aws);
      const figures = await measureStorm(
        name,
        server,
        requests,
        policy === 'floor' ? (floorCheck as StormCheck) : check,
        {
          keepAlive: connection === 'keep-alive',
          concurrency: options.concurrency,
        },
      );
      if (policy !== 'aws') return figures;
      const cloud = {
        describeInstances: aws.calls.count('DescribeInstances'),
        throttled: aws.calls.throttled('DescribeInstances'),
        sts: aws.calls.count('GetCallerIdentity'),
      };
      return { ...figures, cloud };
    };
    for (const { label, dir } of options.trees) {
      const start = await serverStarter(dir);
      for (const policy of policies) {
        const server = await start(spec(policy));
        servers.push({ tree: label, policy, server });
        for (let i = 0; i < (options.warmUpStorms ?? 4); i++) {
          await storm(server, policy, 'keep-alive', 'warm-up');
        }
        await storm(server, policy, 'new-tls', 'warm-up');
      }
    }
    // The floors answer every request with one real answer of plain issuance, byte for byte.
    const plain = servers.find((s) => s.policy === 'plain') as { server: ServerProcess };
    const answer = await post(
      plain.server.url,
      { path: '/v1/certificates', body: (nodes[0] as StormNode).body },
      { caPem },
      false,
    );
    if (answer.status !== 200)
      throw new Error(`no answer to serve from the floor: HTTP ${answer.status} ${answer.text}`);
    floorCheck = { ...check, verify: floorAnswers(answer.text) };
    const tls = servingCertificate(ca, { name: 'floor', ipAddresses: ['127.0.0.1'] });
    for (const tree of floors) {
      const floor = await startFloorServer({ tls, body: answer.text, hardened: tree === 'hardened-server' });
      servers.push({ tree, policy: 'floor', server: floor });
      for (let i = 0; i < (options.warmUpStorms ?? 4); i++)
        await storm(floor, 'floor', 'keep-alive', 'warm-up');
      await storm(floor, 'floor', 'new-tls', 'warm-up');
    }
    const samples: CostSample[] = [];
    for (let round = 1; round <= options.rounds; round++) {
      // Alternate which tree goes first, so neither always runs on the quieter machine.
      const order = round % 2 ? servers : [...servers].reverse();
      for (const connection of connections) {
        for (const { tree, policy, server } of order) {
          const figures = await storm(server, policy, connection, `${tree}, ${policy}, ${connection}`);
          samples.push({ tree, policy, connection, round, figures });
        }
      }
    }
    return samples;
  } finally {
    await Promise.all(servers.map(({ server }) => server.stop()));
    await api.close();
    await aws.close();
  }
}

/** Issue 18's target for the server's CPU per certificate in an aws storm, ms. */
export const awsTargetMs = 0.8;

/** Server CPU milliseconds per verified certificate. */
export function msPerCertificate(figures: StormFigures): number {
  return (figures.serverCpuSeconds * 1000) / Math.max(1, figures.verified);
}

/** The median ms/cert of the samples of one tree, policy and connection (NaN when none). */
function medianOf(samples: readonly CostSample[], tree: string, policy: Measured, connection: Connection) {
  return median(
    samples
      .filter((s) => s.tree === tree && s.policy === policy && s.connection === connection)
      .map((s) => msPerCertificate(s.figures)),
  );
}

/**
 * The report: a row per storm, then the medians per tree side by side, what the product's code costs
 * above the floor and what the aws checks add.
 */
export function formatIssuanceCost(samples: readonly CostSample[], options: IssuanceCostOptions): string {
  const trees = options.trees.map((t) => t.label);
  const lines = [
    `issuance-cost: ${options.nodes} nodes a storm, ${options.concurrency} in flight, ${options.rounds} rounds; ` +
      'server CPU per verified certificate (ms), server in its own process',
    `${'storm'.padEnd(40)} ${'round'.padStart(5)} ${'verified'.padStart(11)} ${'wall'.padStart(7)} ${'ms/cert'.padStart(8)}`,
  ];
  for (const s of samples) {
    const f = s.figures;
    let line =
      `${f.name.padEnd(40)} ${String(s.round).padStart(5)} ${`${f.verified}/${f.nodes}`.padStart(11)} ` +
      `${`${(f.wallMs / 1000).toFixed(2)}s`.padStart(7)} ${msPerCertificate(f).toFixed(3).padStart(8)}`;
    if (f.cloud) {
      line += `  DescribeInstances=${f.cloud.describeInstances} throttled=${f.cloud.throttled} STS=${f.cloud.sts}`;
    }
    if (f.firstFailure) line += `  first failure: ${f.firstFailure}`;
    lines.push(line);
  }
  lines.push(`${'medians (ms/cert)'.padEnd(32)}${trees.map((t) => t.padStart(14)).join('')}`);
  const row = (label: string, cell: (tree: string) => number) =>
    lines.push(`${label.padEnd(32)}${trees.map((t) => cell(t).toFixed(3).padStart(14)).join('')}`);
  for (const connection of connections) {
    const [bare, hardened] = floors.map((f) => medianOf(samples, f, 'floor', connection)) as [number, number];
    row(`floor node:https, ${connection}`, () => bare);
    row(`floor hardened, ${connection}`, () => hardened);
    row(`hardened − node:https, ${connection}`, () => hardened - bare);
    for (const policy of policies)
      row(`${policy}, ${connection}`, (t) => medianOf(samples, t, policy, connection));
    row(`plain − hardened, ${connection}`, (t) => medianOf(samples, t, 'plain', connection) - hardened);
    row(
      `aws − plain, ${connection}`,
      (t) => medianOf(samples, t, 'aws', connection) - medianOf(samples, t, 'plain', connection),
    );
  }
  // Figure / target, as bench/scale-50k.ts prints them: 1.00 or less meets it.
  const ofTarget = (c: Connection) => {
    const ms = medianOf(samples, trees[0] as string, 'aws', c);
    return `; ${c} ${ms.toFixed(3)} (/target ${(ms / awsTargetMs).toFixed(2)})`;
  };
  lines.push(`target: aws ≤ ${awsTargetMs} ms/cert (issue 18)${connections.map(ofTarget).join('')}`);
  if (trees.length === 2) {
    const [now, base] = trees as [string, string];
    for (const connection of connections) {
      const ratio = medianOf(samples, base, 'aws', connection) / medianOf(samples, now, 'aws', connection);
      lines.push(`ratio  ${base}/${now} aws ms/cert, ${connection}: ${ratio.toFixed(2)}`);
    }
  }
  return lines.join('\n');
}

/** A positive integer option, or an error naming the flag. */
function positiveInteger(flag: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag} must be a positive integer, got ${value}`);
  return n;
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string', default: '10000' },
      rounds: { type: 'string', default: '3' },
      concurrency: { type: 'string', default: '1000' },
      baseline: { type: 'string' },
    },
  });
  const here = new URL('..', import.meta.url).pathname;
  const options: IssuanceCostOptions = {
    nodes: positiveInteger('nodes', values.nodes),
    rounds: positiveInteger('rounds', values.rounds),
    concurrency: positiveInteger('concurrency', values.concurrency),
    trees: [
      { label: 'this tree', dir: here },
      ...(values.baseline ? [{ label: 'baseline', dir: values.baseline }] : []),
    ],
  };
  const samples = await runIssuanceCost(options);
  process.stdout.write(`${formatIssuanceCost(samples, options)}\n`);
}
