import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type AzureSimulator, startAzureSimulator } from './simulator.ts';

let sim: AzureSimulator;
let token: string;

before(async () => {
  sim = await startAzureSimulator({ pageSize: 2, readBucket: { capacity: 3, refillPerSecond: 0.001 } });
  sim.world.seedKopsCluster('c.example.com', [{ name: 'nodes', count: 3 }]);
  token = (await sim.credential.getToken('https://management.azure.com/.default'))?.token as string;
});
after(() => sim.close());

/** A GET to ARM with the simulator's CA trusted (fetch cannot take a CA, so node:https is used). */
async function arm(
  path: string,
  bearer = token,
): Promise<{ status: number; headers: Record<string, unknown>; body: Record<string, unknown> }> {
  const { request } = await import('node:https');
  return new Promise((resolve, reject) => {
    const req = request(
      `${sim.armEndpoint}${path}`,
      { ca: sim.caPem, headers: { authorization: `Bearer ${bearer}` } },
      (res) => {
        let text = '';
        res.on('data', (chunk) => {
          text += chunk;
        });
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: JSON.parse(text) }),
        );
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const rg = () =>
  `/subscriptions/${sim.world.subscriptionId}/resourceGroups/${sim.world.resourceGroup}/providers/Microsoft.Compute`;

test('ARM wants a token the IMDS issued, and an api-version, answering its error body', async () => {
  const noToken = await arm(`${rg()}/virtualMachineScaleSets?api-version=2026-04-01`, 'forged');
  assert.equal(noToken.status, 401);
  assert.deepEqual(Object.keys(noToken.body), ['error']);
  assert.equal((noToken.body['error'] as { code: string }).code, 'InvalidAuthenticationToken');
  assert.equal((await arm(`${rg()}/virtualMachineScaleSets`)).status, 400);
});

test('lists page through nextLink; the read bucket answers 429 with Retry-After when empty', async () => {
  sim.bucket?.reset();
  const first = await arm(
    `${rg()}/virtualMachineScaleSets/nodes.c.example.com/virtualMachines?api-version=2026-04-01`,
  );
  assert.equal((first.body['value'] as unknown[]).length, 2);
  const next = new URL(first.body['nextLink'] as string);
  assert.equal(next.origin, sim.armEndpoint);
  const second = await arm(`${next.pathname}${next.search}`);
  assert.equal((second.body['value'] as unknown[]).length, 1);
  assert.equal(second.body['nextLink'], undefined);
  assert.equal(second.headers['x-ms-ratelimit-remaining-subscription-reads'], '1');
  await arm(`${rg()}/virtualMachineScaleSets?api-version=2026-04-01`);
  const throttled = await arm(`${rg()}/virtualMachineScaleSets?api-version=2026-04-01`);
  assert.equal(throttled.status, 429);
  assert.ok(Number(throttled.headers['retry-after']) >= 1);
  assert.equal((throttled.body['error'] as { code: string }).code, 'SubscriptionRequestsThrottled');
  sim.bucket?.reset();
});

test("a missing scale-set VM is Compute's NotFound, a missing VM ARM's ResourceNotFound", async () => {
  const vmssVm = await arm(
    `${rg()}/virtualMachineScaleSets/nodes.c.example.com/virtualMachines/99?api-version=2026-04-01`,
  );
  assert.equal(vmssVm.status, 404);
  assert.equal((vmssVm.body['error'] as { code: string }).code, 'NotFound');
  const vm = await arm(`${rg()}/virtualMachines/none?api-version=2026-04-01`);
  assert.equal((vm.body['error'] as { code: string }).code, 'ResourceNotFound');
  sim.bucket?.reset();
});

test('the VM listing carries each instance view with $expand=instanceView: its PowerState, none while creating', async () => {
  sim.bucket?.reset();
  const [first, second] = sim.world.scaleSetVms('nodes.c.example.com');
  assert.ok(first && second);
  first.powerState = 'deallocated';
  second.powerState = undefined;
  try {
    type Listed = { properties: { instanceView?: { statuses: { code: string }[] } } };
    const path = `${rg()}/virtualMachineScaleSets/nodes.c.example.com/virtualMachines`;
    const plain = (await arm(`${path}?api-version=2026-04-01`)).body['value'] as Listed[];
    assert.equal(plain[0]?.properties.instanceView, undefined, 'no instance view without $expand');
    const expanded = (await arm(`${path}?api-version=2026-04-01&$expand=instanceView`)).body[
      'value'
    ] as Listed[];
    const codes = expanded.map((vm) => vm.properties.instanceView?.statuses.map((s) => s.code));
    assert.deepEqual(codes, [
      ['ProvisioningState/succeeded', 'PowerState/deallocated'],
      ['ProvisioningState/creating'],
    ]);
  } finally {
    first.powerState = 'running';
    second.powerState = 'running';
    sim.bucket?.reset();
  }
});

test("a VM's public address is listed per scale set, bound to its IP configuration, which names it back", async () => {
  sim.bucket?.reset();
  const [vm] = sim.world.scaleSetVms('nodes.c.example.com');
  assert.ok(vm);
  vm.publicIp = sim.world.allocatePublicIp();
  try {
    type Config = { id: string; properties: { privateIPAddress: string; publicIPAddress?: { id: string } } };
    type Nic = { properties: { virtualMachine: { id: string }; ipConfigurations: Config[] } };
    type PublicIp = { id: string; properties: { ipAddress: string; ipConfiguration: { id: string } } };
    const set = `${rg()}/virtualMachineScaleSets/nodes.c.example.com`;
    const nics = (await arm(`${set}/networkInterfaces?api-version=2018-10-01`)).body['value'] as Nic[];
    const config = nics.find((n) => n.properties.virtualMachine.id === sim.world.resourceId(vm))?.properties
      .ipConfigurations[0];
    const listed = await arm(`${set}/publicipaddresses?api-version=2018-10-01`);
    const [ip, ...others] = listed.body['value'] as PublicIp[];
    assert.equal(others.length, 0, 'only the one VM with a public address has one');
    assert.equal(ip?.properties.ipAddress, vm.publicIp);
    assert.equal(ip?.properties.ipConfiguration.id, config?.id);
    assert.equal(config?.properties.publicIPAddress?.id, ip?.id);
    // As ARM names a scale-set VM's public address (cloud-provider-azure's vmssPIPConfigurationRE).
    assert.match(
      ip?.id ?? '',
      /\/virtualMachineScaleSets\/[^/]+\/virtualMachines\/\d+\/networkInterfaces\/[^/]+\/ipConfigurations\/[^/]+\/publicIPAddresses\/[^/]+$/,
    );
    const metadata = await fetch(`${sim.imdsUrlOf(vm.name)}/metadata/instance?api-version=2025-04-07`, {
      headers: { Metadata: 'true' },
    });
    const network = ((await metadata.json()) as { network: unknown }).network;
    assert.deepEqual(network, {
      interface: [
        { ipv4: { ipAddress: [{ privateIpAddress: vm.privateIp, publicIpAddress: vm.publicIp }] } },
      ],
    });
  } finally {
    vm.publicIp = undefined;
    sim.bucket?.reset();
  }
});

test('IMDS refuses requests without Metadata: true, with X-Forwarded-For, or with a nonce over 32 characters', async () => {
  const vm = [...sim.world.vms.values()][0];
  assert.ok(vm);
  const url = `${sim.imdsUrlOf(vm.name)}/metadata/attested/document?api-version=2025-04-07&nonce=abc`;
  assert.equal((await fetch(url)).status, 400);
  assert.equal(
    (await fetch(url, { headers: { Metadata: 'true', 'X-Forwarded-For': '10.0.0.9' } })).status,
    400,
  );
  assert.equal((await fetch(`${url}${'0'.repeat(32)}`, { headers: { Metadata: 'true' } })).status, 400);
  const ok = await fetch(url, { headers: { Metadata: 'true' } });
  assert.equal(ok.status, 200);
  assert.equal(((await ok.json()) as { encoding: string }).encoding, 'pkcs7');
});

test('injected faults answer an ARM error, delay, or drop the connection', async () => {
  sim.failNext(1, 503, 'virtualMachineScaleSets.list');
  const failed = await arm(`${rg()}/virtualMachineScaleSets?api-version=2026-04-01`);
  assert.equal(failed.status, 503);
  assert.equal((failed.body['error'] as { code: string }).code, 'ServiceUnavailable');
  sim.dropNext(1, 'virtualMachineScaleSets.list');
  await assert.rejects(arm(`${rg()}/virtualMachineScaleSets?api-version=2026-04-01`));
  assert.equal((await arm(`${rg()}/virtualMachineScaleSets?api-version=2026-04-01`)).status, 200);
});

test('the managed-identity token endpoint answers the Azure SDK, which asks with a trailing slash', async () => {
  const before = sim.count('imds.token');
  for (const path of ['/metadata/identity/oauth2/token', '/metadata/identity/oauth2/token/']) {
    const url = `${sim.imdsEndpoint}${path}?api-version=2018-02-01&resource=https://management.azure.com`;
    const answer = await fetch(url, { headers: { Metadata: 'true' } });
    assert.equal(answer.status, 200, path);
    assert.equal(((await answer.json()) as { token_type: string }).token_type, 'Bearer');
  }
  assert.equal(sim.count('imds.token'), before + 2);
});
