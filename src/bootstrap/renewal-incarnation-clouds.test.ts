/**
 * The incarnation binding end to end on the clouds where kops creates the servers itself (review
 * s14, finding 8): for Azure, Hetzner, DigitalOcean, Linode, Scaleway and OpenStack, a node follows
 * its machine from its first join to its renewal through real sockets — the bootstrap server composed
 * from a kops config as `run` composes it (the cloud's policy, then `renewal`), the simulated API
 * server and the cloud's simulator, nodes that join with their cloud proof (answering kops' callback
 * challenge on their own loopback address, or on OpenStack sending from it) and register a Ready
 * Node, then renewals with the node's kubelet key on the native `/v1/certificates` (the real `join`)
 * and on kops' `/bootstrap` (nodeup's body, `x-kops-renewal`). The cloud-specific suite
 * (renewal-incarnation-end-to-end.test.ts) covers GCE and AWS.
 *
 * Each cloud's policy stamps the id it read at the join (`facts.incarnationId`) and the renewal
 * compares the certificate's with the id the cloud's node identifier reports (`identity.incarnation`):
 * these tests catch the two drifting apart (a case difference between two ARM answers, say), which
 * would refuse every renewal on that cloud.
 *
 * Re-creation under the same name:
 *   - Hetzner, DigitalOcean, Linode, Scaleway, OpenStack: the server is deleted and another created
 *     with its name (DigitalOcean: its private address, kops' node name there); the new server has
 *     a new id, hence a new providerID, so the old certificate is refused naming both ids once the
 *     new machine has registered its Node (before that, its old Node points at a server the cloud no
 *     longer knows, which is refused too).
 *   - Azure: a scale set hands out an instance id once, so a scale-set VM comes back under its name
 *     only when the scale set itself is deleted and created again (`kops delete ig`, then created
 *     again): instance 0 again, the same computer name and providerID, a new vmId; this is the case
 *     tested, the VM read from the scale set's listing. A standalone VM deleted and created again
 *     under its name (same providerID, new vmId; read with a GET) is tested too.

 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join as joinPath } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { azureProof } from '../agent/azure-proof.ts';
import { digitalOceanProof } from '../agent/digitalocean-proof.ts';
import { hetznerProof } from '../agent/hetzner-proof.ts';
import { join } from '../agent/join.ts';
import { linodeProof } from '../agent/linode-proof.ts';
import { openstackProof } from '../agent/openstack-proof.ts';
import type { ProofProvider } from '../agent/proofs.ts';
import { type CurrentCredentials, readCurrentCredentials } from '../agent/renewal.ts';
import { scalewayProof } from '../agent/scaleway-proof.ts';
import { type ConfiguredBootstrap, startConfiguredBootstrap } from '../cli/bootstrap-server.ts';
import { doProviderIds } from '../cloud/digitalocean/droplets.ts';
import type { CloudOverrides } from '../cloud/from-config.ts';
import { hetznerProviderIds } from '../cloud/hetzner/servers.ts';
import { linodeProviderIds } from '../cloud/linode/instances.ts';
import { openstackProviderID } from '../cloud/openstack/cloud-groups.ts';
import { clusterNameKey, instanceGroupKey } from '../cloud/openstack/server.ts';
import { clusterTagPrefix, instanceGroupTagPrefix, scalewayProviderID } from '../cloud/scaleway/server.ts';
import { parseConfig } from '../config/loader.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import { challengeEndpointOf } from '../protocol/challenge.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { startAzureSimulator } from '../sim/azure/simulator.ts';
import type { SimVm } from '../sim/azure/world.ts';
import { sourceAddressRelay } from '../sim/dev-clouds.ts';
import { startDigitalOceanSimulator } from '../sim/digitalocean/simulator.ts';
import { startHetznerSimulator } from '../sim/hetzner/simulator.ts';
import { startLinodeSimulator } from '../sim/linode/simulator.ts';
import { startOpenStackSimulator } from '../sim/openstack/simulator.ts';
import { startScalewaySimulator } from '../sim/scaleway/simulator.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { incarnationIn, kopsKubelet, renewalPaths } from '../testing/renewal-paths.ts';

const ca = createCa();
const caPem = bundlePem(ca);

/** A machine of the cloud: the node it becomes, and how it proves who it is. */
interface Machine {
  /** The node name the cloud's verifier derives from the machine (kops' rule for the cloud). */
  name: string;
  providerID: string;
  /** The id the cloud never gives another machine: what its certificates must carry. */
  id: string;
  /** Its private address as the cloud reports it: where it answers the callback (or sends from). */
  address: string;
  /** The cloud's proof, read from the machine's own (simulated) metadata service. */
  proof: ProofProvider;
}

