/**
 * Simulated new machines for `kops-controller dev`: each is a fresh instance of the simulated cluster
 * (an EC2 instance with an instance-profile session, a GCE instance of a new MIG built from the
 * instance group's template, or a new server tagged with its group on the other clouds) that runs the
 * real node-side join — discovery with the CA pin, local keys, its cloud's proof (a kops STS proof, a
 * GCE identity token, the server id or Azure's attested document from its metadata service; or none,
 * for the queue), on a callback cloud the challenge server on its own address, the long-poll while
 * queued — and then registers its Node with the kubeconfig it got, as a kubelet would.
 */
import { join as joinPath } from 'node:path';
import {
  CoordinationV1Api,
  CoreV1Api,
  KubeConfig,
  type V1Lease,
  type V1NodeStatus,
} from '@kubernetes/client-node';
import { signAwsStsProof } from '../agent/aws-proof.ts';
import { discoverCluster } from '../agent/discovery.ts';
import { join } from '../agent/join.ts';
import { nodeFilePath } from '../agent/node-files.ts';
import { gceIdentityProof, noProof, type ProofProvider } from '../agent/proofs.ts';
import { retryTransient } from '../agent/retry.ts';
import { describeError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { challengeEndpointOf } from '../protocol/challenge.ts';
import { Backoff } from '../runtime/backoff.ts';
import { awsProviderID, simInstanceId } from './aws/scenario.ts';
import { type ServerCloudDevCluster, sourceAddressRelay } from './dev-clouds.ts';
import {
  type AnyDevCluster,
  devGceAudience,
  gceProviderID,
  kubeletNodeStatus,
  nodeLease,
} from './dev-cluster.ts';

/** Options of {@link startJoiningNodes}. */
export interface JoiningNodesOptions {
  cluster: AnyDevCluster;
  /** The bootstrap endpoint and the CA pin the nodes are given. */
  server: string;
  caPin: string;
  /** How many machines join. */
  count: number;
  /**
   * `cloud`: prove identity as the cloud lets an instance (STS, an identity token, the server id or
   * attested document from its metadata service, with the callback or its own source address where
   * the cloud's verifier needs them); `none`: no proof (for the queue).
   */
  proof: 'cloud' | 'none';
  /** Where each node's credentials are written (`<dir>/<instance id>/`). */
  dir: string;
  /** The instance group they belong to (default the first worker group). */
  instanceGroup?: string;
  /** Called whenever a node's state changes. */
  onChange?: (status: JoiningStatus) => void;
  logger?: Logger;
}

/** Where the joining nodes are. */
export interface JoiningStatus {
  total: number;
  joined: number;
  waiting: number;
  failed: number;
}

/** The joining machines: their status, and a promise that settles when every one has finished. */
export interface JoiningNodes {
  nodes: string[];
  status(): JoiningStatus;
  done: Promise<void>;
  /** Stops waiting for approvals. */
  stop(): void;
}

/** Registers the Node and its heartbeat Lease as its kubelet would: with the node's own credentials, its providerID and address. */
async function register(kubeconfigPath: string, name: string, providerID: string, ip: string): Promise<void> {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(kubeconfigPath);
  await kubeConfig.makeApiClient(CoreV1Api).createNode({
    body: {
      metadata: { name, labels: { 'kubernetes.io/hostname': name } },
      spec: { providerID },
      // The client's V1NodeStatus wants Date objects; the wire format is the same strings.
      status: kubeletNodeStatus(name, ip) as V1NodeStatus,
    },
  });
  const lease = nodeLease(name);
  await kubeConfig.makeApiClient(CoordinationV1Api).createNamespacedLease({
    namespace: lease.metadata.namespace as string,
    body: lease as V1Lease,
  });
}

/** How many joining machines each simulated cluster has launched so far. */
const machinesLaunched = new WeakMap<AnyDevCluster, number>();

/** A new machine: the Node it becomes and how it proves who it is. */
interface Machine {
  name: string;
  providerID: string;
  ip: string;
  proof: ProofProvider;
  /** Where it answers kops' callback challenge (its own address, kops' port), on a callback cloud. */
  challengeListen?: string;
  /** The address its requests must leave from (OpenStack checks the source address). */
  sourceAddress?: string;
}

/** Launches `count` servers of `instanceGroup` on a server cloud, proving themselves as its nodes do. */
function launchServers(
  cluster: ServerCloudDevCluster,
  instanceGroup: string,
  count: number,
  proof: JoiningNodesOptions['proof'],
): Machine[] {
  return Array.from({ length: count }, () => {
    const server = cluster.launch(instanceGroup);
    const machine = { name: server.name, providerID: server.providerID, ip: server.address };
    if (proof === 'none') return { ...machine, proof: noProof };
    return {
      ...machine,
      proof: server.proof,
      ...(cluster.sim.callback
        ? { challengeListen: challengeEndpointOf(server.address) }
        : { sourceAddress: server.address }),
    };
  });
}

/** Launches `count` instances of `instanceGroup` in the cloud of `cluster`, numbered from `first`. */
function launchMachines(
  cluster: AnyDevCluster,
  instanceGroup: string,
  first: number,
  count: number,
  proof: JoiningNodesOptions['proof'],
): Machine[] {
  if (cluster.cloud !== 'aws' && cluster.cloud !== 'gce') {
    return launchServers(cluster, instanceGroup, count, proof);
  }
  if (cluster.cloud === 'gce') {
    // A MIG of its own, from the group's template (a scale-up, as the autoscaler would do it).
    const instances = cluster.gce.seedInstanceGroup({
      zone: cluster.zone,
      instanceGroup,
      mig: `a-${instanceGroup}-join-${first}`.slice(0, 63),
      count,
      clusterName: cluster.clusterName,
    });
    return instances.map((instance) => ({
      name: instance.name,
      providerID: gceProviderID(cluster.project, instance),
      ip: instance.networkIP,
      proof:
        proof === 'cloud'
          ? gceIdentityProof({
              audience: devGceAudience,
              identityUrl: `${cluster.gce.metadataUri}/instance/service-accounts/default/identity?instance=${instance.zone}/${instance.name}`,
            })
          : noProof,
    }));
  }
  const zone = `${cluster.region}a`;
  const instances = Array.from({ length: count }, (_, i) => {
    const n = first + i;
    return {
      id: simInstanceId(50_000 + n),
      zone,
      privateIp: `172.20.${200 + Math.floor(n / 250)}.${(n % 250) + 4}`,
    };
  });
  cluster.aws.ec2.addInstances(instances.map((m) => ({ ...m, cluster: cluster.clusterName, instanceGroup })));
  return instances.map((instance) => {
    const session = cluster.aws.sts.addInstanceProfileSession(`nodes.${cluster.clusterName}`, instance.id);
    return {
      name: instance.id,
      providerID: awsProviderID(instance),
      ip: instance.privateIp,
      proof: proof === 'cloud' ? async (body) => signAwsStsProof(body, session, cluster.region, 2) : noProof,
    };
  });
}

/** The counts of a joining batch, and who to tell when they change. */
interface Progress {
  status: JoiningStatus;
  changed(): void;
}

/**
 * One machine joining: discovery (the leader publishes cluster-info shortly after start; until then
 * discovery answers 503), the real `join`, then its Node registered with the credentials it got.
 */
async function joinMachine(
  machine: Machine,
  options: JoiningNodesOptions,
  progress: Progress,
  signal: AbortSignal,
  logger: Logger,
): Promise<void> {
  const { status, changed } = progress;
  let waiting = false;
  let relay: { url: string; close(): Promise<void> } | undefined;
  try {
    const discovered = await retryTransient(
      () => discoverCluster({ url: options.server, caPins: [options.caPin] }),
      {
        deadline: performance.now() + 60_000,
        backoff: new Backoff({ initialMs: 200, maxMs: 2000 }),
        what: 'discovery',
        signal,
      },
    );
    const dir = joinPath(options.dir, machine.name);
    relay = machine.sourceAddress
      ? await sourceAddressRelay(new URL(options.server), machine.sourceAddress)
      : undefined;
    await join({
      server: relay?.url ?? options.server,
      caBundlePem: discovered.caBundlePem,
      apiServer: discovered.server,
      nodeName: machine.name,
      dir,
      proof: machine.proof,
      ...(machine.challengeListen
        ? { challenge: { clusterName: options.cluster.clusterName, listen: machine.challengeListen } }
        : {}),
      servingCertificate: options.proof === 'cloud',
      retry: { initialMs: 200, maxMs: 2000 },
      signal,
      progress: (line) => {
        if (!waiting && line.startsWith('waiting for approval')) {
          waiting = true;
          status.waiting++;
          changed();
        }
      },
    });
    await register(nodeFilePath(dir, 'kubeconfig'), machine.name, machine.providerID, machine.ip);
    status.joined++;
  } catch (err) {
    if (!signal.aborted) {
      status.failed++;
      logger.warn({ node: machine.name, err: describeError(err) }, 'simulated node could not join');
    }
  } finally {
    await relay?.close();
    if (waiting) status.waiting--;
    changed();
  }
}

/** Starts `count` machines joining the cluster through the bootstrap endpoint. */
export function startJoiningNodes(options: JoiningNodesOptions): JoiningNodes {
  const { cluster } = options;
  const logger = options.logger ?? silentLogger;
  const stop = new AbortController();
  const instanceGroup =
    options.instanceGroup ?? [...cluster.nodesByGroup.keys()].find((ig) => ig.startsWith('nodes')) ?? 'nodes';
  const status: JoiningStatus = { total: options.count, joined: 0, waiting: 0, failed: 0 };
  const progress = { status, changed: () => options.onChange?.({ ...status }) };
  // Each batch gets machines of its own, so a second batch is not refused as already registered.
  const first = machinesLaunched.get(cluster) ?? 0;
  machinesLaunched.set(cluster, first + options.count);
  const machines = launchMachines(cluster, instanceGroup, first, options.count, options.proof);
  const joining = machines.map((machine) => joinMachine(machine, options, progress, stop.signal, logger));
  return {
    nodes: machines.map((m) => m.name),
    status: () => ({ ...status }),
    done: Promise.all(joining).then(() => undefined),
    stop: () => stop.abort(),
  };
}
