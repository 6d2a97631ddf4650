/**
 * A real bootstrap server on loopback in front of the simulated Kubernetes API and AWS, with the real
 * `aws` policy (STS replay, the replay marker written as a ConfigMap in the simulated API server, EC2
 * lookups) and the real impersonation guard and queue: what the fault tests and the 503-storm
 * benchmark drive. Faults are injected through `api.faults` and `aws.faults`; nodes join with the real
 * `join` and a proof signed with their instance profile session.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join as joinPath } from 'node:path';
import { CoreV1Api } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { signAwsStsProof } from '../agent/aws-proof.ts';
import { type JoinOptions, type JoinResult, join } from '../agent/join.ts';
import type { ProofProvider } from '../agent/proofs.ts';
import { type AwsPolicyOptions, awsPolicy } from '../bootstrap/policies/aws.ts';
import { ConfigMapReplayGuard } from '../bootstrap/replay-guard.ts';
import type { AuditRecord, BootstrapPolicy } from '../bootstrap/types.ts';
import { type RunningBootstrap, startBootstrapServer } from '../cli/bootstrap-server.ts';
import { type AwsClients, createAwsClients } from '../cloud/aws/clients.ts';
import { AwsNodeIdentifier } from '../cloud/aws/identify.ts';
import type { SigV4Credentials } from '../cloud/aws/sigv4.ts';
import { parseConfig } from '../config/loader.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';

/** Options of {@link startBootstrapHarness}. */
export interface BootstrapHarnessOptions {
  /** The approval chain around the `aws` policy (default: `[aws]`). */
  policies?: (aws: BootstrapPolicy) => BootstrapPolicy[];
  /** Overrides of the `aws` policy (e.g. a shorter `stsTimeoutMs`). */
  aws?: Partial<AwsPolicyOptions>;
  /** Deadline of each replay-marker call (default: the guard's own). */
  replayGuardTimeoutMs?: number;
  /** Attempts of each EC2 call, the SDK's retries included (default 2). */
  ec2MaxAttempts?: number;
}

/** A node of the simulated cluster: its instance id and its instance profile session. */
export interface HarnessNode {
  instanceId: string;
  credentials: SigV4Credentials;
  /** Signs a fresh `x-aws-sts-v2` proof for each attempt, as `join --cloud aws` does. */
  proof: ProofProvider;
}

/** A running harness. */
export interface BootstrapHarness {
  clusterName: string;
  api: SimApiServer;
  aws: AwsSimulator;
  bootstrap: RunningBootstrap;
  /** `https://127.0.0.1:<port>` of the bootstrap server. */
  url: string;
  /** The cluster CA bundle nodes trust. */
  caBundlePem: string;
  registry: Registry;
  /** Every audit record, in order. */
  audit: AuditRecord[];
  /** Adds a running instance of the cluster's `nodes` group. */
  addNode(): HarnessNode;
  /** Runs the real `join` for `node` into a fresh directory (removed afterwards). */
  join(node: HarnessNode, options?: Partial<JoinOptions>): Promise<JoinResult>;
  close(): Promise<void>;
}

const clusterName = 'faults.example.com';
const nodesRole = `nodes.${clusterName}`;

/** The real `aws` policy against the simulators: STS replay, the replay marker in the API server, EC2. */
function harnessAwsPolicy(
  api: SimApiServer,
  aws: AwsSimulator,
  ec2: AwsClients['ec2'],
  options: BootstrapHarnessOptions,
): BootstrapPolicy {
  const core = api.kubeConfig().makeApiClient(CoreV1Api);
  return awsPolicy({
    account: aws.account,
    partition: 'aws',
    region: aws.region,
    nodesRoles: [nodesRole],
    instances: new AwsNodeIdentifier({ ec2, clusterName, batchWindowMs: 1 }),
    replayGuard: new ConfigMapReplayGuard({
      core,
      kubeConfig: api.kubeConfig(),
      timeoutMs: options.replayGuardTimeoutMs,
    }),
    stsEndpoint: aws.endpoint,
    ...options.aws,
  });
}

