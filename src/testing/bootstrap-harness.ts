/**
 * A real bootstrap server on loopback in front of the simulated Kubernetes API, AWS and GCE, with the
 * real `aws` policy (STS replay, EC2 lookups), the real `gce` policy (identity tokens, spent once
 * through a replay marker written as a ConfigMap in the simulated API server) and the real
 * impersonation guard and queue: what the fault tests and the 503-storm benchmark drive. Faults are
 * injected through `api.faults` and `aws.faults`; nodes join with the real `join` and a proof from
 * their instance: an STS proof signed with their instance profile session (`addNode`), or an
 * identity token from their metadata server (`addGceNode`).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join as joinPath } from 'node:path';
import { CoreV1Api } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { signAwsStsProof } from '../agent/aws-proof.ts';
import { type JoinOptions, type JoinResult, join } from '../agent/join.ts';
import type { ProofProvider } from '../agent/proofs.ts';
import type { CircuitBreaker } from '../bootstrap/circuit-breaker.ts';
import { type AwsPolicyOptions, awsPolicy } from '../bootstrap/policies/aws.ts';
import { gcePolicy } from '../bootstrap/policies/gce.ts';
import { ConfigMapReplayGuard } from '../bootstrap/replay-guard.ts';
import type { AuditRecord, BootstrapPolicy } from '../bootstrap/types.ts';
import { type RunningBootstrap, startBootstrapServer } from '../cli/bootstrap-server.ts';
import { type AwsClients, createAwsClients } from '../cloud/aws/clients.ts';
import { AwsNodeIdentifier } from '../cloud/aws/identify.ts';
import type { SigV4Credentials } from '../cloud/aws/sigv4.ts';
import { GceIdentityTokenVerifier, JwksKeyStore } from '../cloud/gce/identity-token.ts';
import { GceNodeIdentifier } from '../cloud/gce/node-identifier.ts';
import { parseConfig } from '../config/loader.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import type { BucketLimit } from '../runtime/token-bucket.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import { simulatorCompute } from '../sim/gce/clients.ts';
import { type GceSimulator, startGceSimulator } from '../sim/gce/simulator.ts';

/** Options of {@link startBootstrapHarness}. */
export interface BootstrapHarnessOptions {
  /** The approval chain around the `aws` policy (default: `[aws, gce]`). */
  policies?: (aws: BootstrapPolicy) => BootstrapPolicy[];
  /** Overrides of the `aws` policy (e.g. a shorter `stsTimeoutMs`). */
  aws?: Partial<AwsPolicyOptions>;
  /** Deadline of each replay-marker call of the `gce` policy (default: the guard's own). */
  replayGuardTimeoutMs?: number;
  /** Attempts of each EC2 call, the SDK's retries included (default 2). */
  ec2MaxAttempts?: number;
  /** The DescribeInstances calls lookups of single nodes may make (default the product's: 10, then one per 3 s). */
  ec2CallBudget?: BucketLimit;
  /** The circuit of the impersonation guard's Node reads (default the product's). */
  guardCircuit?: CircuitBreaker;
}

/** A node of the simulated cluster: its name and where its proofs come from. */
export interface HarnessNode {
  /** The node's name: its EC2 instance id, or its GCE instance name. */
  instanceId: string;
  /**
   * A fresh proof for each attempt, as `join` makes them: an `x-aws-sts-v2` proof signed with the
   * instance profile session, or an `x-gce-identity` token from the instance's metadata server.
   */
  proof: ProofProvider;
}

/** An EC2 instance of the simulated cluster, with its instance profile session. */
export interface HarnessAwsNode extends HarnessNode {
  credentials: SigV4Credentials;
}

/** A running harness. */
export interface BootstrapHarness {
  clusterName: string;
  api: SimApiServer;
  aws: AwsSimulator;
  gce: GceSimulator;
  bootstrap: RunningBootstrap;
  /** `https://127.0.0.1:<port>` of the bootstrap server. */
  url: string;
  /** The cluster CA bundle nodes trust. */
  caBundlePem: string;
  registry: Registry;
  /** Every audit record, in order. */
  audit: AuditRecord[];
  /** Adds a running EC2 instance of the cluster's `nodes` group. */
  addNode(): HarnessAwsNode;
  /** Hands out the next of the GCE instances seeded in the cluster's `nodes` group (64 of them). */
  addGceNode(): HarnessNode;
  /** Runs the real `join` for `node` into a fresh directory (removed afterwards). */
  join(node: HarnessNode, options?: Partial<JoinOptions>): Promise<JoinResult>;
  close(): Promise<void>;
}

