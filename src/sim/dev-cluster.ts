/**
 * A whole simulated kops cluster on loopback, for `kops-controller dev`, demos and end-to-end tests:
 * the Kubernetes API server, the AWS endpoints (EC2, Auto Scaling, STS) and an S3 state store holding
 * the sample cluster `minimal.example.com` (a control plane and two node instance groups). Every
 * instance group has an Auto Scaling group with running instances, and every instance a registered,
 * Ready Node with a few pods, exactly as a freshly created kops cluster would look. The GCE cluster is
 * here too; the clusters of the six clouds whose proof names a server are in dev-clouds.ts, built from
 * the parts exported here (the API server, Node registration, config, env and the controller's target).
 */
import { createHash } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import type { OAuth2Client } from 'google-auth-library';
import type { CloudOverrides } from '../cloud/from-config.ts';
import { computeEndpointVariable } from '../cloud/gce/provider.ts';
import { type Logger, silentLogger } from '../log.ts';
import { seedClusterStore } from '../statestore/cluster-store.ts';
import { loadSampleCluster } from '../statestore/fixtures.ts';
import { type InstanceGroup, parseInstanceGroup } from '../statestore/kops-types.ts';
import { openVfs, type VfsOptions, vfsOptionsFromEnv } from '../statestore/open.ts';
import { type DevApiServer, startDevApiServer } from './apiserver/dev.ts';
import type { KubeObject } from './apiserver/index.ts';
import { awsProviderID, simInstanceId } from './aws/scenario.ts';
import { type AwsSimulator, startAwsSimulator } from './aws/server.ts';
import type { SimInstanceInput } from './aws/world.ts';
import type { ServerCloud, ServerCloudDevCluster } from './dev-clouds.ts';
import { simulatorAuth } from './gce/clients.ts';
import { type GceSimulator, startGceSimulator } from './gce/simulator.ts';
import { type GcsSim, startGcsSim } from './gcs/server.ts';
import { type S3Sim, startS3Sim } from './s3/server.ts';

/** Options of {@link startDevCluster}. */
export interface DevClusterOptions {
  /** Receives `kubeconfig`, `ca.crt`, `config.yaml` and `env`. */
  stateDir: string;
  /** Port of the Kubernetes API (default 0: ephemeral). */
  apiPort?: number;
  /** Whether the EC2 request bucket is on, as in a real account (default true). */
  awsThrottling?: boolean;
  logger?: Logger;
}

/** What every simulated cluster has, whatever its cloud. */
export interface DevClusterBase {
  clusterName: string;
  /** The state-store folder of the cluster, e.g. `s3://kops-state/minimal.example.com`. */
  configBase: string;
  api: DevApiServer;
  /** A kops-controller config for this cluster (also written to `<stateDir>/config.yaml`). */
  configPath: string;
  /** Environment pointing the cloud SDK and the state store at the simulators (also `<stateDir>/env`). */
  env: Record<string, string>;
  /** The Nodes created, by instance group. */
  nodesByGroup: Map<string, string[]>;
  /** The cluster as the controller sees it: what `dev` points the product at (src/cli/dev-controller.ts). */
  target: DevClusterTarget;
  close(): Promise<void>;
}

/** A running simulated AWS cluster and where its pieces are. */
export interface DevCluster extends DevClusterBase {
  cloud: 'aws';
  region: string;
  aws: AwsSimulator;
  s3: S3Sim;
}

/** A running simulated GCE cluster: compute (MIGs, templates, instance identity) and a GCS state store. */
export interface GceDevCluster extends DevClusterBase {
  cloud: 'gce';
  project: string;
  zone: string;
  gce: GceSimulator;
  gcs: GcsSim;
  /** Credentials for the simulated Google APIs (compute and GCS). */
  auth: OAuth2Client;
}

/** The audience the simulated GCE machines put in their identity tokens, and the dev gce policy expects. */
export const devGceAudience = 'https://kops-controller.internal.minimal-gce.example.com:3988';

