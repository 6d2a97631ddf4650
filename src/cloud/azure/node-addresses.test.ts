/**
 * An Azure node's identity carries the addresses the Azure cloud-controller-manager gives its Node
 * (kubernetes-sigs/cloud-provider-azure pkg/provider/azure_instances_v1.go `addressGetter`: InternalIP
 * = the private address of the primary interface's primary IP configuration, Hostname = the node
 * name, ExternalIP = the public address bound to that IP configuration; azure_vmss.go / azure_standard.go
 * `GetIPByNodeName`, `getPrimaryInterfaceID`, azure_standard.go `getPrimaryIPConfig`), so that the
 * kubelet's serving CSR, whose SANs are those addresses, is approved. Public addresses are read as
 * Microsoft.Network lists them, one paged listing per scale set (vmssPublicIpAddress.json in
 * Azure/azure-rest-api-specs), against the simulator speaking that shape over HTTPS.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CertificatesV1Api } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { isCloudVerdict } from '../../bootstrap/dependency.ts';
import { kubeletServingSigner } from '../../controllers/csr-approver/checks.ts';
import { CsrApprover } from '../../controllers/csr-approver/csr-approver.ts';
import type { KopsError } from '../../errors.ts';
import { csrInformer } from '../../kube/shared-informer.ts';
import { buildCsrPem } from '../../pki/csr-build.ts';
import { generateKey } from '../../pki/keys.ts';
import { type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import type { ArmRewrite } from '../../sim/azure/arm.ts';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import type { SimVm } from '../../sim/azure/world.ts';
import { simAzureClient } from '../../testing/azure-client.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import type { IdentifyResult, InstanceAddress, NodeIdentity } from '../types.ts';
import type { AzureClient } from './client.ts';
import { AzureCloudGroups } from './cloud-groups.ts';
import { AzureNodeIdentifier } from './node-identifier.ts';

const cluster = 'addr.example.com';
const publicListing = 'publicIPAddresses.listVirtualMachineScaleSetPublicIPAddresses';
let sim: AzureSimulator;
/** A scale set whose VMs have public addresses (kops' `associatePublicIP`). */
let exposed: SimVm[];
/** A scale set without. */
let internal: SimVm[];

before(async () => {
  sim = await startAzureSimulator({ pageSize: 50 });
  sim.setReadBucket(undefined);
  const groups = sim.world.seedKopsCluster(cluster, [
    { name: 'exposed', count: 120, associatePublicIP: true },
    { name: 'internal', count: 60 },
  ]);
  exposed = groups.get('exposed') as SimVm[];
  internal = groups.get('internal') as SimVm[];
});
after(() => sim.close());

function client(registry?: Registry): AzureClient {
  return simAzureClient(sim, { registry });
}

function identifier(registry?: Registry): AzureNodeIdentifier {
  return new AzureNodeIdentifier({ client: client(registry), clusterName: cluster, coalesceWindowMs: 1 });
}

function identity(result: IdentifyResult | undefined): NodeIdentity {
  assert.ok(result?.ok, result && !result.ok ? result.error.message : 'no result');
  return result.identity;
}

function failure(result: IdentifyResult | undefined): KopsError {
  assert.ok(result && !result.ok, `expected a failure, got ${JSON.stringify(result)}`);
  return result.error as KopsError;
}

async function identify(vm: SimVm): Promise<IdentifyResult | undefined> {
  const pid = sim.world.providerID(vm);
  return (await identifier().identify([pid])).get(pid);
}

const ofType = (addresses: InstanceAddress[], type: InstanceAddress['type']) =>
  addresses.filter((a) => a.type === type).map((a) => a.address);

/** Lets the requests of a failed listing still in flight end before the next test queues a fault. */
const quiet = () => new Promise((resolve) => setTimeout(resolve, 100));

