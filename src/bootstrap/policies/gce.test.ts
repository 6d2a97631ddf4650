import assert from 'node:assert/strict';
import { constants, createHash, createPublicKey, sign } from 'node:crypto';
import { after, before, test } from 'node:test';
import { GceIdentityTokenVerifier, JwksKeyStore } from '../../cloud/gce/identity-token.ts';
import { GceNodeIdentifier } from '../../cloud/gce/node-identifier.ts';
import { KopsError } from '../../errors.ts';
import { simulatorCompute } from '../../sim/gce/clients.ts';
import { type GceSimulator, startGceSimulator } from '../../sim/gce/simulator.ts';
import { testRequest } from '../../testing/bootstrap-request.ts';
import { MemoryReplayGuard } from '../replay-guard.ts';
import type { BootstrapPolicy, PolicyContext } from '../types.ts';
import { type GcePolicyOptions, gcePolicy, kopsGceTpmAudience } from './gce.ts';

const cluster = 'prod.example.com';
const project = 'kops-prod';
const zone = 'us-central1-a';
const audience = 'https://kops-controller.internal.prod.example.com:3988';
let sim: GceSimulator;
let node: string;
let otherClusterNode: string;
const now: PolicyContext = { now: () => new Date() };

before(async () => {
  sim = await startGceSimulator({ project });
  node = sim.world.seedInstanceGroup({ zone, instanceGroup: 'nodes-a', count: 1, clusterName: cluster })[0]!
    .name;
  otherClusterNode = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-b',
    count: 1,
    clusterName: 'other.example.com',
  })[0]!.name;
});
after(() => sim.close());

function policy(overrides: Partial<GcePolicyOptions> = {}): BootstrapPolicy {
  const compute = simulatorCompute(sim);
  return gcePolicy({
    project,
    identifier: new GceNodeIdentifier({ compute, clusterName: cluster, coalesceWindowMs: 1 }),
    tokenVerifier: new GceIdentityTokenVerifier({ keys: new JwksKeyStore({ url: sim.jwksUri }), audience }),
    compute,
    replayGuard: new MemoryReplayGuard(),
    ...overrides,
  });
}

function identityRequest(name: string, options: { audience?: string; issuedAt?: number } = {}) {
  const token = sim.identityToken(zone, name, {
    audience: options.audience ?? audience,
    format: 'full',
    ...(options.issuedAt === undefined ? {} : { issuedAt: options.issuedAt }),
  });
  return testRequest({ proof: { kind: 'gce-identity-token', token } });
}

function tpmRequest(
  name: string,
  body: string,
  options: { signedBody?: string; timestamp?: number; project?: string } = {},
) {
  const data = Buffer.from(
    JSON.stringify({
      gcpProjectID: options.project ?? project,
      zone,
      instance: name,
      requestHash: createHash('sha256')
        .update(options.signedBody ?? body)
        .digest('base64'),
      timestamp: options.timestamp ?? Math.floor(Date.now() / 1000),
      audience: kopsGceTpmAudience,
    }),
  );
  const signature = sign('sha256', data, sim.world.shieldedKeys(project, zone, name).signing);
  const token = Buffer.from(
    JSON.stringify({ data: data.toString('base64'), signature: signature.toString('base64') }),
  ).toString('base64');
  return testRequest({ body: Buffer.from(body), proof: { kind: 'gce-tpm', token } });
}

test('gce approves an identity token: name, group from the MIG template, internal IP', async () => {
  const decision = await policy().evaluate(identityRequest(node), now);
  assert.ok(decision.verdict === 'approve', JSON.stringify(decision));
  assert.equal(decision.facts.nodeName, node);
  assert.equal(decision.facts.instanceGroup, 'nodes-a');
  assert.equal(decision.facts.ipAddresses.length, 1);
  assert.equal(decision.facts.evidence['proof'], 'identity-token');
  // Its certificates name the instance's numeric id (the incarnation extension), which a MIG
  // recreating the instance under its name does not keep.
  assert.equal(decision.facts.incarnationId, sim.world.instance(sim.world.defaultProject, zone, node).id);
});

test('gce puts the IPv6 address of an IPv6 node in its SANs, as kops: internal addresses only', async () => {
  const [v6] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-v6',
    count: 1,
    clusterName: cluster,
  });
  sim.world.updateInstance(zone, v6!.name, {
    ipv6Address: 'fd20:0:0:7::2',
    externalIpv6Range: '2600:1900:4000:7::/96',
  });
  const decision = await policy().evaluate(identityRequest(v6!.name), now);
  assert.ok(decision.verdict === 'approve', JSON.stringify(decision));
  assert.deepEqual(decision.facts.ipAddresses, [v6!.networkIP, 'fd20:0:0:7::2']);
});