/** One cloud's simulator, as the tests drive it. */
interface SimulatedCloud {
  /** The cloud's part of the controller config: `cloud`, `server.provider`, its policy. */
  config: { cloud: string; provider: Record<string, unknown>; policy: Record<string, unknown> };
  overrides: CloudOverrides;
  /** Whether nodes answer kops' callback challenge (all but OpenStack, which checks the source address). */
  callback: boolean;
  /** A new running machine of instance group `group`, on `address`. */
  launch(group: string, address: string): Machine;
  /** `machine` deleted, and another created with its name (and address): the new machine. */
  recreate(machine: Machine): Machine;
  /**
   * Where the join and the renewal read the machine when they read it differently (Azure: the
   * policy a GET, the identifier the scale set's listing), with the simulator's count of a read.
   */
  reads?: { join: string; renewal: string; count(operation: string): number };
  close(): Promise<void>;
}

/** One configured bootstrap server in front of a simulated API server and cloud. */
interface Cluster {
  name: string;
  sim: SimApiServer;
  boot: ConfiguredBootstrap;
  cloud: SimulatedCloud;
  /** Every line the server logged (the audit trail among them). */
  lines: string[];
  root: string;
}

async function startCluster(
  name: string,
  root: string,
  startCloud: (root: string) => Promise<SimulatedCloud>,
): Promise<Cluster> {
  const cloud = await startCloud(root);
  const sim = await startApiServer();
  const { logger, lines } = capturedLogger();
  const boot = await startConfiguredBootstrap({
    config: parseConfig({
      clusterName: name,
      cloud: cloud.config.cloud,
      server: { Listen: ':3988', provider: cloud.config.provider },
      bootstrap: { policies: [cloud.config.policy, { name: 'renewal' }] },
    }),
    kubeConfig: sim.kubeConfig(),
    vfsOptions: {},
    cloud: cloud.overrides,
    registry: new Registry(),
    logger,
    server: {
      listen: '127.0.0.1:0',
      serverNames: { ipAddresses: ['127.0.0.1'] },
      ca,
      apiServer: sim.url,
      rateLimit: { burst: 10_000, ratePerSecond: 10_000 },
    },
  });
  return { name, sim, boot, cloud, lines, root };
}

async function stopCluster(cluster: Cluster): Promise<void> {
  await cluster.boot.close();
  await cluster.sim.close();
  await cluster.cloud.close();
  await rm(cluster.root, { recursive: true, force: true });
}

/** The real `join` into a fresh directory of `cluster.root` as `nodeName`; resolves with the directory. */
async function joinWith(
  cluster: Cluster,
  nodeName: string,
  proof: ProofProvider,
  how: { challengeListen?: string; server?: string } = {},
): Promise<string> {
  const dir = await mkdtemp(joinPath(cluster.root, 'node-'));
  await join({
    server: how.server ?? cluster.boot.server.url,
    caBundlePem: caPem + cluster.sim.caCertificate,
    apiServer: cluster.sim.url,
    nodeName,
    dir,
    proof,
    ...(how.challengeListen ? { challenge: { clusterName: cluster.name, listen: how.challengeListen } } : {}),
    servingCertificate: true,
    timeoutMs: 20_000,
    retry: { initialMs: 100, maxMs: 1000 },
  });
  return dir;
}

/** A Node of `name`, Ready, with `providerID` (what the kubelet registers). */
function registerNode(cluster: Cluster, name: string, providerID: string): void {
  cluster.sim.store.create({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name },
    spec: { providerID },
    status: { conditions: [{ type: 'Ready', status: 'True' }] },
  } as never);
}

/** The Node of `name` is gone (the machine went away and its Node with it). */
function removeNode(cluster: Cluster, name: string): void {
  cluster.sim.store.delete('nodes', undefined, name);
}

/**
 * The machine joins with its cloud proof — answering the callback on its own address, or (OpenStack)
 * sending from it — and registers its Node, Ready; resolves with its credentials.
 */