/** Adds a running instance of the `nodes` group, the `nth` one, with its instance profile session. */
function addHarnessNode(aws: AwsSimulator, nth: number): HarnessNode {
  const instanceId = `i-${nth.toString(16).padStart(17, '0')}`;
  aws.ec2.addInstances([
    {
      id: instanceId,
      zone: `${aws.region}a`,
      cluster: clusterName,
      instanceGroup: 'nodes',
      privateIp: `10.0.${Math.floor(nth / 250)}.${(nth % 250) + 1}`,
    },
  ]);
  const credentials = aws.sts.addInstanceProfileSession(nodesRole, instanceId);
  return {
    instanceId,
    credentials,
    proof: async (body) => signAwsStsProof(body, credentials, aws.region, 2),
  };
}

/** Runs the real `join` for `node` into a fresh directory under `dir` (removed afterwards). */
async function joinHarnessNode(
  cluster: { url: string; caBundlePem: string; api: SimApiServer; dir: string },
  node: HarnessNode,
  joinOptions: Partial<JoinOptions>,
): Promise<JoinResult> {
  const nodeDir = await mkdtemp(joinPath(cluster.dir, 'node-'));
  try {
    return await join({
      server: cluster.url,
      // The simulated API server serves a certificate of its own CA: the node trusts both.
      caBundlePem: cluster.caBundlePem + cluster.api.caCertificate,
      apiServer: cluster.api.url,
      nodeName: node.instanceId,
      dir: nodeDir,
      proof: node.proof,
      ...joinOptions,
    });
  } finally {
    await rm(nodeDir, { recursive: true, force: true });
  }
}

/** Starts the simulators and the bootstrap server. */
export async function startBootstrapHarness(
  options: BootstrapHarnessOptions = {},
): Promise<BootstrapHarness> {
  const api = await startApiServer();
  const aws = await startAwsSimulator({ throttling: false });
  const clients = await createAwsClients({
    region: aws.region,
    endpoint: aws.endpoint,
    credentials: aws.credentials,
    maxAttempts: options.ec2MaxAttempts ?? 2,
  });
  const dir = await mkdtemp(joinPath(tmpdir(), 'bootstrap-harness-'));
  const ca = createCa();
  const registry = new Registry();
  const audit: AuditRecord[] = [];
  const aws_ = harnessAwsPolicy(api, aws, clients.ec2, options);
  let bootstrap: RunningBootstrap;
  try {
    // The expiry ledger in kube-public, the replay markers in kube-system: a fault aimed at the
    // markers' ConfigMaps is never spent on a ledger flush.
    const config = parseConfig({
      clusterName,
      cloud: 'aws',
      server: {},
      bootstrap: { replayNamespace: 'kube-public' },
    });
    bootstrap = await startBootstrapServer(config, {
      kubeConfig: api.kubeConfig(),
      policies: options.policies?.(aws_) ?? [aws_],
      ca,
      listen: '127.0.0.1:0',
      apiServer: api.url,
      serverNames: { ipAddresses: ['127.0.0.1'] },
      audit: (record) => audit.push(record),
      // Nodes retrying through a storm must not meet the per-address limit of the shared loopback.
      rateLimit: { burst: 10_000, ratePerSecond: 10_000 },
      registry,
    });
  } catch (err) {
    clients.destroy();
    await Promise.all([api.close(), aws.close(), rm(dir, { recursive: true, force: true })]);
    throw err;
  }
  const caBundlePem = bundlePem(ca);
  let nodes = 0;
  return {
    clusterName,
    api,
    aws,
    bootstrap,
    url: bootstrap.server.url,
    caBundlePem,
    registry,
    audit,
    addNode: () => addHarnessNode(aws, ++nodes),
    join: (node, joinOptions = {}) =>
      joinHarnessNode({ url: bootstrap.server.url, caBundlePem, api, dir }, node, joinOptions),
    async close() {
      await bootstrap.close();
      clients.destroy();
      await Promise.all([api.close(), aws.close()]);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
