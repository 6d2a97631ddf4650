/**
 * The join storm at scale: N nodes join through the real bootstrap server (its own process) under
 * the `aws` policy, EC2's documented throttle on (bucket 100, refill 20/s), a new TLS connection per
 * node, against the scale world's API server (so the server's node guard watches all its Nodes). The
 * batched design runs over every node; kops' per-node design (one DescribeInstances per node) runs in
 * the same run over a sample of K nodes, because over 50,000 it would take the bucket's
 * (N − 100) / 20 s, about 42 minutes: its wall time for N is projected from the sample
 * (the first 100 calls ride the bucket's burst, the rest go at the sample's rate). Built from
 * bench/join-storm's parts.
 */
import { signAwsStsProof } from '../../src/agent/aws-proof.ts';
import { bundlePem, createCa } from '../../src/pki/ca.ts';
import { privateKeyPem } from '../../src/pki/keys.ts';
import { type AwsSimulator, startAwsSimulator } from '../../src/sim/aws/server.ts';
import { measureStorm, type StormCheck } from '../join-storm/measure.ts';
import { stormNodes } from '../join-storm/nodes.ts';
import { type ServerMode, type ServerSpec, startServerProcess } from '../join-storm/server-process.ts';
import type { StormFigures, StormNode } from '../join-storm/types.ts';
import { bootstrapCertificate } from '../join-storm/verify.ts';

/** Instance ids the dev cluster's own Nodes take (its sample instance groups' instances). */
const devClusterIds = 16;

/** How many times a node sends its request at most (the first and its retries after a 503). */
const joinAttempts = 5;

/** EC2's non-mutating bucket: what the first calls of a storm ride before the refill rate binds. */
const ec2Burst = 100;

/** The two storms and the per-node design's projection to every node. */
export interface ScaleJoinFigures {
  batched: StormFigures;
  perNodeSample: StormFigures;
  /** The per-node design's wall time for all the batched storm's nodes, projected from its sample. */
  perNodeProjectedMs: number;
}

async function awsStorm(
  aws: AwsSimulator,
  spec: ServerSpec,
  nodes: readonly StormNode[],
  check: StormCheck,
  name: string,
  concurrency: number,
): Promise<StormFigures> {
  const server = await startServerProcess(spec);
  try {
    // Signed now: each proof is fresh and spent once.
    const requests = nodes.map((node) => ({
      path: '/v1/certificates',
      body: node.body,
      authorization: signAwsStsProof(node.body, node.credentials, aws.region, 1),
    }));
    aws.calls.reset();
    aws.throttling.bucket.reset();
    const figures = await measureStorm(
      name,
      server,
      requests,
      { ...check, nodes },
      {
        keepAlive: false,
        concurrency,
        // A node the server could not decide now (a dependency's 503) asks again, as `join` does.
        attempts: joinAttempts,
      },
    );
    return {
      ...figures,
      cloud: {
        describeInstances: aws.calls.count('DescribeInstances'),
        throttled: aws.calls.throttled('DescribeInstances'),
        sts: aws.calls.count('GetCallerIdentity'),
      },
    };
  } finally {
    await server.stop();
  }
}

/** Runs both storms; `kubeconfig` is the scale world's API server. */
export async function runScaleJoin(options: {
  kubeconfig: string;
  nodes: number;
  perNodeSample: number;
  concurrency: number;
  /**
   * In flight for the per-node design. Its rate is EC2's bucket's whatever this is; with thousands
   * in flight its lookups outwait their deadline in the SDK's throttle backoff (503s, not certificates).
   */
  perNodeConcurrency: number;
}): Promise<ScaleJoinFigures> {
  const aws = await startAwsSimulator({ throttling: true });
  try {
    const ca = createCa();
    const caPem = bundlePem(ca);
    // The storm's instance ids start at 1, as do the dev cluster's registered (Ready) Nodes, which
    // the impersonation guard rightly refuses: the first few are left out.
    const nodes = stormNodes(aws, options.nodes + devClusterIds).slice(devClusterIds);
    const check: StormCheck = { nodes, certificateOf: bootstrapCertificate, caPem };
    const spec = (mode: ServerMode): ServerSpec => ({
      mode,
      kubeconfig: options.kubeconfig,
      aws: { endpoint: aws.endpoint, region: aws.region, credentials: aws.credentials },
      ca: { cert: caPem, key: privateKeyPem(ca.signer.key) },
      // As bench/join-storm's aws storms: one serving process.
      workers: 1,
    });
    const batched = await awsStorm(
      aws,
      spec('aws-batched'),
      nodes,
      check,
      'aws, batched EC2 lookups',
      options.concurrency,
    );
    const sample = nodes.slice(0, Math.min(options.perNodeSample, nodes.length));
    const perNodeSample = await awsStorm(
      aws,
      spec('aws-per-node'),
      sample,
      check,
      `aws, per-node EC2 (kops'), ${sample.length} nodes`,
      options.perNodeConcurrency,
    );
    const rateBound = Math.max(1, sample.length - ec2Burst);
    const perNodeProjectedMs =
      sample.length >= nodes.length
        ? perNodeSample.wallMs
        : (perNodeSample.wallMs * Math.max(1, nodes.length - ec2Burst)) / rateBound;
    return { batched, perNodeSample, perNodeProjectedMs };
  } finally {
    await aws.close();
  }
}