/** The clouds a simulated cluster runs on. */
export type DevCloud = 'aws' | 'gce' | ServerCloud;

/** A simulated cluster on any cloud. */
export type AnyDevCluster = DevCluster | GceDevCluster | ServerCloudDevCluster;

const stateBucket = 'kops-state';
const region = 'us-test-1';

/** How many instances each group runs: its minSize, but at least one so every group is visible. */
export function runningCount(ig: InstanceGroup): number {
  return Math.max(ig.spec.minSize ?? 1, 1);
}

function zoneOf(ig: InstanceGroup): string {
  const subnet = ig.spec.subnets?.[0] ?? ig.spec.zones?.[0] ?? `${region}a`;
  // kops names subnets after their zone in the sample clusters ("us-test-1a").
  return /^[a-z]+-[a-z]+-\d[a-z]$/.test(subnet) ? subnet : `${region}a`;
}

/** A stable id derived from the node's name, in the shape `/etc/machine-id` (32 hex) or a UUID has. */
function idOf(name: string, salt: string, uuid: boolean): string {
  const hex = createHash('sha256').update(`${salt}:${name}`).digest('hex').slice(0, 32);
  return uuid ? hex.replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5') : hex;
}

/**
 * What a t3.medium-sized machine reports (2 vCPU, 4 GiB): capacity, and allocatable after the
 * kubelet's reservations and eviction threshold, so `kubectl describe node` prints real percentages.
 */
const nodeCapacity = { cpu: '2', memory: '3969504Ki', 'ephemeral-storage': '130045936Ki', pods: '110' };
const nodeAllocatable = {
  cpu: '1900m',
  memory: '3662304Ki',
  'ephemeral-storage': '119850776788',
  pods: '110',
};

/**
 * The status a kubelet posts for a healthy node: Ready, its address, its resources and the system
 * info it reads from the machine (ids derived from the name, so they are stable across runs).
 */
export function kubeletNodeStatus(
  name: string,
  internalIp: string,
  now = new Date(),
): Record<string, unknown> {
  return {
    capacity: { ...nodeCapacity },
    allocatable: { ...nodeAllocatable },
    conditions: [
      {
        type: 'Ready',
        status: 'True',
        reason: 'KubeletReady',
        message: 'kubelet is posting ready status',
        lastHeartbeatTime: now.toISOString(),
        lastTransitionTime: now.toISOString(),
      },
    ],
    addresses: [
      { type: 'InternalIP', address: internalIp },
      { type: 'Hostname', address: name },
    ],
    daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
    nodeInfo: {
      machineID: idOf(name, 'machine', false),
      systemUUID: `ec2${idOf(name, 'system', true).slice(3)}`,
      bootID: idOf(name, 'boot', true),
      kernelVersion: '6.1.0-31-cloud-amd64',
      osImage: 'Debian GNU/Linux 12 (bookworm)',
      containerRuntimeVersion: 'containerd://1.7.25',
      kubeletVersion: 'v1.33.0',
      kubeProxyVersion: 'v1.33.0',
      operatingSystem: 'linux',
      architecture: 'amd64',
    },
  };
}

/** The heartbeat Lease a kubelet keeps in `kube-node-lease` (what `kubectl describe node` shows as Lease). */
export function nodeLease(name: string, now = new Date()): KubeObject {
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name, namespace: 'kube-node-lease' },
    spec: {
      holderIdentity: name,
      leaseDurationSeconds: 40,
      // A MicroTime: RFC 3339 with microseconds.
      renewTime: now.toISOString().replace(/Z$/, '000Z'),
    },
  };
}

function nodeObject(node: { name: string; providerID: string; ip: string }, ig: InstanceGroup): KubeObject {
  const controlPlane = ig.spec.role === 'ControlPlane';
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: node.name, labels: { 'kubernetes.io/hostname': node.name } },
    spec: {
      providerID: node.providerID,
      ...(controlPlane
        ? { taints: [{ key: 'node-role.kubernetes.io/control-plane', effect: 'NoSchedule' }] }
        : {}),
    },
    status: kubeletNodeStatus(node.name, node.ip),
  };
}

