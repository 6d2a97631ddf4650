/** Every storm of the benchmark, against simulators, server processes and cfssl started here. */
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { signAwsStsProof } from '../../src/agent/aws-proof.ts';
import { bundlePem, type CertificateAuthority, createCa } from '../../src/pki/ca.ts';
import { privateKeyPem } from '../../src/pki/keys.ts';
import { startApiServer } from '../../src/sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../../src/sim/aws/server.ts';
import { startCfsslSigner } from './cfssl.ts';
import { warmUp } from './client.ts';
import { measureStorm, type StormCheck } from './measure.ts';
import { bootstrapBody, kubeletCsr, stormNodes } from './nodes.ts';
import { type PlainSigner, plainRounds } from './plain.ts';
import { type ServerMode, type ServerSpec, startServerProcess } from './server-process.ts';
import type { JoinStormOptions, JoinStormResult, StormFigures, StormNode } from './types.ts';
import { bootstrapCertificate } from './verify.ts';

/** What every storm of a run shares: the simulated AWS, the CA, the nodes and how a server process is started. */
interface Storms {
  aws: AwsSimulator;
  ca: CertificateAuthority;
  nodes: StormNode[];
  check: StormCheck;
  /** The server process of `mode`; the plain comparison's serves on `workers` processes. */
  spec(mode: ServerMode): ServerSpec;
  concurrency: number;
}

/** One aws storm: a server process with the `aws` policy, every node with a fresh STS proof. */
async function awsStorm(storms: Storms, mode: ServerMode, name: string): Promise<StormFigures> {
  const { aws, nodes, concurrency } = storms;
  const server = await startServerProcess(storms.spec(mode));
  try {
    // Signed now, not at generation time: each proof is fresh and spent once.
    const requests = nodes.map((node) => ({
      path: '/v1/certificates',
      body: node.body,
      authorization: signAwsStsProof(node.body, node.credentials, aws.region, 1),
    }));
    aws.calls.reset();
    aws.throttling.bucket.reset();
    const figures = await measureStorm(name, server, requests, storms.check, {
      keepAlive: false,
      concurrency,
    });
    const cloud = {
      describeInstances: aws.calls.count('DescribeInstances'),
      throttled: aws.calls.throttled('DescribeInstances'),
      sts: aws.calls.count('GetCallerIdentity'),
    };
    return { ...figures, cloud };
  } finally {
    await server.stop();
  }
}

/** The plain comparison: our server under `insecure-always-approve` and cfssl, warmed up, in rounds. */
async function plainComparison(
  storms: Storms,
  dir: string,
  rounds: number,
): Promise<Pick<JoinStormResult, 'plain' | 'cfssl'>> {
  const { ca, nodes, concurrency, check } = storms;
  const plainProbe = { path: '/v1/certificates', body: bootstrapBody(kubeletCsr('warm-up')) };
  const server = await startServerProcess(storms.spec('insecure-always-approve'));
  const started = await startCfsslSigner(ca, nodes, dir, concurrency).catch(async (err: Error) => {
    await server.stop();
    throw err;
  });
  try {
    await warmUp(server.url, plainProbe, check.caPem, { nodes: nodes.length, concurrency });
    const ours: PlainSigner = {
      name: 'ours',
      server,
      requests: nodes.map((node) => ({ path: '/v1/certificates', body: node.body })),
      check,
    };
    const theirs = 'signer' in started ? started.signer : undefined;
    const figures = await plainRounds(ours, theirs, rounds, concurrency);
    const cfssl = 'signer' in started ? { version: started.version, storms: figures.cfssl } : started;
    return { plain: figures.ours, cfssl };
  } finally {
    await server.stop();
    if ('signer' in started) await started.signer.server.stop();
  }
}

/** Runs every storm of the benchmark against simulators, server processes and cfssl started here. */
export async function runJoinStorm(options: JoinStormOptions): Promise<JoinStormResult> {
  const concurrency = options.concurrency ?? 256;
  const aws = await startAwsSimulator({ throttling: true });
  const api = await startApiServer();
  const dir = await mkdtemp(join(tmpdir(), 'join-storm-'));
  try {
    const ca = createCa();
    const caPem = bundlePem(ca);
    const nodes = stormNodes(aws, options.nodes);
    const storms: Storms = {
      aws,
      ca,
      nodes,
      check: { nodes, certificateOf: bootstrapCertificate, caPem },
      spec: (mode) => ({
        mode,
        kubeconfig: api.kubeconfig(),
        aws: { endpoint: aws.endpoint, region: aws.region, credentials: aws.credentials },
        ca: { cert: caPem, key: privateKeyPem(ca.signer.key) },
        // The aws storms compare EC2 designs on one process (one batcher); the plain comparison, on
        // every core as cfssl, serves on the workers.
        workers: mode === 'insecure-always-approve' ? (options.workers ?? availableParallelism()) : 1,
      }),
      concurrency,
    };
    let awsStorms: JoinStormResult['aws'];
    if (!options.plainOnly) {
      const batched = await awsStorm(storms, 'aws-batched', 'aws, batched EC2 lookups');
      awsStorms = { batched, perNode: await awsStorm(storms, 'aws-per-node', "aws, per-node EC2 (kops')") };
    }
    const { plain, cfssl } = await plainComparison(storms, dir, options.rounds ?? 1);
    return { nodes: options.nodes, concurrency, aws: awsStorms, plain, cfssl };
  } finally {
    await api.close();
    await aws.close();
    await rm(dir, { recursive: true, force: true });
  }
}