test('gce approves a kops TPM proof bound to the body', async () => {
  const decision = await policy().evaluate(tpmRequest(node, '{"tpm":1}'), now);
  assert.ok(decision.verdict === 'approve', JSON.stringify(decision));
  assert.equal(decision.facts.instanceGroup, 'nodes-a');
  assert.equal(decision.facts.evidence['proof'], 'tpm');
});

test('gce approves a TPM proof as a Shielded VM makes it: the RSA attestation key the API publishes, PKCS#1 v1.5 over SHA-256', async () => {
  // instances.getShieldedInstanceIdentity publishes the vTPM's RSA attestation key as a PEM SPKI
  // `signingKey.ekPub`; kops signs with it (go-tpm-tools GceAttestationKeyRSA, kops
  // upup/pkg/fi/cloudup/gce/tpm/gcetpmsigner/tpmauthenticator.go) and verifies with
  // rsa.VerifyPKCS1v15 over SHA-256, refusing any other key type (gcetpmverifier/tpmverifier.go).
  const identity = await simulatorCompute(sim).getShieldedInstanceIdentity(zone, node);
  const published = createPublicKey(identity.signingKey?.ekPub ?? '');
  assert.equal(published.asymmetricKeyType, 'rsa');
  assert.equal(published.asymmetricKeyDetails?.modulusLength, 2048);
  const body = '{"tpm":"rsa"}';
  const data = Buffer.from(
    JSON.stringify({
      gcpProjectID: project,
      zone,
      instance: node,
      requestHash: createHash('sha256').update(body).digest('base64'),
      timestamp: Math.floor(Date.now() / 1000),
      audience: kopsGceTpmAudience,
    }),
  );
  const signature = sign('sha256', data, {
    key: sim.world.shieldedKeys(project, zone, node).signing,
    padding: constants.RSA_PKCS1_PADDING,
  });
  const token = Buffer.from(
    JSON.stringify({ data: data.toString('base64'), signature: signature.toString('base64') }),
  ).toString('base64');
  const decision = await policy().evaluate(
    testRequest({ body: Buffer.from(body), proof: { kind: 'gce-tpm', token } }),
    now,
  );
  assert.ok(decision.verdict === 'approve', JSON.stringify(decision));
});

test('gce abstains without a GCE proof', async () => {
  assert.equal((await policy().evaluate(testRequest(), now)).verdict, 'abstain');
});

test('attack: an identity token for another audience is denied', async () => {
  const decision = await policy().evaluate(identityRequest(node, { audience: 'https://evil.example' }), now);
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /audience/);
});

test('attack: an identity token spent on one request is refused on another (the same token twice)', async () => {
  const p = policy();
  const request = identityRequest(node);
  assert.equal((await p.evaluate(request, now)).verdict, 'approve');
  const again = await p.evaluate({ ...request, body: Buffer.from('{"other":"keys"}') }, now);
  assert.equal(again.verdict, 'deny');
  assert.match(again.reasons[0] ?? '', /already used/);
});

test('the same request presented again with its identity token is its retry, not a replay', async () => {
  const p = policy();
  const request = identityRequest(node);
  assert.equal((await p.evaluate(request, now)).verdict, 'approve');
  const retried = await p.evaluate(request, now);
  assert.equal(retried.verdict, 'approve', JSON.stringify(retried));
});

test('two distinct identity tokens minted in the same second for the same instance both pass', async () => {
  const p = policy();
  const issuedAt = Math.floor(Date.now() / 1000);
  const first = identityRequest(node, { issuedAt });
  sim.issuer.rotate();
  const second = identityRequest(node, { issuedAt });
  assert.notEqual(
    (first.proof as { token: string }).token,
    (second.proof as { token: string }).token,
    'two tokens',
  );
  assert.equal((await p.evaluate(first, now)).verdict, 'approve');
  const decision = await p.evaluate({ ...second, body: Buffer.from('{"second":"request"}') }, now);
  assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
});

