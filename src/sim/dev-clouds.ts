/**
 * The simulated cluster of `kops-controller dev --cloud <c>` on the six clouds where kops creates
 * servers itself and a node proves itself by naming its server (Hetzner, DigitalOcean, Linode,
 * OpenStack, Scaleway, Azure): the cloud's simulator seeded with a kops cluster — each instance group
 * as the servers kops would create, carrying the cloud's cluster and group tags or labels — the
 * Kubernetes API with a Ready Node per server, and the cluster's objects in a state store.
 *
 * Addresses: every server's private address is a distinct loopback address ({@link loopbackAddresses},
 * drawn per cluster, so two dev clusters on one machine rarely share one). The cloud reports that
 * address, and a joining node's challenge server listens on it (kops' port 3987): the controller dials
 * the address the cloud reports, as it would in the cloud's private network. OpenStack runs no
 * callback; its verifier compares the request's source address with the server's, so a joining
 * OpenStack node's requests leave from its own address ({@link sourceAddressRelay}).
 *
 * The state store is the one kops' guide for the cloud uses, addressed by its scheme: the S3
 * simulator as Hetzner's, DigitalOcean's, Linode's and Scaleway's S3-compatible stores (`hos://`,
 * `do://`, `linode://`, `scw://`), the OpenStack simulator's Swift (`swift://`), the Azure
 * simulator's Blob Storage (`azureblob://`).
 */
import { randomInt } from 'node:crypto';
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import type { ProofProvider } from '../agent/proofs.ts';
import type { CloudOverrides } from '../cloud/from-config.ts';
import { silentLogger } from '../log.ts';
import { seedClusterStore } from '../statestore/cluster-store.ts';
import { type InstanceGroup, parseInstanceGroup } from '../statestore/kops-types.ts';
import { openVfs, type VfsOptions, vfsOptionsFromEnv } from '../statestore/open.ts';
import type { DevApiServer } from './apiserver/dev.ts';
import { kopsRoleOf } from './cloud-sim.ts';
import { startAzureDevCloud } from './dev-azure.ts';
import {
  type DevClusterBase,
  type DevClusterOptions,
  devTargetOf,
  registerNodes,
  runningCount,
  startClusterApi,
  startParts,
  writeConfig,
  writeEnv,
} from './dev-cluster.ts';
import { startDigitalOceanDevCloud } from './dev-digitalocean.ts';
import { startHetznerDevCloud } from './dev-hetzner.ts';
import { startLinodeDevCloud } from './dev-linode.ts';
import { startOpenStackDevCloud } from './dev-openstack.ts';
import { startScalewayDevCloud } from './dev-scaleway.ts';
import { type S3Sim, startS3Sim } from './s3/server.ts';

/** The clouds whose dev cluster this module builds (`config.cloud` names). */
export const serverClouds = ['hetzner', 'digitalocean', 'linode', 'openstack', 'scaleway', 'azure'] as const;
export type ServerCloud = (typeof serverClouds)[number];

/** A server of the simulated cloud: the Node it becomes and how its machine proves who it is. */
export interface DevServer {
  /** The node name the cloud's verifier derives from the server (kops' rules per cloud). */
  name: string;
  providerID: string;
  /** Its private address as the cloud reports it: a loopback address of its own. */
  address: string;
  /** The cloud's proof, read from the server's own (simulated) metadata service. */
  proof: ProofProvider;
}

/** An instance group as a cloud's seeding needs it. */
export interface DevGroup {
  name: string;
  controlPlane: boolean;
}

/** What every server cloud's simulator gives the dev cluster. */
export interface DevCloudSim {
  /** Where it is, for the banner (one line, without the leading label). */
  description: string;
  /** The `server.provider` entry of the controller config, indented under `provider:`. */
  providerConfig: string[];
  /** How the controller reaches the simulator (never the cloud's real endpoint). */
  overrides: CloudOverrides;
  /** The simulator's endpoint and credentials as the cloud's own variables (`.kops-dev/env`). */
  env: Record<string, string>;
  /** The cloud's `bootstrap.policies` entry, pointed at the simulator where it needs to be. */
  policy: Record<string, unknown>;
  /** Whether nodes answer kops' callback challenge (all but OpenStack, which checks the source address). */
  callback: boolean;
  /**
   * Creates the `index`th running server of `group` with `address` as its private address, tagged or
   * labelled as kops does it.
   */
  addServer(group: DevGroup, index: number, address: string): DevServer;
  /** Requests the simulator served for one operation (what a test checks the controller asked). */
  count(operation: string): number;
  /** The cloud's own state store, when its simulator serves one (else the S3 simulator is started). */
  stateStore?: DevStateStore;
  close(): Promise<void>;
}