/** Registers `nodes` of `ig` as Ready Nodes, each with a kube-proxy pod, and records them by group. */
export function registerNodes(
  api: DevApiServer,
  ig: InstanceGroup,
  nodes: readonly { name: string; providerID: string; ip: string }[],
  nodesByGroup: Map<string, string[]>,
): void {
  // A control-plane node also runs the static pods `kops validate cluster` looks for.
  const components = ig.spec.role === 'ControlPlane' ? controlPlaneComponents : [];
  for (const node of nodes) {
    api.server.store.create(nodeObject(node, ig));
    api.server.store.create(nodeLease(node.name));
    api.server.store.create(podObject(`kube-proxy-${node.name}`, node.name, 'kube-proxy'));
    for (const component of components) {
      api.server.store.create(
        podObject(`${component}-${node.name}`, node.name, component, 'system-cluster-critical'),
      );
    }
  }
  nodesByGroup.set(
    ig.metadata.name,
    nodes.map((n) => n.name),
  );
}

/**
 * Starts the simulators of a cluster: `start` pushes a closer for each thing it starts; the cluster's
 * `close` runs them in reverse, and so does a failed start, so nothing is left listening.
 */
export async function startParts<T extends { close(): Promise<void> }>(
  start: (closers: (() => Promise<void>)[]) => Promise<Omit<T, 'close'>>,
): Promise<T> {
  const closers: (() => Promise<void>)[] = [];
  try {
    const parts = await start(closers);
    return {
      ...parts,
      close: async () => {
        for (const close of closers.reverse()) await close();
      },
    } as T;
  } catch (err) {
    for (const close of closers.reverse()) await close().catch(() => undefined);
    throw err;
  }
}

const controlPlaneComponents = ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler'];

/** The component statuses a healthy cluster's API server reports (`kubectl get componentstatuses`). */
function seedComponentStatuses(api: DevApiServer): void {
  for (const name of ['scheduler', 'controller-manager', 'etcd-0']) {
    api.server.store.create({
      apiVersion: 'v1',
      kind: 'ComponentStatus',
      metadata: { name },
      conditions: [{ type: 'Healthy', status: 'True', message: 'ok' }],
    });
  }
}

/** The CPU each component requests by default in kops' manifests, which `kubectl describe node` sums. */
const cpuRequests: Record<string, string> = {
  'kube-apiserver': '150m',
  'kube-controller-manager': '100m',
  'kube-scheduler': '100m',
  'kube-proxy': '100m',
};

function podObject(
  name: string,
  nodeName: string,
  component: string,
  priorityClassName = 'system-node-critical',
): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'kube-system', labels: { 'k8s-app': component } },
    spec: {
      nodeName,
      priorityClassName,
      containers: [
        {
          name: component,
          image: component,
          ...(cpuRequests[component] ? { resources: { requests: { cpu: cpuRequests[component] } } } : {}),
        },
      ],
    },
    status: {
      phase: 'Running',
      conditions: [{ type: 'Ready', status: 'True' }],
      containerStatuses: [
        {
          name: component,
          image: component,
          imageID: '',
          ready: true,
          restartCount: 0,
          state: { running: { startedAt: new Date().toISOString() } },
        },
      ],
    },
  };
}

/** Writes the controller config (metrics on an ephemeral loopback port) and returns its path. */
export async function writeConfig(stateDir: string, lines: readonly string[]): Promise<string> {
  const configPath = join(stateDir, 'config.yaml');
  await writeFile(configPath, [...lines, 'metrics:', '  listen: "127.0.0.1:0"', ''].join('\n'));
  return configPath;
}