async function joinedReady(cluster: Cluster, machine: Machine): Promise<CurrentCredentials> {
  let dir: string;
  if (cluster.cloud.callback) {
    dir = await joinWith(cluster, machine.name, machine.proof, {
      challengeListen: challengeEndpointOf(machine.address),
    });
  } else {
    const relay = await sourceAddressRelay(new URL(cluster.boot.server.url), machine.address);
    try {
      dir = await joinWith(cluster, machine.name, machine.proof, { server: relay.url });
    } finally {
      await relay.close();
    }
  }
  registerNode(cluster, machine.name, machine.providerID);
  return readCurrentCredentials(dir);
}

const { renewNative, nativeRefusal, renewKops, kopsRefusal } = renewalPaths<Cluster>(caPem, joinWith);

/** `text` matched literally in a RegExp. */
function literal(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * The two tests of one cloud: a machine's join and renewal carry its id throughout; a machine
 * re-created under its name is another machine to the renewal, and the new one joins and renews.
 * `addresses` are the loopback addresses its machines get (each answers the callback on its own).
 */
function describeCloud(
  title: string,
  clusterName: string,
  startCloud: (root: string) => Promise<SimulatedCloud>,
  options: {
    addresses: { first: string; second: string };
    /** More tests of the cloud, on the same cluster. */
    extra?: (cluster: () => Cluster) => void;
  },
): void {
  const { addresses, extra } = options;
  describe(title, () => {
    let cluster: Cluster;
    before(async () => {
      const root = await mkdtemp(joinPath(tmpdir(), 'kops-incarnation-clouds-'));
      cluster = await startCluster(clusterName, root, startCloud);
    });
    after(() => stopCluster(cluster));

    test('a machine joins with its cloud proof; its kubelet certificate names the id the cloud reports, and it renews as that machine on both paths', () =>
      joinsAndRenews(cluster, addresses.first));

    test('the machine deleted and re-created under its name: the old kubelet key renews no more, naming both ids, on either path; the new machine joins and renews', async () => {
      await recreatedUnderItsName(cluster, 'nodes-b', addresses.second, (m) => cluster.cloud.recreate(m));
    });

    extra?.(() => cluster);
  });
}

/**
 * The first test's flow: a machine of group `nodes` on `address` joins; its certificate carries its
 * id; it renews on both paths, and what it is issued carries the id again.
 */
async function joinsAndRenews(cluster: Cluster, address: string): Promise<void> {
  const { reads } = cluster.cloud;
  const counts = () => ({ join: reads?.count(reads.join) ?? 0, renewal: reads?.count(reads.renewal) ?? 0 });
  const machine = cluster.cloud.launch('nodes', address);
  const beforeJoin = counts();
  const own = await joinedReady(cluster, machine);
  assert.ok(own.certificate.subject.includes(`system:node:${machine.name}`), own.certificate.subject);
  assert.equal(incarnationIn(own.certificate), machine.id, 'the join names the machine');
  const beforeRenewal = counts();
  const renewed = await renewNative(cluster, own);
  assert.equal(incarnationIn(renewed.certificate), machine.id, 'the renewal names the machine again');
  assert.notEqual(renewed.certificate.serialNumber, own.certificate.serialNumber);
  assert.equal(incarnationIn(kopsKubelet(await renewKops(cluster, renewed))), machine.id);
  if (reads) {
    // The two reads this test is about were both made: the id of one matched the other's.
    assert.ok(beforeRenewal.join > beforeJoin.join, `the join read ${reads.join}`);
    assert.ok(counts().renewal > beforeRenewal.renewal, `the renewal read ${reads.renewal}`);
  }
}

/**
 * The second test's flow: a machine of `group` on `address` joins; it is re-created under its name
 * by `recreate`; its certificate's renewal is refused naming both ids, the new machine joins and
 * renews as itself, and the old key is still refused after.
 */
async function recreatedUnderItsName(
  cluster: Cluster,
  group: string,
  address: string,
  recreate: (first: Machine) => Machine,
  launch: (group: string, address: string) => Machine = (g, a) => cluster.cloud.launch(g, a),
): Promise<void> {
  const first = launch(group, address);
  const stolen = await joinedReady(cluster, first);
  assert.equal(incarnationIn(stolen.certificate), first.id);

  const second = recreate(first);
  assert.equal(second.name, first.name, 'the same name');
  assert.notEqual(second.id, first.id, 'another machine');
  const told = new RegExp(
    `renewal refused: the certificate was issued to another machine of that name: instance id ${literal(first.id)}, but ${literal(first.name)} is now instance id ${literal(second.id)}`,
  );
  if (second.providerID === first.providerID) {
    // The Node still names the providerID, which is now the new machine's.
    assert.match(await nativeRefusal(cluster, stolen), told);
    assert.match(await kopsRefusal(cluster, stolen), told);
  } else {
    // The old Node names a machine the cloud no longer knows.
    assert.match(
      await nativeRefusal(cluster, stolen),
      new RegExp(`renewal refused: the cloud does not vouch for node ${literal(first.name)}`),
    );
  }

  // The new machine joins once the old kubelet is gone (its Node with it), registers, and renews.
  removeNode(cluster, first.name);
  const own = await joinedReady(cluster, second);
  assert.equal(incarnationIn(own.certificate), second.id);
  assert.match(await nativeRefusal(cluster, stolen), told);
  assert.match(await kopsRefusal(cluster, stolen), told);
  const renewed = await renewNative(cluster, own);
  assert.equal(incarnationIn(renewed.certificate), second.id, 'the renewal names the new machine');
  assert.equal(incarnationIn(kopsKubelet(await renewKops(cluster, renewed))), second.id);
}

// --- The clouds -------------------------------------------------------------------------------------

/** Hetzner: servers labelled as kops labels them; the node is named after the server. */
async function hetzner(clusterName: string): Promise<SimulatedCloud> {
  const sim = await startHetznerSimulator();
  const launch = (group: string, address: string, name = `${group}-0`): Machine => {
    const server = sim.addServer({
      name,
      location: 'fsn1',
      privateIps: [address],
      labels: {
        'kops.k8s.io/cluster': clusterName,
        'kops.k8s.io/instance-group': group,
        'kops.k8s.io/instance-role': 'Node',
      },
    });
    return {
      name: server.name,
      providerID: hetznerProviderIds.format(String(server.id)),
      id: String(server.id),
      address,
      proof: hetznerProof({ metadataUrl: sim.metadataUrl(server.id) }),
    };
  };
  return {
    config: { cloud: 'hetzner', provider: { hetzner: {} }, policy: { name: 'hetzner' } },
    overrides: { hetzner: { endpoint: sim.endpoint, token: sim.token } },
    callback: true,
    launch: (group, address) => launch(group, address),
    recreate: (machine) => {
      const old = sim.servers.get(Number(machine.id));
      assert.ok(old);
      sim.servers.delete(old.id);
      return launch(old.labels['kops.k8s.io/instance-group'] as string, machine.address, machine.name);
    },
    close: () => sim.close(),
  };
}

/** DigitalOcean: droplets tagged as kops tags them; the node is named after the private address. */
async function digitalOcean(clusterName: string): Promise<SimulatedCloud> {
  const sim = await startDigitalOceanSimulator();
  const launch = (group: string, address: string): Machine => {
    const droplet = sim.addDroplet({
      name: `${group}-0`,
      region: 'nyc3',
      privateIp: address,
      tags: [
        `KubernetesCluster:${clusterName.replaceAll('.', '-')}`,
        `kops-instancegroup:${group}`,
        'kops-instance-role:Node',
      ],
    });
    return {
      name: address,
      providerID: doProviderIds.format(String(droplet.id)),
      id: String(droplet.id),
      address,
      proof: digitalOceanProof({ metadataUrl: sim.metadataUrl(droplet.id) }),
    };
  };
  return {
    config: { cloud: 'digitalocean', provider: { do: {} }, policy: { name: 'digitalocean' } },
    overrides: { digitalocean: { endpoint: sim.endpoint, token: sim.token } },
    callback: true,
    launch,
    recreate: (machine) => {
      const old = sim.droplets.get(Number(machine.id));
      assert.ok(old);
      sim.droplets.delete(old.id);
      // The new droplet gets the old one's private address: kops' node name there.
      const group = old.tags.find((t) => t.startsWith('kops-instancegroup:'))?.split(':')[1] as string;
      return launch(group, machine.address);
    },
    close: () => sim.close(),
  };
}

/** Linode: instances tagged as kops tags them; the node is named after the instance's label. */
async function linode(clusterName: string): Promise<SimulatedCloud> {
  const sim = await startLinodeSimulator();
  const launch = (group: string, address: string): Machine => {
    const instance = sim.addInstance({
      label: `${group}-0`,
      region: 'us-ord',
      ipv4: [address],
      tags: [
        `kops.k8s.io/cluster:${clusterName}`,
        `kops.k8s.io/instance-group:${group}`,
        'kops.k8s.io/instance-role:Node',
      ],
    });
    return {
      name: instance.label,
      providerID: linodeProviderIds.format(String(instance.id)),
      id: String(instance.id),
      address,
      proof: linodeProof({ metadataUrl: sim.metadataUrl(instance.id) }),
    };
  };
  return {
    config: { cloud: 'linode', provider: { linode: {} }, policy: { name: 'linode' } },
    overrides: { linode: { origin: sim.origin, token: sim.token } },
    callback: true,
    launch,
    recreate: (machine) => {
      const old = sim.instances.get(Number(machine.id));
      assert.ok(old);
      sim.instances.delete(old.id);
      const group = old.tags
        .find((t) => t.startsWith('kops.k8s.io/instance-group:'))
        ?.split(':')[1] as string;
      return launch(group, machine.address);
    },
    close: () => sim.close(),
  };
}

/** Scaleway: servers tagged as kops tags them, their private address in IPAM; named after the server. */
async function scaleway(clusterName: string): Promise<SimulatedCloud> {
  const sim = await startScalewaySimulator({ zone: 'fr-par-1' });
  const groups = new Map<string, string>();
  const launch = (group: string, address: string): Machine => {
    const server = sim.addServer({
      name: `${group}-0`,
      privateIps: [address],
      tags: [`${clusterTagPrefix}${clusterName}`, `${instanceGroupTagPrefix}${group}`],
    });
    groups.set(server.id, group);
    return {
      name: server.name,
      providerID: scalewayProviderID({ zone: server.zone, id: server.id }),
      id: server.id,
      address,
      proof: scalewayProof({ metadataUrl: sim.metadataUrl(server.id) }),
    };
  };
  return {
    config: { cloud: 'scaleway', provider: { scaleway: {} }, policy: { name: 'scaleway' } },
    overrides: { scaleway: { credentials: sim.credentials } },
    callback: true,
    launch,
    recreate: (machine) => {
      sim.deleteServer(machine.id);
      return launch(groups.get(machine.id) as string, machine.address);
    },
    close: () => sim.close(),
  };
}

/** OpenStack: servers with kops' metadata and a fixed address; no callback, the source address is checked. */
async function openstack(clusterName: string): Promise<SimulatedCloud> {
  const sim = await startOpenStackSimulator();
  const groups = new Map<string, string>();
  const launch = (group: string, address: string): Machine => {
    const server = sim.addServer({
      name: `${group}-0`,
      zone: 'nova',
      fixed: [address],
      metadata: { [clusterNameKey]: clusterName, [instanceGroupKey]: group },
    });
    groups.set(server.id, group);
    return {
      name: server.name,
      providerID: openstackProviderID(server.id),
      id: server.id,
      address,
      proof: openstackProof({ metadataUrl: sim.metadataUrl(server.id) }),
    };
  };
  return {
    config: { cloud: 'openstack', provider: { openstack: {} }, policy: { name: 'openstack' } },
    overrides: { openstack: { auth: sim.passwordAuth } },
    callback: false,
    launch,
    recreate: (machine) => {
      sim.deleteServer(machine.id);
      return launch(groups.get(machine.id) as string, machine.address);
    },
    close: () => sim.close(),
  };
}

/** The Azure simulator with what the tests need beyond {@link SimulatedCloud}: standalone VMs. */
interface SimulatedAzure extends SimulatedCloud {
  launchStandalone(name: string, address: string): Machine;
  recreateStandalone(machine: Machine): Machine;
}

/**
 * Azure: a scale set `<group>.<cluster>` per group, tagged as kops tags it, its VMs named by Azure
 * (`<group><6 base-36 digits>`, the node name lower-cased); the proof is the attested document the
 * VM's IMDS signs. Re-creating a scale-set VM under its name is re-creating its scale set.
 */
async function azure(clusterName: string, root: string): Promise<SimulatedAzure> {
  const sim = await startAzureSimulator({ location: 'eastus' });
  const { world } = sim;
  const rootsFile = joinPath(root, 'azure-attestation-root.pem');
  await writeFile(rootsFile, sim.authority.rootPem);
  const tagsOf = (group: string) => ({
    KubernetesCluster: clusterName,
    'kops.k8s.io_instancegroup': group,
    'k8s.io_role_node': '1',
  });
  const machineOf = (vm: SimVm, address: string): Machine => {
    vm.privateIp = address;
    return {
      name: vm.computerName.toLowerCase(),
      providerID: world.providerID(vm),
      id: vm.vmId,
      address,
      proof: azureProof({ imdsUrl: sim.imdsUrlOf(vm.name) }),
    };
  };
  const vmOf = (machine: Machine): SimVm => {
    const vm = [...world.vms.values()].find((v) => v.vmId === machine.id);
    assert.ok(vm, `VM ${machine.id}`);
    return vm;
  };
  return {
    config: {
      cloud: 'azure',
      provider: { azure: { subscriptionID: world.subscriptionId, resourceGroup: world.resourceGroup } },
      policy: { name: 'azure', rootsFile, pkiRepository: sim.pkiUrl },
    },
    overrides: { azure: { endpoint: sim.armEndpoint, caPem: sim.caPem, credential: sim.credential } },
    callback: true,
    reads: {
      join: 'virtualMachineScaleSetVMs.get',
      renewal: 'virtualMachineScaleSetVMs.list',
      count: (operation) => sim.count(operation),
    },
    launch: (group, address) => {
      const scaleSet = `${group}.${clusterName}`;
      if (!world.scaleSets.has(scaleSet.toLowerCase())) world.addScaleSet(scaleSet, tagsOf(group));
      return machineOf(world.addScaleSetVm(scaleSet, group), address);
    },
    recreate: (machine) => {
      // The scale set goes with its VM and comes back under its name: its instance ids start again.
      const vm = vmOf(machine);
      const set = world.scaleSets.get(vm.scaleSet?.toLowerCase() as string);
      assert.ok(set);
      assert.equal(world.scaleSetVms(set.name).length, 1, 'the only VM of its scale set');
      world.deleteVm(vm.name);
      world.scaleSets.delete(set.name.toLowerCase());
      world.addScaleSet(set.name, set.tags, set.sku);
      const group = set.tags['kops.k8s.io_instancegroup'] as string;
      return machineOf(world.addScaleSetVm(set.name, group), machine.address);
    },
    launchStandalone: (name, address) => machineOf(world.addVm(name, tagsOf('nodes')), address),
    recreateStandalone: (machine) => {
      const vm = vmOf(machine);
      world.deleteVm(vm.name);
      return machineOf(world.addVm(vm.name, vm.tags), machine.address);
    },
    close: () => sim.close(),
  };
}

// Each cloud's machines answer the callback on loopback addresses of their own (kops' port 3987 on
// each), in a range no other test uses.
describeCloud(
  'Azure: a scale-set VM (vmId from ARM GET at the join, from the scale set listing at the renewal)',
  'incarnation-azure.example.com',
  (root) => azure('incarnation-azure.example.com', root),
  {
    addresses: { first: '127.83.1.1', second: '127.83.1.2' },
    extra: (cluster) => {
      test('a standalone VM deleted and re-created under its name (same providerID, new vmId): the old key is refused, the new VM joins and renews', async () => {
        const c = cluster();
        const cloud = c.cloud as SimulatedAzure;
        await recreatedUnderItsName(
          c,
          'solo-node',
          '127.83.1.3',
          (m) => cloud.recreateStandalone(m),
          (name, address) => cloud.launchStandalone(name, address),
        );
      });
    },
  },
);
describeCloud(
  'Hetzner: a server re-created under its name',
  'incarnation-hetzner.example.com',
  () => hetzner('incarnation-hetzner.example.com'),
  { addresses: { first: '127.83.2.1', second: '127.83.2.2' } },
);
describeCloud(
  'DigitalOcean: a droplet re-created on its private address (its node name)',
  'incarnation-do.example.com',
  () => digitalOcean('incarnation-do.example.com'),
  {
    addresses: { first: '127.83.3.1', second: '127.83.3.2' },
  },
);
describeCloud(
  'Linode: an instance re-created under its label',
  'incarnation-linode.example.com',
  () => linode('incarnation-linode.example.com'),
  { addresses: { first: '127.83.4.1', second: '127.83.4.2' } },
);
describeCloud(
  'Scaleway: a server re-created under its name',
  'incarnation-scaleway.example.com',
  () => scaleway('incarnation-scaleway.example.com'),
  { addresses: { first: '127.83.5.1', second: '127.83.5.2' } },
);
describeCloud(
  'OpenStack: a server re-created under its name (no callback: the source address)',
  'incarnation-openstack.example.com',
  () => openstack('incarnation-openstack.example.com'),
  { addresses: { first: '127.83.6.1', second: '127.83.6.2' } },
);