/** A state store of the dev cluster, its bucket or container created, as kops' guide for the cloud sets it up. */
export interface DevStateStore {
  /** The store's root, e.g. `swift://kops-state`: `configBase` is `<root>/<cluster name>`. */
  root: string;
  /** Its clients' variables (`.kops-dev/env`). */
  env: Record<string, string>;
  /** How the in-process controller (and the seeding) open it. */
  vfsOptions: VfsOptions;
  /** Where it is, for the banner. */
  description: string;
}

/** What a cloud's dev simulator is started with. */
export interface DevCloudContext {
  clusterName: string;
  /** The location the sample cluster's groups run in (the cloud's zone, region or location). */
  zone: string;
  stateDir: string;
  /** The state store's root (`swift://kops-state`, …), for a simulator that serves the cloud's own store. */
  stateRoot: string;
}

/** One server cloud: its location, how to start its simulator, and its state store's root. */
interface ServerCloudSpec {
  zone: string;
  start(context: DevCloudContext): Promise<DevCloudSim>;
  /**
   * The state store's root as kops' guide for the cloud writes it: an S3-compatible scheme (the S3
   * simulator serves it, through `S3_ENDPOINT`), or the store the cloud's simulator serves.
   */
  stateRoot: string;
}

/** The bucket, container or (Azure) account and container the dev cluster keeps its state in. */
export const devStateBucket = 'kops-state';
export const devStateAccount = 'kopsstate';

const cloudSpecs: Record<ServerCloud, ServerCloudSpec> = {
  hetzner: { zone: 'fsn1', start: startHetznerDevCloud, stateRoot: `hos://${devStateBucket}` },
  digitalocean: { zone: 'nyc3', start: startDigitalOceanDevCloud, stateRoot: `do://${devStateBucket}` },
  linode: { zone: 'us-ord', start: startLinodeDevCloud, stateRoot: `linode://${devStateBucket}` },
  openstack: { zone: 'nova', start: startOpenStackDevCloud, stateRoot: `swift://${devStateBucket}` },
  scaleway: { zone: 'fr-par-1', start: startScalewayDevCloud, stateRoot: `scw://${devStateBucket}` },
  azure: {
    zone: 'eastus',
    start: startAzureDevCloud,
    stateRoot: `azureblob://${devStateAccount}/${devStateBucket}`,
  },
};

/** A running simulated cluster on one of the server clouds. */
export interface ServerCloudDevCluster extends DevClusterBase {
  cloud: ServerCloud;
  zone: string;
  sim: DevCloudSim;
  /** Where the state store is, for the banner. */
  stateStoreDescription: string;
  /** Launches a new running server of instance group `group`, on the next unused private address. */
  launch(group: string): DevServer;
}

/**
 * Private addresses for one cluster's servers: 127.A.B.C with A drawn at random (never 0, so no
 * address is 127.0.0.1, which the controller and the API server use) and B starting at a random
 * /24, so two dev clusters on one machine rarely share one; C runs 1–254 and then B moves on —
 * over 10,000 addresses, more than `dev --joining-nodes` can ask for.
 */
export function loopbackAddresses(): () => string {
  const a = randomInt(1, 255);
  let b = randomInt(0, 216);
  let c = 0;
  return () => {
    if (++c > 254) {
      b++;
      c = 1;
    }
    if (b > 255) throw new Error(`the simulated network 127.${a}.0.0/16 has no address left`);
    return `127.${a}.${b}.${c}`;
  };
}

/** kops' sample layout on `cloud`: one control-plane server and a group of two nodes in `zone`. */
export function sampleServerCluster(cloud: ServerCloud, zone: string) {
  const name = `minimal-${cloud}.example.com`;
  const cluster = [
    'apiVersion: kops.k8s.io/v1alpha2',
    'kind: Cluster',
    'metadata:',
    `  name: ${name}`,
    'spec:',
    `  cloudProvider: ${cloud}`,
    `  configBase: ${cloudSpecs[cloud].stateRoot}/${name}`,
    '  kubernetesVersion: v1.33.0',
    '  networking:',
    '    cni: {}',
    '  subnets:',
    `    - name: ${zone}`,
    '      type: Public',
    `      zone: ${zone}`,
    '',
  ].join('\n');
  const group = (ig: string, role: 'ControlPlane' | 'Node', size: number) =>
    [
      'apiVersion: kops.k8s.io/v1alpha2',
      'kind: InstanceGroup',
      'metadata:',
      '  labels:',
      `    kops.k8s.io/cluster: ${name}`,
      `  name: ${ig}`,
      'spec:',
      `  minSize: ${size}`,
      `  maxSize: ${size + 2}`,
      '  nodeLabels:',
      `    kops.k8s.io/instancegroup: ${ig}`,
      `  role: ${role}`,
      '  subnets:',
      `    - ${zone}`,
      '',
    ].join('\n');
  return {
    name,
    cluster,
    instanceGroups: [group(`control-plane-${zone}`, 'ControlPlane', 1), group(`nodes-${zone}`, 'Node', 2)],
  };
}