/** Writes the environment as a file to source. Simulator credentials only: they open nothing outside loopback. */
export async function writeEnv(stateDir: string, env: Record<string, string>): Promise<void> {
  const text = Object.entries(env).map(([k, v]) => `export ${k}=${v}`);
  await writeFile(join(stateDir, 'env'), `${text.join('\n')}\n`, { mode: 0o600 });
}

/** The simulated Kubernetes API, its kubeconfig in `stateDir`; closed with the cluster. */
export async function startClusterApi(
  options: DevClusterOptions,
  logger: Logger,
  closers: (() => Promise<void>)[],
): Promise<DevApiServer> {
  const api = await startDevApiServer({ stateDir: options.stateDir, port: options.apiPort, logger });
  closers.push(() => api.close());
  seedComponentStatuses(api);
  return api;
}

/** Each AWS instance group as an Auto Scaling group of running instances, each with a registered, Ready Node. */
function seedAwsGroups(
  api: DevApiServer,
  aws: AwsSimulator,
  groups: readonly InstanceGroup[],
  clusterName: string,
): Map<string, string[]> {
  const nodesByGroup = new Map<string, string[]>();
  let nextId = 1;
  for (const ig of groups) {
    const zone = zoneOf(ig);
    const instances: SimInstanceInput[] = Array.from({ length: runningCount(ig) }, () => {
      const n = nextId++;
      return {
        id: simInstanceId(n),
        zone,
        cluster: clusterName,
        instanceGroup: ig.metadata.name,
        privateIp: `172.20.${Math.floor(n / 250)}.${(n % 250) + 4}`,
      };
    });
    aws.ec2.addInstances(instances);
    aws.autoscaling.addAutoScalingGroup({
      name: `${ig.metadata.name}.${clusterName}`,
      minSize: ig.spec.minSize ?? 1,
      maxSize: ig.spec.maxSize ?? 1,
      desiredCapacity: instances.length,
      zones: [zone],
      cluster: clusterName,
      instanceGroup: ig.metadata.name,
      members: instances.map((i) => i.id),
    });
    const nodes = instances.map((i) => ({ name: i.id, providerID: awsProviderID(i), ip: i.privateIp ?? '' }));
    registerNodes(api, ig, nodes, nodesByGroup);
  }
  return nodesByGroup;
}

/** The environment pointing the AWS SDK, the S3 state store and kubectl at the simulators. */
function awsEnv(aws: AwsSimulator, s3: S3Sim, api: DevApiServer): Record<string, string> {
  return {
    AWS_ENDPOINT_URL: aws.endpoint,
    AWS_REGION: region,
    AWS_ACCESS_KEY_ID: aws.credentials.accessKeyId,
    AWS_SECRET_ACCESS_KEY: aws.credentials.secretAccessKey,
    S3_ENDPOINT: s3.endpoint,
    S3_REGION: region,
    S3_ACCESS_KEY_ID: aws.credentials.accessKeyId,
    S3_SECRET_ACCESS_KEY: aws.credentials.secretAccessKey,
    KUBECONFIG: api.kubeconfigPath,
  };
}

