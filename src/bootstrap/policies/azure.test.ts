import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { azureProof } from '../../agent/azure-proof.ts';
import { AttestedDocumentVerifier } from '../../cloud/azure/attested-document.ts';
import type { AzureClient } from '../../cloud/azure/client.ts';
import { AiaIntermediates } from '../../cloud/azure/intermediates.ts';
import { createAttestationAuthority, issueAttestationSigner } from '../../sim/azure/attestation.ts';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import type { SimVm } from '../../sim/azure/world.ts';
import { simAzureClient } from '../../testing/azure-client.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { isDependencyFault } from '../dependency.ts';
import type { BootstrapPolicy, PolicyDecision } from '../types.ts';
import { type AzurePolicyOptions, azurePolicy } from './azure.ts';

const cluster = 'prod.example.com';
const now = contextAt(new Date());
let sim: AzureSimulator;
let node: SimVm;
let second: SimVm;

before(async () => {
  sim = await startAzureSimulator();
  const groups = sim.world.seedKopsCluster(cluster, [{ name: 'nodes', count: 2 }]);
  [node, second] = groups.get('nodes') as [SimVm, SimVm];
});
after(() => sim.close());
beforeEach(() => {
  // Every test starts from the simulator's honest signer and clock.
  sim.attestation.signer = sim.authority.signer;
  sim.attestation.now = () => new Date();
  sim.attestation.lifetimeMs = 6 * 3_600_000;
  sim.attestation.embed = 'leaf-and-issuer';
});

function client(): AzureClient {
  return simAzureClient(sim);
}

function policy(overrides: Partial<AzurePolicyOptions> = {}): BootstrapPolicy {
  return azurePolicy({
    clusterName: cluster,
    client: client(),
    attestation: new AttestedDocumentVerifier({ roots: [sim.authority.rootPem] }),
    ...overrides,
  });
}

/** The Authorization header `vm` makes for `body`, through its (simulated) IMDS. */
async function header(vm: SimVm, body: string): Promise<string> {
  return (await azureProof({ imdsUrl: sim.imdsUrlOf(vm.name) })(Buffer.from(body))) as string;
}

function request(authorization: string, body: string) {
  const token = authorization.slice('x-azure-id '.length);
  return testRequest({ body: Buffer.from(body), proof: { kind: 'cloud-id', scheme: 'x-azure-id', token } });
}

async function decide(vm: SimVm, body = '{"node":1}', options: Partial<AzurePolicyOptions> = {}) {
  return policy(options).evaluate(request(await header(vm, body), body), now);
}

function assertDenied(decision: PolicyDecision, reason: RegExp): void {
  assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
  assert.match(decision.reasons.join('; '), reason);
}

test('a kops scale-set VM is approved with the facts ARM gives: node name, group, addresses, challenge endpoint', async () => {
  const decision = await decide(node);
  assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
  if (decision.verdict !== 'approve') return;
  assert.equal(decision.facts.nodeName, node.computerName.toLowerCase());
  assert.equal(decision.facts.instanceGroup, 'nodes');
  assert.deepEqual(decision.facts.ipAddresses, [node.privateIp]);
  assert.deepEqual(decision.facts.dnsNames, []);
  assert.equal(decision.facts.challengeEndpoint, `${node.privateIp}:3987`);
  assert.equal(decision.facts.instanceId, node.name);
  assert.equal(decision.facts.evidence['vmId'], node.vmId);
  // The VM's incarnation, checked equal to the attested document's: the certificates carry it.
  assert.equal(decision.facts.incarnationId, node.vmId);
});

test('abstains for proofs of other clouds and kinds', async () => {
  const p = policy();
  for (const proof of [
    { kind: 'none' as const },
    { kind: 'cloud-id' as const, scheme: 'x-hetzner-id' as const, token: '42' },
  ]) {
    assert.equal((await p.evaluate(testRequest({ proof }), now)).verdict, 'abstain');
  }
});

test('a standalone VM counts only when tagged with this cluster and a group', async () => {
  const tagged = sim.world.addVm('solo-tagged', {
    KubernetesCluster: cluster,
    'kops.k8s.io_instancegroup': 'bastions',
  });
  const approved = await decide(tagged);
  assert.equal(approved.verdict, 'approve', JSON.stringify(approved));
  assertDenied(await decide(sim.world.addVm('solo-untagged')), /tagged KubernetesCluster=\(none\)/);
});