test('attack: a spent identity token re-encoded (unused bits of its signature changed) is still a replay', async () => {
  const p = policy();
  const request = identityRequest(node);
  const token = (request.proof as { token: string }).token;
  assert.equal((await p.evaluate(request, now)).verdict, 'approve');
  // An RSA-2048 signature is 342 base64url characters; the last one carries 4 bits nobody reads.
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const last = alphabet.indexOf(token.at(-1) as string);
  const reencoded = token.slice(0, -1) + alphabet[last ^ 1];
  assert.notEqual(reencoded, token);
  const replay = await p.evaluate(
    testRequest({
      body: Buffer.from('{"evil":"keys"}'),
      proof: { kind: 'gce-identity-token', token: reencoded },
    }),
    now,
  );
  assert.equal(replay.verdict, 'deny', JSON.stringify(replay));
  assert.match(replay.reasons[0] ?? '', /already used/);
});

/** Asserts a dependency fault naming `dependency`: the node gets 503 and retries, never a denial. */
function faultOf(dependency: string) {
  return (err: unknown) => {
    assert.ok(err instanceof KopsError, String(err));
    assert.equal(err.kind, 'unavailable', err.message);
    assert.equal(err.details?.['reason'], 'dependency-unavailable', err.message);
    assert.equal(err.details?.['dependency'], dependency, err.message);
    return true;
  };
}

test("Google's token keys unreachable or failing: a dependency fault, never a denial", async () => {
  await assert.rejects(
    policy({
      tokenVerifier: new GceIdentityTokenVerifier({
        keys: new JwksKeyStore({ url: 'http://127.0.0.1:1/oauth2/v3/certs' }),
        audience,
      }),
    }).evaluate(identityRequest(node), now),
    faultOf('gce-identity-keys'),
  );
  sim.failNext(1, 503, 'jwks');
  try {
    await assert.rejects(policy().evaluate(identityRequest(node), now), faultOf('gce-identity-keys'));
  } finally {
    sim.failNext(0, 503);
  }
});

test('the compute API slower than the lookup deadline: a dependency fault', async () => {
  try {
    sim.delayNext(20, 1_000);
    await assert.rejects(
      policy({ lookupTimeoutMs: 200 }).evaluate(identityRequest(node), now),
      faultOf('gce-compute'),
    );
    sim.delayNext(20, 1_000, 'instances.getShieldedInstanceIdentity');
    await assert.rejects(
      policy({ lookupTimeoutMs: 200 }).evaluate(tpmRequest(node, '{"slow":1}'), now),
      faultOf('gce-compute'),
    );
  } finally {
    sim.delayNext(0, 0);
  }
});

test('the compute API failing or throttled while the instance is looked up: a dependency fault', async () => {
  try {
    for (const status of [503, 429]) {
      sim.failNext(20, status);
      await assert.rejects(
        policy().evaluate(identityRequest(node), now),
        faultOf('gce-compute'),
        `HTTP ${status}`,
      );
      await assert.rejects(
        policy().evaluate(tpmRequest(node, `{"tpm":${status}}`), now),
        faultOf('gce-compute'),
        `TPM, HTTP ${status}`,
      );
    }
  } finally {
    sim.failNext(0, 503);
  }
});

test('attack: a stale identity token is denied', async () => {
  const decision = await policy().evaluate(
    identityRequest(node, { issuedAt: Math.floor(Date.now() / 1000) - 900 }),
    now,
  );
  assert.equal(decision.verdict, 'deny');
  // iat is Google's: only this controller's clock can be wrong.
  assert.match(
    decision.reasons[0] ?? '',
    /issued by Google 90\d s ago; .*accepted within 300 s .*check this controller's clock/,
  );
  assert.doesNotMatch(decision.reasons[0] ?? '', /node's clock/);
});

test('attack: an instance of another cluster is denied', async () => {
  const decision = await policy().evaluate(identityRequest(otherClusterNode), now);
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /does not vouch/);
});

test('attack: an identity token minted on the previous incarnation of a name (its MIG recreated the instance) is denied', async () => {
  const [old] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-reborn',
    count: 1,
    clusterName: cluster,
  });
  const stale = identityRequest(old!.name);
  // The MIG deletes and recreates the instance under the same name and created-by: a new numeric id,
  // and a genuine member of the MIG again, so only the id tells the incarnations apart.
  const reborn = sim.world.seedInstance({ zone, name: old!.name, metadata: { ...old!.metadata } });
  assert.notEqual(reborn.id, old!.id);
  const decision = await policy().evaluate(stale, now);
  assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
  assert.match(
    decision.reasons[0] ?? '',
    new RegExp(`instance id ${old!.id}.*${reborn.id}.*(recreated|another incarnation)`),
  );
  // The new incarnation's own token passes, and the approval names the id it was checked against.
  const own = await policy().evaluate(identityRequest(reborn.name), now);
  assert.ok(own.verdict === 'approve', JSON.stringify(own));
  assert.equal(own.facts.evidence['gceInstanceId'], reborn.id);
  assert.equal(own.facts.incarnationId, reborn.id);
});