/** Starts the simulated AWS cluster and writes its kubeconfig, config and environment into `stateDir`. */
export async function startDevCluster(options: DevClusterOptions): Promise<DevCluster> {
  const logger = options.logger ?? silentLogger;
  const sample = await loadSampleCluster('aws');
  const groups = sample.instanceGroups.map((text) => parseInstanceGroup(text));
  return startParts<DevCluster>(async (closers) => {
    const api = await startClusterApi(options, logger, closers);
    const aws = await startAwsSimulator({ region, throttling: options.awsThrottling ?? true, logger });
    closers.push(() => aws.close());
    const s3 = await startS3Sim({ buckets: [stateBucket], credentials: [aws.credentials] });
    closers.push(() => s3.close());
    const configBase = `s3://${stateBucket}/${sample.name}`;
    const s3Options = {
      region,
      endpoint: s3.endpoint,
      forcePathStyle: true,
      credentials: { ...aws.credentials },
    };
    await seedClusterStore(openVfs(`s3://${stateBucket}`, { s3: s3Options }), sample.name, sample);
    const nodesByGroup = seedAwsGroups(api, aws, groups, sample.name);
    const configPath = await writeConfig(options.stateDir, [
      `clusterName: ${sample.name}`,
      'cloud: aws',
      `configBase: ${configBase}`,
      'server:',
      '  provider:',
      '    aws:',
      `      nodesRoles: [nodes.${sample.name}]`,
      `      Region: ${region}`,
    ]);
    const env = awsEnv(aws, s3, api);
    await writeEnv(options.stateDir, env);
    const cluster = {
      cloud: 'aws' as const,
      clusterName: sample.name,
      region,
      configBase,
      api,
      aws,
      s3,
      configPath,
      env,
      nodesByGroup,
    };
    return { ...cluster, target: devTarget(cluster) };
  });
}

/** Each GCE instance group as a MIG of running instances in `zone`, each with a registered, Ready Node. */
function seedGceGroups(
  api: DevApiServer,
  gce: GceSimulator,
  groups: readonly InstanceGroup[],
  where: { clusterName: string; project: string; zone: string },
): Map<string, string[]> {
  const nodesByGroup = new Map<string, string[]>();
  for (const ig of groups) {
    const instances = gce.seedInstanceGroup({
      zone: where.zone,
      instanceGroup: ig.metadata.name,
      count: runningCount(ig),
      clusterName: where.clusterName,
    });
    const nodes = instances.map((i) => ({
      name: i.name,
      providerID: gceProviderID(where.project, i),
      ip: i.networkIP,
    }));
    registerNodes(api, ig, nodes, nodesByGroup);
  }
  return nodesByGroup;
}

/**
 * The environment pointing Google's libraries, the GCS state store and kubectl at the simulators:
 * everything they would otherwise reach for on the internet. Credentials come from the simulated
 * metadata server (as on a GCE VM), and the developer's own gcloud credentials are kept out of it.
 */
async function gceEnv(
  stateDir: string,
  sims: { gce: GceSimulator; gcs: GcsSim; api: DevApiServer },
  project: string,
): Promise<Record<string, string>> {
  const gcloudConfig = join(stateDir, 'gcloud');
  await mkdir(gcloudConfig, { recursive: true, mode: 0o700 });
  return {
    STORAGE_EMULATOR_HOST: sims.gcs.endpoint,
    [computeEndpointVariable]: sims.gce.endpoint,
    GCE_METADATA_HOST: new URL(sims.gce.metadataUri).host,
    CLOUDSDK_CONFIG: gcloudConfig,
    GOOGLE_APPLICATION_CREDENTIALS: '',
    GCP_PROJECT: project,
    KUBECONFIG: sims.api.kubeconfigPath,
  };
}

/**
 * Starts the simulated GCE cluster (kops' sample `minimal-gce.example.com`): every instance group is a
 * MIG of running instances built from a template that names the group, with a registered, Ready Node
 * each, and the state store in simulated GCS. Writes the kubeconfig, config and environment into
 * `stateDir`.
 */