describe('azure node addresses through the CSR approver', () => {
  let api: SimApiServer;
  before(async () => {
    api = await startApiServer();
  });
  after(() => api.close());

  /** Registers `vm`'s Node and sends the serving CSR its kubelet sends; resolves to the decision. */
  async function servingCsrOf(vm: SimVm, ipAddresses: string[]) {
    const node = vm.computerName.toLowerCase();
    api.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: node },
      spec: { providerID: sim.world.providerID(vm) },
    });
    const user = { name: `system:node:${node}`, groups: ['system:nodes', 'system:authenticated'] };
    const request = buildCsrPem(generateKey(), {
      subject: { commonName: user.name, organizations: ['system:nodes'] },
      dnsNames: [node],
      ipAddresses,
    });
    const name = `csr-${node}`;
    await api
      .kubeConfig(user)
      .makeApiClient(CertificatesV1Api)
      .createCertificateSigningRequest({
        body: {
          metadata: { name },
          spec: {
            request: Buffer.from(request).toString('base64'),
            signerName: kubeletServingSigner,
            usages: ['digital signature', 'server auth'],
          },
        },
      });
    const stop = new AbortController();
    const kubeConfig = api.kubeConfig();
    const running = new CsrApprover({
      kubeConfig,
      csrs: csrInformer(kubeConfig),
      identifier: identifier(),
      registry: new Registry(),
    }).start(stop.signal);
    try {
      for (let i = 0; i < 1000; i++) {
        const status = api.store.get('certificatesigningrequests', undefined, name)?.['status'] as
          | { conditions?: { type: string; reason: string; message: string }[] }
          | undefined;
        const [condition] = status?.conditions ?? [];
        if (condition) return condition;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      assert.fail(`CSR ${name} was never decided`);
    } finally {
      stop.abort();
      await running;
    }
  }

  test('azure: a scale-set VM with a public IP has its kubelet serving CSR (InternalIP, ExternalIP, Hostname) approved', async () => {
    const vm = exposed[4] as SimVm;
    assert.ok(vm.publicIp);
    const condition = await servingCsrOf(vm, [vm.privateIp, vm.publicIp]);
    assert.equal(condition.type, 'Approved', condition.message);
  });

  test("azure: a serving CSR naming another VM's public IP is denied, naming it", async () => {
    const vm = exposed[5] as SimVm;
    const other = (exposed[6] as SimVm).publicIp as string;
    const condition = await servingCsrOf(vm, [vm.privateIp, other]);
    assert.equal(condition.type, 'Denied');
    assert.equal(condition.reason, 'SubjectAltNamesNotOfInstance');
    assert.match(condition.message, new RegExp(other.replaceAll('.', '\\.')));
  });
});

test('azure: a VM with a public IP is identified with InternalIP, Hostname and ExternalIP, in the order the CCM gives them', async () => {
  const vm = exposed[0] as SimVm;
  assert.deepEqual(identity(await identify(vm)).addresses, [
    { type: 'InternalIP', address: vm.privateIp },
    { type: 'Hostname', address: vm.computerName.toLowerCase() },
    { type: 'ExternalIP', address: vm.publicIp },
  ]);
  assert.deepEqual(ofType(identity(await identify(internal[0] as SimVm)).addresses, 'ExternalIP'), []);
});

test("azure: a public IP bound to another VM's IP configuration is not taken, by either VM", async () => {
  const [a, b] = [exposed[10] as SimVm, exposed[11] as SimVm];
  type Config = { id: string; properties: { publicIPAddress?: { id: string } } };
  type Nic = { properties: { virtualMachine: { id: string }; ipConfigurations: Config[] } };
  type PublicIp = { id: string; properties: { ipAddress: string; ipConfiguration: { id: string } } };
  const configOf = (page: { value: Nic[] }, vm: SimVm) =>
    page.value.find((n) => n.properties.virtualMachine.id === sim.world.resourceId(vm))?.properties
      .ipConfigurations[0];
  const cases: [string, string, ArmRewrite][] = [
    [
      // ARM's record of b's public address says it is bound to a's IP configuration.
      "b's public address bound to a's IP configuration",
      publicListing,
      ({ body }) => {
        const page = body as { value: PublicIp[] };
        const ofA = page.value.find((p) => p.properties.ipAddress === a.publicIp);
        const ofB = page.value.find((p) => p.properties.ipAddress === b.publicIp);
        if (ofA && ofB) ofB.properties.ipConfiguration = { id: ofA.properties.ipConfiguration.id };
        return { body: page };
      },
    ],
    [
      // b's IP configuration names a's public address, which is bound to a's configuration.
      "b's IP configuration naming a's public address",
      'networkInterfaces.listVirtualMachineScaleSetNetworkInterfaces',
      ({ body }) => {
        const page = body as { value: Nic[] };
        const [ofA, ofB] = [configOf(page, a), configOf(page, b)];
        if (ofA?.properties.publicIPAddress && ofB)
          ofB.properties.publicIPAddress = ofA.properties.publicIPAddress;
        return { body: page };
      },
    ],
  ];
  for (const [what, operation, rewrite] of cases) {
    sim.resetFaults();
    sim.rewriteNext(3, rewrite, operation);
    try {
      const results = await identifier().identify([a, b].map((vm) => sim.world.providerID(vm)));
      const external = (vm: SimVm) =>
        ofType(identity(results.get(sim.world.providerID(vm))).addresses, 'ExternalIP');
      assert.deepEqual(external(a), [a.publicIp], what);
      assert.deepEqual(external(b), [], what);
    } finally {
      await quiet();
      sim.resetFaults();
    }
  }
});