test('attack: a TPM proof signed on the previous incarnation of a name is denied: the key is read from the current one', async () => {
  const [old] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-reborn-tpm',
    count: 1,
    clusterName: cluster,
  });
  const stale = tpmRequest(old!.name, '{"old":1}');
  sim.world.seedInstance({ zone, name: old!.name, metadata: { ...old!.metadata } });
  const decision = await policy().evaluate(stale, now);
  assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
  assert.match(decision.reasons[0] ?? '', /not by the Shielded VM signing key/);
});

test('an identity without the numeric instance id (not the GCE identifier) cannot vouch for a token: denied, fail closed', async () => {
  const stub = {
    identify: async (ids: readonly string[]) =>
      new Map(
        ids.map((providerID) => [
          providerID,
          {
            ok: true as const,
            identity: {
              providerID,
              instanceId: node,
              instanceGroup: 'nodes-a',
              state: 'running' as const,
              addresses: [],
            },
          },
        ]),
      ),
  };
  const decision = await policy({ identifier: stub }).evaluate(identityRequest(node), now);
  assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
  assert.match(decision.reasons[0] ?? '', /numeric instance id/);
});

test('attack: an instance abandoned from its MIG after an approval is denied: the policy reads MIG membership fresh', async () => {
  const [member] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-abandon',
    mig: 'a-nodes-abandon',
    count: 1,
    clusterName: cluster,
  });
  // One policy, so one identifier and its hour-long cache of verified memberships.
  const p = policy();
  const first = await p.evaluate(
    identityRequest(member!.name, { issuedAt: Math.floor(Date.now() / 1000) - 10 }),
    now,
  );
  assert.equal(first.verdict, 'approve', JSON.stringify(first));
  // Abandoned: the MIG no longer lists it; it keeps running and keeps its created-by, as on GCE.
  const mig = sim.world.mig(project, zone, 'a-nodes-abandon');
  mig.members = mig.members.filter((m) => m.instance !== member!.name);
  const second = await p.evaluate(identityRequest(member!.name), now);
  assert.equal(second.verdict, 'deny', JSON.stringify(second));
  assert.match(second.reasons[0] ?? '', /not managed by MIG a-nodes-abandon/);
});

test("attack: an instance abandoned from its MIG is denied after the controller's clock ran an hour ahead and was stepped back: the cached membership is not fresh", async () => {
  const [member] = sim.world.seedInstanceGroup({
    zone,
    instanceGroup: 'nodes-abandon-step',
    mig: 'a-nodes-abandon-step',
    count: 1,
    clusterName: cluster,
  });
  // The clock the identifier's cache reads: an hour ahead while a routine reconcile fills it.
  let clock = 3_600_000;
  const compute = simulatorCompute(sim);
  const identifier = new GceNodeIdentifier({
    compute,
    clusterName: cluster,
    coalesceWindowMs: 1,
    now: () => clock,
  });
  const providerID = `gce://${project}/${zone}/${member!.name}`;
  assert.ok((await identifier.identify([providerID])).get(providerID)?.ok);
  const mig = sim.world.mig(project, zone, 'a-nodes-abandon-step');
  mig.members = mig.members.filter((m) => m.instance !== member!.name);
  clock = 1_000; // corrected
  const decision = await policy({ identifier, compute }).evaluate(
    tpmRequest(member!.name, '{"step":1}'),
    now,
  );
  assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
  assert.match(decision.reasons[0] ?? '', /not managed by MIG a-nodes-abandon-step/);
});

test('attack: a TPM proof signed for another body is denied', async () => {
  const decision = await policy().evaluate(tpmRequest(node, '{"evil":1}', { signedBody: '{"good":1}' }), now);
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /signed for another request/);
});