test("attack: another VM's attested document paired with this VM's resource id is denied", async () => {
  const body = '{"node":"forged"}';
  const own = await header(node, body);
  const foreign = await header(second, body);
  const forged = `x-azure-id ${sim.world.resourceId(node)} ${foreign.split(' ')[2]}`;
  assert.notEqual(forged, own);
  assertDenied(await policy().evaluate(request(forged, body), now), /is VM .*'s, not/);
});

test('attack: a document signed for another request body (nonce) is denied', async () => {
  const signedFor = await header(node, '{"keys":"mine"}');
  assertDenied(
    await policy().evaluate(request(signedFor, '{"keys":"attacker"}'), now),
    /nonce is not this request body's/,
  );
});

test('attack: a spent document presented with another body is refused by its nonce, on any replica; the same request may retry', async () => {
  const body = '{"node":"replay"}';
  const authorization = await header(node, body);
  const [first, second] = [policy(), policy()];
  assert.equal((await first.evaluate(request(authorization, body), now)).verdict, 'approve');
  // The same request again (a retry after a lost answer) is let through, on either replica ...
  assert.equal((await second.evaluate(request(authorization, body), now)).verdict, 'approve');
  // ... and the document with any other body (other keys) is refused by both, which share nothing.
  for (const replica of [first, second]) {
    assertDenied(
      await replica.evaluate(request(authorization, '{"node":"other keys"}'), now),
      /nonce is not this request body's/,
    );
  }
});

test('attack: a stale document (created beyond the freshness window) is denied', async () => {
  sim.attestation.now = () => new Date(Date.now() - 10 * 60_000);
  assertDenied(await decide(node), /more than 420 s ago/);
});

test('attack: an expired document is denied even when recently created', async () => {
  sim.attestation.now = () => new Date(Date.now() - 4 * 60_000);
  sim.attestation.lifetimeMs = 30_000;
  assertDenied(await decide(node), /expired at/);
});

test('attack: a document whose signer does not chain to the trusted roots is denied', async () => {
  const rogue = await createAttestationAuthority(sim.world.location, 'Rogue Root');
  sim.attestation.signer = rogue.signer;
  assertDenied(await decide(node), /does not chain to a trusted root/);
});

test('attack: a signer chained to the trusted root but not named *.metadata.azure.com is denied', async () => {
  for (const names of [['metadata.azure.com.evil.example'], ['evil.example'], ['*.metadata.azure.com']]) {
    sim.attestation.signer = await issueAttestationSigner(sim.authority.issuing, names, [
      sim.authority.root.certificate,
    ]);
    assertDenied(await decide(node), /not Azure's metadata service/);
  }
});

test('attack: a tampered document (content or signature bytes changed) is denied', async () => {
  const body = '{"node":"tamper"}';
  const [scheme, id, doc] = (await header(node, body)).split(' ') as [string, string, string];
  const der = Buffer.from(doc, 'base64');
  const at = der.indexOf(Buffer.from(node.vmId));
  der.write(second.vmId, at);
  assertDenied(
    await policy().evaluate(request(`${scheme} ${id} ${der.toString('base64')}`, body), now),
    /signature does not verify/,
  );
  assertDenied(await policy().evaluate(request(`${scheme} ${id} not*base64`, body), now), /not base64/);
  assertDenied(
    await policy().evaluate(request(`${scheme} ${id} ${Buffer.from('junk').toString('base64')}`, body), now),
    /not a PKCS#7/,
  );
});

test("attack: a VM of another cluster's scale set is denied before any ARM call", async () => {
  const other = sim.world
    .seedKopsCluster('other.example.com', [{ name: 'nodes', count: 1 }])
    .get('nodes')?.[0] as SimVm;
  sim.clearCalls();
  assertDenied(await decide(other), /not one of cluster prod\.example\.com's/);
  assert.equal(sim.count('virtualMachineScaleSetVMs.get'), 0);
});

test('attack: a scale set named like ours but tagged with another cluster is denied', async () => {
  sim.world.addScaleSet(`sneaky.${cluster}`, {
    KubernetesCluster: 'other.example.com',
    'kops.k8s.io_instancegroup': 'nodes',
  });
  assertDenied(
    await decide(sim.world.addScaleSetVm(`sneaky.${cluster}`)),
    /tagged KubernetesCluster=other\.example\.com/,
  );
});

test('a scale-set VM without the instance-group tag is denied', async () => {
  sim.world.addScaleSet(`untagged.${cluster}`, { KubernetesCluster: cluster });
  assertDenied(
    await decide(sim.world.addScaleSetVm(`untagged.${cluster}`, 'untagged')),
    /no kops\.k8s\.io_instancegroup tag/,
  );
});

test('a scale-set VM whose instance-group tag kops never writes (a path) is denied', async () => {
  sim.world.addScaleSet(`pathy.${cluster}`, {
    KubernetesCluster: cluster,
    'kops.k8s.io_instancegroup': '../../config',
  });
  assertDenied(
    await decide(sim.world.addScaleSetVm(`pathy.${cluster}`, 'pathy')),
    /kops\.k8s\.io_instancegroup tag "\.\.\/\.\.\/config" is not a kops instance group name/,
  );
});

test('a VM whose computer name is no node name is denied', async () => {
  const odd = sim.world.addScaleSetVm(`nodes.${cluster}`, 'nodes_');
  assertDenied(await decide(odd), /which is not a valid node name/);
});

test('attack: a deleted VM is denied; a stopped one too', async () => {
  const doomed = sim.world.addScaleSetVm(`nodes.${cluster}`);
  const body = '{"node":"gone"}';
  const authorization = await header(doomed, body);
  sim.world.deleteVm(doomed.name);
  assertDenied(await policy().evaluate(request(authorization, body), now), /not found/i);
  const stopped = sim.world.addScaleSetVm(`nodes.${cluster}`);
  const stoppedHeader = await header(stopped, body);
  stopped.powerState = 'deallocated';
  assertDenied(await policy().evaluate(request(stoppedHeader, body), now), /is stopped, not running/);
});

test('resource ids outside our subscription or resource group, or of other types, are denied without ARM calls', async () => {
  const body = '{}';
  const doc = (await header(node, body)).split(' ')[2] as string;
  sim.clearCalls();
  const cases: [string, RegExp][] = [
    [
      sim.world.resourceId(node).replace(sim.world.subscriptionId, '99999999-1111-2222-3333-444444444444'),
      /subscription/,
    ],
    [
      sim.world
        .resourceId(node)
        .replace(`/resourceGroups/${sim.world.resourceGroup}/`, '/resourceGroups/other-rg/'),
      /resource group other-rg/,
    ],
    [
      `/subscriptions/${sim.world.subscriptionId}/resourceGroups/${sim.world.resourceGroup}/providers/Microsoft.Storage/storageAccounts/x`,
      /expected|unsupported/,
    ],
    [`${sim.world.resourceId(node)}/../1`, /not an Azure VM resource id/],
  ];
  for (const [id, reason] of cases) {
    assertDenied(await policy().evaluate(request(`x-azure-id ${id} ${doc}`, body), now), reason);
  }
  assertDenied(
    await policy().evaluate(request(`x-azure-id ${sim.world.resourceId(node)}`, body), now),
    /is not "<ARM resource id> <attested document>"/,
  );
  assert.equal(sim.calls.filter((c) => !c.operation.startsWith('imds')).length, 0);
});

test('ARM failing, throttling, refusing our own credentials or not answering is a dependency fault, never a denial', async () => {
  for (const [status, operation] of [
    [503, 'virtualMachineScaleSetVMs.get'],
    [429, 'virtualMachineScaleSetVMs.get'],
    [403, 'virtualMachineScaleSetVMs.get'],
    [500, 'networkInterfaces.getVirtualMachineScaleSetNetworkInterface'],
  ] as const) {
    const body = `{"fault":${status}}`;
    const authorization = await header(node, body);
    sim.failNext(1, status, operation);
    await assert.rejects(policy().evaluate(request(authorization, body), now), (err: unknown) => {
      assert.ok(isDependencyFault(err), `${status}: ${String(err)}`);
      return true;
    });
  }
  const body = '{"fault":"slow"}';
  const authorization = await header(node, body);
  sim.delayNext(1, 1_000, 'virtualMachineScaleSetVMs.get');
  await assert.rejects(
    policy({ lookupTimeoutMs: 100 }).evaluate(request(authorization, body), now),
    isDependencyFault,
  );
});

test("a document carrying Azure's leaf only is approved through the issuer fetched from the PKI repository; the repository failing is a fault", async () => {
  sim.attestation.embed = 'leaf';
  const attestation = () =>
    new AttestedDocumentVerifier({
      roots: [sim.authority.rootPem],
      fetchIntermediates: new AiaIntermediates({ baseUrl: sim.pkiUrl }),
    });
  assertDenied(await decide(node, '{"leaf":1}'), /does not chain to a trusted root/);
  assert.equal((await decide(node, '{"leaf":2}', { attestation: attestation() })).verdict, 'approve');
  sim.failNext(1, 503, 'pki.certificate');
  const body = '{"leaf":3}';
  await assert.rejects(
    policy({ attestation: attestation() }).evaluate(request(await header(node, body), body), now),
    isDependencyFault,
  );
});

test("a timeCreated in ARM's record of the VM that is no time is a dependency fault (503), never a denial nor dropped", async () => {
  const vm = sim.world
    .seedKopsCluster(cluster, [{ name: 'nodes-bad-time', count: 1 }])
    .get('nodes-bad-time')?.[0];
  assert.ok(vm);
  (vm as { timeCreated: unknown }).timeCreated = 'not a time';
  await assert.rejects(decide(vm), (err: unknown) => {
    assert.ok(isDependencyFault(err), String(err));
    return true;
  });
});