test('azure: with several interfaces and IP configurations, the primary interface is the one read, every IP configuration of it', async () => {
  const vm = sim.world.addScaleSetVm(`exposed.${cluster}`);
  vm.publicIp = sim.world.allocatePublicIp();
  // Dual-stack: an IPv6 configuration with a public IPv6 address, on the primary interface.
  vm.moreIpConfigs = [{ privateIp: 'fd00:10::5', publicIp: '2603:1030:20c::5' }];
  // A second interface, listed after the primary one: not the CCM's, so not the identity's.
  vm.moreNics = [
    { name: 'storage', privateIp: sim.world.allocatePrivateIp(), publicIp: sim.world.allocatePublicIp() },
  ];
  try {
    const { addresses } = identity(await identify(vm));
    assert.deepEqual(ofType(addresses, 'InternalIP'), [vm.privateIp, 'fd00:10::5']);
    assert.deepEqual(ofType(addresses, 'ExternalIP'), [vm.publicIp, '2603:1030:20c::5']);
    const secondary = vm.moreNics[0];
    for (const address of [secondary?.privateIp, secondary?.publicIp]) {
      assert.ok(!addresses.some((a) => a.address === address), `${address} is the secondary interface's`);
    }
  } finally {
    sim.world.deleteVm(vm.name);
  }
});

test('azure: a standalone VM with a public IP gets it, one public-address listing for the whole batch', async () => {
  const tags = { KubernetesCluster: cluster, 'kops.k8s.io_instancegroup': 'bastions' };
  const solos = ['bastion-a', 'bastion-b', 'bastion-c'].map((name) => {
    const vm = sim.world.addVm(name, tags);
    vm.publicIp = sim.world.allocatePublicIp();
    return vm;
  });
  const plain = sim.world.addVm('bastion-plain', tags);
  // A second interface with its own public address: listed in the resource group, but not the primary's.
  const second = {
    name: 'backup',
    privateIp: sim.world.allocatePrivateIp(),
    publicIp: sim.world.allocatePublicIp(),
  };
  (solos[0] as SimVm).moreNics = [second];
  try {
    sim.clearCalls();
    const ids = [...solos, plain].map((vm) => sim.world.providerID(vm));
    const results = await identifier().identify(ids);
    for (const vm of solos) {
      const { addresses } = identity(results.get(sim.world.providerID(vm)));
      assert.deepEqual(ofType(addresses, 'ExternalIP'), [vm.publicIp]);
      assert.deepEqual(ofType(addresses, 'InternalIP'), [vm.privateIp]);
    }
    assert.deepEqual(ofType(identity(results.get(sim.world.providerID(plain))).addresses, 'ExternalIP'), []);
    assert.equal(sim.count('publicIPAddresses.list'), 1);
    assert.equal(sim.count('virtualMachines.get'), 4);
    assert.equal(sim.count('networkInterfaces.get'), 4);
  } finally {
    for (const vm of [...solos, plain]) sim.world.deleteVm(vm.name);
  }
});

test('azure: a storm costs one paged public-address listing per scale set that has public addresses, and the cloud groups none', async () => {
  const registry = new Registry();
  const id = identifier(registry);
  sim.clearCalls();
  const all = [...exposed, ...internal].map((vm) => sim.world.providerID(vm));
  const results = await Promise.all([id.identify(all.slice(0, 90)), id.identify(all.slice(90))]);
  for (const half of results) for (const result of half.values()) identity(result);
  // 120 VMs at 50 a page: 3 pages each of VMs, interfaces and public addresses; the 60 internal
  // VMs: 2 pages of VMs and of interfaces, and no public-address listing (no interface has one).
  assert.equal(sim.count('virtualMachineScaleSetVMs.list'), 5);
  assert.equal(sim.count('networkInterfaces.listVirtualMachineScaleSetNetworkInterfaces'), 5);
  assert.equal(sim.count(publicListing), 3);
  assert.equal(sim.calls.filter((c) => !c.operation.startsWith('imds')).length, 13);
  const counted = await cloudRequests(registry);
  assert.equal(counted[`azure ${publicListing} ok`], 3);
  sim.clearCalls();
  await new AzureCloudGroups({ client: client() }).list(cluster);
  assert.equal(sim.count(publicListing), 0, 'validation and metrics need no addresses');
});