test('a TPM proof is bound to its body, so no marker is written: with another body it is refused, the same request again passes', async () => {
  const claims: string[] = [];
  const spy = {
    claim: async (digest: string) => {
      claims.push(digest);
      return true;
    },
  };
  const p = policy({ replayGuard: spy });
  const request = tpmRequest(node, '{"tpm":"spent"}');
  assert.equal((await p.evaluate(request, now)).verdict, 'approve');
  assert.equal((await p.evaluate(request, now)).verdict, 'approve', 'its retry');
  const moved = await p.evaluate({ ...request, body: Buffer.from('{"tpm":"other keys"}') }, now);
  assert.equal(moved.verdict, 'deny');
  assert.match(moved.reasons[0] ?? '', /signed for another request/);
  assert.deepEqual(claims, [], 'no replay marker for a TPM proof');
  assert.equal((await p.evaluate(identityRequest(node), now)).verdict, 'approve');
  assert.equal(claims.length, 1, 'an identity token, which does not cover the body, is spent');
});

test('attack: a TPM proof signed by another instance key is denied', async () => {
  const request = tpmRequest(otherClusterNode, '{"x":1}');
  const outer = JSON.parse(Buffer.from((request.proof as { token: string }).token, 'base64').toString());
  const data = JSON.parse(Buffer.from(outer.data, 'base64').toString());
  data.instance = node;
  outer.data = Buffer.from(JSON.stringify(data)).toString('base64');
  const forged = testRequest({
    body: request.body,
    proof: { kind: 'gce-tpm', token: Buffer.from(JSON.stringify(outer)).toString('base64') },
  });
  const decision = await policy().evaluate(forged, now);
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /not by the Shielded VM signing key/);
});

test('attack: a TPM proof for another project or stale timestamp is denied', async () => {
  const foreign = await policy().evaluate(tpmRequest(node, '{}', { project: 'other-project' }), now);
  assert.match(foreign.reasons[0] ?? '', /project "other-project", not /);
  const stale = await policy().evaluate(
    tpmRequest(node, '{}', { timestamp: Math.floor(Date.now() / 1000) - 3600 }),
    now,
  );
  assert.match(stale.reasons[0] ?? '', /made 360\d s ago; .*accepted within 300 s .*check the node's clock/);
});

test("attack: an unsigned TPM proof's project, zone and instance are quoted and cut in its denial, never repeated in full", async () => {
  const body = '{"long":1}';
  const long = 'p'.repeat(5_000);
  const cases: [Record<string, string>, RegExp][] = [
    [{ gcpProjectID: long }, /project "p+"… \(5000 characters\), not /],
    [{ zone: long }, /zone "p+"… \(5000 characters\), which is not a GCE zone/],
    [{ instance: long }, /instance "p+"… \(5000 characters\), which is not a GCE instance name/],
  ];
  for (const [change, message] of cases) {
    const data = Buffer.from(
      JSON.stringify({
        gcpProjectID: project,
        zone,
        instance: node,
        requestHash: createHash('sha256').update(body).digest('base64'),
        timestamp: Math.floor(Date.now() / 1000),
        audience: kopsGceTpmAudience,
        ...change,
      }),
    );
    const token = Buffer.from(
      JSON.stringify({ data: data.toString('base64'), signature: Buffer.alloc(256).toString('base64') }),
    ).toString('base64');
    const decision = await policy().evaluate(
      testRequest({ body: Buffer.from(body), proof: { kind: 'gce-tpm', token } }),
      now,
    );
    assert.equal(decision.verdict, 'deny');
    const reason = decision.reasons.join();
    assert.match(reason, message);
    assert.ok(reason.length < 250, `${reason.length} characters: ${reason.slice(0, 200)}`);
  }
});

test('attack: a proof for a zone outside the configured region (server.provider.gce.region) is denied, as kops', async () => {
  const region = zone.slice(0, zone.lastIndexOf('-'));
  const inRegion = await policy({ region }).evaluate(tpmRequest(node, '{"r":1}'), now);
  assert.equal(inRegion.verdict, 'approve', JSON.stringify(inRegion));
  const outside = await policy({ region: 'asia-east1' }).evaluate(tpmRequest(node, '{"r":2}'), now);
  assert.equal(outside.verdict, 'deny');
  assert.match(outside.reasons[0] ?? '', /outside this cluster's region asia-east1/);
});

test('malformed GCE proofs are denied', async () => {
  for (const token of [
    '',
    'x',
    Buffer.from('{}').toString('base64'),
    Buffer.from('{"data":"e30=","signature":""}').toString('base64'),
  ]) {
    assert.equal(
      (await policy().evaluate(testRequest({ proof: { kind: 'gce-tpm', token } }), now)).verdict,
      'deny',
    );
    assert.equal(
      (await policy().evaluate(testRequest({ proof: { kind: 'gce-identity-token', token } }), now)).verdict,
      'deny',
    );
  }
});