/** The S3 simulator as an S3-compatible store at `root` (`hos://kops-state`, …), read through `S3_*` variables. */
function s3StateStore(s3: S3Sim, root: string): DevStateStore {
  const env = {
    S3_ENDPOINT: s3.endpoint,
    S3_REGION: 'us-east-1',
    S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
    S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
  };
  return { root, env, vfsOptions: { ...vfsOptionsFromEnv(env), env }, description: `S3 at ${s3.endpoint}` };
}

/**
 * Launches servers of the cloud: each group's servers are numbered in the order they are launched
 * (`<group>-<n>`, as kops names them), each on a private address of its own.
 */
function serverLauncher(sim: DevCloudSim): (group: string) => DevServer {
  const nextAddress = loopbackAddresses();
  const launched = new Map<string, number>();
  return (group) => {
    const index = launched.get(group) ?? 0;
    launched.set(group, index + 1);
    return sim.addServer(
      { name: group, controlPlane: kopsRoleOf(group) === 'ControlPlane' },
      index,
      nextAddress(),
    );
  };
}

/** Each instance group as running servers of the cloud, each with a registered, Ready Node. */
function seedServers(
  api: DevApiServer,
  groups: readonly InstanceGroup[],
  launch: (group: string) => DevServer,
): Map<string, string[]> {
  const nodesByGroup = new Map<string, string[]>();
  for (const ig of groups) {
    const servers = Array.from({ length: runningCount(ig) }, () => launch(ig.metadata.name));
    registerNodes(
      api,
      ig,
      servers.map((s) => ({ name: s.name, providerID: s.providerID, ip: s.address })),
      nodesByGroup,
    );
  }
  return nodesByGroup;
}

/**
 * Starts the simulated cluster on `cloud`: the cloud's simulator with the sample cluster's servers,
 * the Kubernetes API with their Nodes, the S3 state store; writes the kubeconfig, the controller
 * config and the environment into `options.stateDir`.
 */
export async function startServerCloudDevCluster(
  cloud: ServerCloud,
  options: DevClusterOptions,
): Promise<ServerCloudDevCluster> {
  const logger = options.logger ?? silentLogger;
  const { zone } = cloudSpecs[cloud];
  const sample = sampleServerCluster(cloud, zone);
  const groups = sample.instanceGroups.map((text) => parseInstanceGroup(text));
  return startParts<ServerCloudDevCluster>(async (closers) => {
    const api = await startClusterApi(options, logger, closers);
    const { stateRoot } = cloudSpecs[cloud];
    const context = { clusterName: sample.name, zone, stateDir: options.stateDir, stateRoot };
    const sim = await cloudSpecs[cloud].start(context);
    closers.push(() => sim.close());
    let store = sim.stateStore;
    if (store === undefined) {
      const s3 = await startS3Sim({ buckets: [devStateBucket] });
      closers.push(() => s3.close());
      store = s3StateStore(s3, stateRoot);
    }
    // The controller reads the store through the cloud's own scheme, as kops writes configBase there.
    await seedClusterStore(openVfs(store.root, store.vfsOptions), sample.name, sample);
    const launch = serverLauncher(sim);
    const nodesByGroup = seedServers(api, groups, launch);
    const configBase = `${store.root}/${sample.name}`;
    const configPath = await writeConfig(options.stateDir, [
      `clusterName: ${sample.name}`,
      `cloud: ${cloud}`,
      `configBase: ${configBase}`,
      'server:',
      '  provider:',
      ...sim.providerConfig.map((line) => `    ${line}`),
    ]);
    const env = { ...sim.env, ...store.env, KUBECONFIG: api.kubeconfigPath };
    await writeEnv(options.stateDir, env);
    const parts = { clusterName: sample.name, configBase, api, configPath, env, nodesByGroup };
    return {
      ...parts,
      cloud,
      zone,
      sim,
      stateStoreDescription: store.description,
      launch,
      target: devTargetOf(parts, cloud, {
        cloud: sim.overrides,
        policy: sim.policy,
        vfsOptions: store.vfsOptions,
      }),
    };
  });
}

/**
 * A relay on 127.0.0.1 whose connections to `target` leave from `source`: the network path of a
 * server whose requests must come from its own address (OpenStack's verifier checks it). TLS passes
 * through untouched, so the node still verifies the bootstrap server it pinned.
 */
export async function sourceAddressRelay(
  target: URL,
  source: string,
): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  };
  const server: Server = createServer((inbound) => {
    track(inbound);
    const outbound = netConnect({
      host: target.hostname,
      port: Number(target.port || 443),
      localAddress: source,
    });
    track(outbound);
    inbound.pipe(outbound).pipe(inbound);
    inbound.once('error', () => outbound.destroy());
    outbound.once('error', () => inbound.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as { port: number };
  return {
    url: `https://127.0.0.1:${port}`,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