test("azure: the public-address listing failing (5xx, 429, 404, 403) is a fault for that scale set's nodes, never a denial, and is read again", async () => {
  const vm = exposed[20] as SimVm;
  const other = internal[20] as SimVm;
  // A 404 or 403 refuses the controller's own listing: it says nothing about the node (listingFault).
  for (const [status, name] of [
    [503, 'UnavailableError'],
    [429, 'RateLimitedError'],
    [404, 'UnavailableError'],
    [403, 'UnavailableError'],
  ] as const) {
    sim.failNext(1, status, publicListing);
    try {
      const id = identifier();
      const ids = [vm, other].map((v) => sim.world.providerID(v));
      const results = await id.identify(ids);
      const error = failure(results.get(sim.world.providerID(vm)));
      assert.equal(error.name, name, `${status}: ${error.message}`);
      assert.equal(isCloudVerdict(error), false, `${status}`);
      identity(results.get(sim.world.providerID(other)));
      // Not cached: the next lookup reads again and succeeds.
      const again = await id.identify([sim.world.providerID(vm)]);
      assert.deepEqual(ofType(identity(again.get(sim.world.providerID(vm))).addresses, 'ExternalIP'), [
        vm.publicIp,
      ]);
    } finally {
      await quiet();
      sim.resetFaults();
    }
  }
});

test("azure: the resource group's public-address listing failing is a fault for the standalone VMs that have one, not for the others", async () => {
  const tags = { KubernetesCluster: cluster, 'kops.k8s.io_instancegroup': 'bastions' };
  const exposedSolo = sim.world.addVm('bastion-exposed', tags);
  exposedSolo.publicIp = sim.world.allocatePublicIp();
  const plain = sim.world.addVm('bastion-internal', tags);
  try {
    for (const status of [503, 404]) {
      sim.failNext(1, status, 'publicIPAddresses.list');
      const results = await identifier().identify([exposedSolo, plain].map((v) => sim.world.providerID(v)));
      const error = failure(results.get(sim.world.providerID(exposedSolo)));
      assert.equal(error.kind, 'unavailable', `${status}: ${error.message}`);
      assert.equal(isCloudVerdict(error), false);
      identity(results.get(sim.world.providerID(plain)));
      sim.resetFaults();
    }
  } finally {
    sim.resetFaults();
    for (const vm of [exposedSolo, plain]) sim.world.deleteVm(vm.name);
  }
});

test('azure: a public-address listing it cannot read is a fault (malformed-answer), never an identity without it', async () => {
  const vm = exposed[30] as SimVm;
  type Page = { value?: { id: string; properties: Record<string, unknown> }[] };
  const rewrites: [string, ArmRewrite][] = [
    [
      'an address that is not a string',
      ({ body }) => {
        const page = body as Page;
        for (const p of page.value ?? []) p.properties['ipAddress'] = 20;
        return { body: page };
      },
    ],
    [
      'an address that is no IP',
      ({ body }) => {
        const page = body as Page;
        for (const p of page.value ?? []) p.properties['ipAddress'] = 'pending';
        return { body: page };
      },
    ],
    ['a page without its value list', () => ({ body: { error: { code: 'InternalError' } } })],
    [
      'a record without an id',
      ({ body }) => {
        const page = body as Page;
        for (const p of page.value ?? []) (p as { id?: string }).id = undefined;
        return { body: page };
      },
    ],
    [
      'the same public address record twice with different addresses',
      ({ body }) => {
        const page = body as Page;
        const first = page.value?.[0];
        if (first)
          page.value?.push({ ...first, properties: { ...first.properties, ipAddress: '20.255.0.1' } });
        return { body: page };
      },
    ],
  ];
  for (const [what, rewrite] of rewrites) {
    sim.resetFaults();
    sim.rewriteNext(3, rewrite, publicListing);
    try {
      const error = failure(await identify(vm));
      assert.equal(error.kind, 'unavailable', `${what}: ${error.message}`);
      assert.equal(error.reasonCode, 'malformed-answer', `${what}: ${error.message}`);
    } finally {
      await quiet();
      sim.resetFaults();
    }
  }
});