export async function startGceDevCluster(options: DevClusterOptions): Promise<GceDevCluster> {
  const logger = options.logger ?? silentLogger;
  const sample = await loadSampleCluster('gce');
  const groups = sample.instanceGroups.map((text) => parseInstanceGroup(text));
  const project = 'testproject';
  const zone = 'us-test1-a';
  return startParts<GceDevCluster>(async (closers) => {
    const api = await startClusterApi(options, logger, closers);
    const gce = await startGceSimulator({ project });
    closers.push(() => gce.close());
    const gcs = await startGcsSim({ buckets: [stateBucket] });
    closers.push(() => gcs.close());
    const auth = simulatorAuth(gce);
    const configBase = `gs://${stateBucket}/${sample.name}`;
    const store = openVfs(`gs://${stateBucket}`, { gcs: { endpoint: gcs.endpoint, auth } });
    await seedClusterStore(store, sample.name, sample);
    const nodesByGroup = seedGceGroups(api, gce, groups, { clusterName: sample.name, project, zone });
    const configPath = await writeConfig(options.stateDir, [
      `clusterName: ${sample.name}`,
      'cloud: gce',
      `configBase: ${configBase}`,
      'server:',
      '  provider:',
      '    gce:',
      `      projectID: ${project}`,
    ]);
    const env = await gceEnv(options.stateDir, { gce, gcs, api }, project);
    await writeEnv(options.stateDir, env);
    const cluster = {
      cloud: 'gce' as const,
      clusterName: sample.name,
      project,
      zone,
      configBase,
      api,
      gce,
      gcs,
      auth,
      configPath,
      env,
      nodesByGroup,
    };
    return { ...cluster, target: devTarget(cluster) };
  });
}

/** A simulated cluster before its {@link devTarget} is known. */
type ClusterParts = Omit<DevCluster, 'target' | 'close'> | Omit<GceDevCluster, 'target' | 'close'>;

/** The cluster as the controller sees it (src/cli/dev-controller.ts `DevTarget`). */
export interface DevClusterTarget {
  cloud: DevCloud;
  configPath: string;
  apiServer: { url: string; kubeConfig(): KubeConfig; caCertificatePem: string; caPrivateKeyPem: string };
  clients: { cloud: CloudOverrides; vfsOptions: VfsOptions };
  cloudPolicy: Record<string, unknown>;
}

/**
 * The cluster as the controller sees it: its config, the API server and the cluster CA, the clients'
 * endpoints and credentials (the state store's from `env`, unless `vfsOptions` says otherwise), and
 * its cloud's approval policy pointed at the simulators.
 */
export function devTargetOf(
  cluster: { api: DevApiServer; configPath: string; env: Record<string, string> },
  cloud: DevCloud,
  parts: { cloud: CloudOverrides; policy: Record<string, unknown>; vfsOptions?: VfsOptions },
): DevClusterTarget {
  const sim = cluster.api.server;
  return {
    cloud,
    configPath: cluster.configPath,
    apiServer: {
      url: sim.url,
      kubeConfig: () => sim.kubeConfig(),
      caCertificatePem: sim.caCertificate,
      caPrivateKeyPem: sim.certificateAuthority.privateKey,
    },
    clients: {
      cloud: parts.cloud,
      vfsOptions: parts.vfsOptions ?? { ...vfsOptionsFromEnv(cluster.env), env: cluster.env },
    },
    cloudPolicy: parts.policy,
  };
}

/** The target of an AWS or GCE cluster: the simulators' endpoints and credentials, passed explicitly. */
function devTarget(cluster: ClusterParts): DevClusterTarget {
  if (cluster.cloud === 'aws') {
    return devTargetOf(cluster, 'aws', {
      cloud: { aws: { endpoint: cluster.aws.endpoint, credentials: { ...cluster.aws.credentials } } },
      policy: { name: 'aws', stsEndpoint: cluster.aws.endpoint },
    });
  }
  const fromEnv = { ...vfsOptionsFromEnv(cluster.env), env: cluster.env };
  return devTargetOf(cluster, 'gce', {
    cloud: { gce: { endpoint: cluster.gce.endpoint, auth: cluster.auth } },
    policy: { name: 'gce', jwksUrl: cluster.gce.jwksUri, audience: devGceAudience },
    vfsOptions: { ...fromEnv, gcs: { ...fromEnv.gcs, auth: cluster.auth } },
  });
}

/** The providerID a GCE node registers with: `gce://<project>/<zone>/<name>`. */
export function gceProviderID(project: string, instance: { zone: string; name: string }): string {
  return `gce://${project}/${instance.zone}/${instance.name}`;
}
