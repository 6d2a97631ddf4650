import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { nonceForBody } from '../cloud/azure/attested-document.ts';
import { type AzureSimulator, startAzureSimulator } from '../sim/azure/simulator.ts';
import type { SimVm } from '../sim/azure/world.ts';
import { azureProof } from './azure-proof.ts';

let sim: AzureSimulator;
let vm: SimVm;

before(async () => {
  sim = await startAzureSimulator();
  vm = sim.world.seedKopsCluster('c.example.com', [{ name: 'nodes', count: 1 }]).get('nodes')?.[0] as SimVm;
});
after(() => sim.close());

test("makes kops' header from the VM's IMDS: resource id and a document for this body's nonce", async () => {
  const body = Buffer.from('{"csr":"..."}');
  sim.clearCalls();
  const header = (await azureProof({ imdsUrl: sim.imdsUrlOf(vm.name) })(body)) as string;
  const [scheme, resourceId, document] = header.split(' ');
  assert.equal(scheme, 'x-azure-id');
  assert.equal(resourceId, sim.world.resourceId(vm));
  assert.match(document ?? '', /^[A-Za-z0-9+/]+=*$/);
  const asked = sim.calls.find((c) => c.operation === 'imds.attested');
  assert.equal(asked?.query['nonce'], nonceForBody(body));
  assert.equal(asked?.query['api-version'], '2025-04-07');
});

test('IMDS failing or unreachable is an UnavailableError (the node retries)', async () => {
  sim.failNext(1, 500, 'imds.attested');
  await assert.rejects(azureProof({ imdsUrl: sim.imdsUrlOf(vm.name) })(Buffer.from('x')), {
    name: 'UnavailableError',
  });
  await assert.rejects(
    azureProof({ imdsUrl: sim.imdsUrlOf('no-such-vm') })(Buffer.from('x')),
    /answered 404/,
  );
  await assert.rejects(
    azureProof({ imdsUrl: 'http://127.0.0.1:9' })(Buffer.from('x')),
    /cannot reach Azure IMDS/,
  );
});
