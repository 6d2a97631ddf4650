import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Registry } from 'prom-client';
import { azureProof } from '../../agent/azure-proof.ts';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import { cloudCallMetrics } from '../metrics.ts';
import { azureAttestationVerifier } from './attestation-trust.ts';

let sim: AzureSimulator;
let document: string;
const body = Buffer.from('{"trust":1}');

before(async () => {
  sim = await startAzureSimulator();
  const vm = sim.world.addVm('vm-1');
  sim.attestation.embed = 'leaf';
  document = ((await azureProof({ imdsUrl: sim.imdsUrlOf(vm.name) })(body)) as string).split(
    ' ',
  )[2] as string;
});
after(() => sim.close());

test("by default only Node's root store is trusted: the simulator's signer is not", async () => {
  await assert.rejects(
    azureAttestationVerifier({ pkiUrl: sim.pkiUrl }).verify(document, body),
    /does not chain/,
  );
});

test('configured roots are trusted, and the missing issuer is fetched from the configured repository', async () => {
  const verified = await azureAttestationVerifier({
    rootsPem: sim.authority.rootPem,
    pkiUrl: sim.pkiUrl,
  }).verify(document, body);
  assert.equal(verified.subscriptionId, sim.world.subscriptionId);
  sim.clearCalls();
  await azureAttestationVerifier({
    rootsPem: sim.authority.rootPem,
    intermediatesPem: sim.authority.issuingPem,
    pkiUrl: sim.pkiUrl,
  }).verify(document, body);
  assert.equal(sim.count('pki.certificate'), 0, 'configured intermediates need no fetch');
});

test("the repository's downloads are counted as Azure cloud calls (pki.certificate)", async () => {
  const registry = new Registry();
  await azureAttestationVerifier({
    rootsPem: sim.authority.rootPem,
    pkiUrl: sim.pkiUrl,
    cloudCalls: cloudCallMetrics(registry),
  }).verify(document, body);
  assert.equal((await cloudRequests(registry))['azure pki.certificate ok'], 1);
});