const clusterName = 'faults.example.com';
const nodesRole = `nodes.${clusterName}`;
const gceZone = 'us-central1-a';
/** The audience the `gce` policy asks identity tokens to name. */
const gceAudience = `https://kops-controller.internal.${clusterName}:3988`;

/** The real `aws` policy against the simulators: STS replay, EC2. */
function harnessAwsPolicy(
  aws: AwsSimulator,
  ec2: AwsClients['ec2'],
  options: BootstrapHarnessOptions,
): BootstrapPolicy {
  return awsPolicy({
    account: aws.account,
    partition: 'aws',
    region: aws.region,
    nodesRoles: [nodesRole],
    instances: new AwsNodeIdentifier({
      ec2,
      clusterName,
      batchWindowMs: 1,
      ...(options.ec2CallBudget ? { callBudget: options.ec2CallBudget } : {}),
    }),
    stsEndpoint: aws.endpoint,
    ...options.aws,
  });
}

/** The real `gce` policy against the simulators: identity tokens, the replay marker in the API server. */
function harnessGcePolicy(
  api: SimApiServer,
  gce: GceSimulator,
  options: BootstrapHarnessOptions,
): BootstrapPolicy {
  const compute = simulatorCompute(gce);
  return gcePolicy({
    project: gce.world.defaultProject,
    identifier: new GceNodeIdentifier({ compute, clusterName, coalesceWindowMs: 1 }),
    tokenVerifier: new GceIdentityTokenVerifier({
      keys: new JwksKeyStore({ url: gce.jwksUri }),
      audience: gceAudience,
    }),
    replayGuard: new ConfigMapReplayGuard({
      core: api.kubeConfig().makeApiClient(CoreV1Api),
      kubeConfig: api.kubeConfig(),
      timeoutMs: options.replayGuardTimeoutMs,
    }),
  });
}

/** A GCE instance of the `nodes` group, whose proofs are identity tokens from its metadata server. */
function gceHarnessNode(gce: GceSimulator, name: string): HarnessNode {
  return {
    instanceId: name,
    proof: async () =>
      `x-gce-identity ${gce.identityToken(gceZone, name, { audience: gceAudience, format: 'full' })}`,
  };
}

/** Adds a running instance of the `nodes` group, the `nth` one, with its instance profile session. */
function addHarnessNode(aws: AwsSimulator, nth: number): HarnessAwsNode {
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
  const gce = await startGceSimulator();
  const gceNodes = gce
    .seedInstanceGroup({ zone: gceZone, instanceGroup: 'nodes', count: 64, clusterName })
    .map((instance) => instance.name);
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
  const aws_ = harnessAwsPolicy(aws, clients.ec2, options);
  const gce_ = harnessGcePolicy(api, gce, options);
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
      policies: options.policies?.(aws_) ?? [aws_, gce_],
      ca,
      listen: '127.0.0.1:0',
      apiServer: api.url,
      serverNames: { ipAddresses: ['127.0.0.1'] },
      audit: (record) => audit.push(record),
      // Nodes retrying through a storm must not meet the per-address limit of the shared loopback.
      rateLimit: { burst: 10_000, ratePerSecond: 10_000 },
      registry,
      ...(options.guardCircuit ? { guardCircuit: options.guardCircuit } : {}),
    });
  } catch (err) {
    clients.destroy();
    await Promise.all([api.close(), aws.close(), gce.close(), rm(dir, { recursive: true, force: true })]);
    throw err;
  }
  const caBundlePem = bundlePem(ca);
  let nodes = 0;
  return {
    clusterName,
    api,
    aws,
    gce,
    bootstrap,
    url: bootstrap.server.url,
    caBundlePem,
    registry,
    audit,
    addNode: () => addHarnessNode(aws, ++nodes),
    addGceNode() {
      const name = gceNodes.shift();
      if (!name) throw new Error('the harness seeded 64 GCE instances; all are handed out');
      return gceHarnessNode(gce, name);
    },
    join: (node, joinOptions = {}) =>
      joinHarnessNode({ url: bootstrap.server.url, caBundlePem, api, dir }, node, joinOptions),
    async close() {
      await bootstrap.close();
      clients.destroy();
      await Promise.all([api.close(), aws.close(), gce.close()]);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
