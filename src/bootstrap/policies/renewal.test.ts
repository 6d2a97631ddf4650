import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { describe, test } from 'node:test';
import { renewalProof } from '../../agent/renewal.ts';
import type { IdentifyResult, NodeIdentifier } from '../../cloud/types.ts';
import { NotFoundError, UnavailableError } from '../../errors.ts';
import { type CertificateAuthority, createCa } from '../../pki/ca.ts';
import {
  bytesOf,
  childrenOf,
  octetString,
  oid,
  readRoot,
  sequence,
  unsignedInteger,
  utf8String,
} from '../../pki/der.ts';
import { incarnationOid } from '../../pki/incarnation.ts';
import { generateKey, spkiOf } from '../../pki/keys.ts';
import { issueCertificate, type ProfileName, publicKeyRequest } from '../../pki/profiles.ts';
import { encodeName, extKeyUsageExtension, signCertificate } from '../../pki/x509.ts';
import { bodyDigest, encodeRenewalToken, renewalAudience } from '../../protocol/renewal-proof.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { isDependencyFault } from '../dependency.ts';
import type { BootstrapRequest } from '../types.ts';
import { cloudAddresses, type RenewalPolicyOptions, renewalPolicy } from './renewal.ts';

const clusterName = 'minimal.example.com';
const now = new Date('2026-03-01T12:00:00Z');
const ca = createCa({ now: new Date('2025-01-01T00:00:00Z') });
const key = generateKey('ecdsa-p256');

/** A certificate of `profile` for `name` from `issuer`, issued at `issuedAt` for `lifetimeMs`. */
function certificate(
  options: {
    issuer?: CertificateAuthority;
    name?: string;
    profile?: ProfileName;
    issuedAt?: Date;
    lifetimeMs?: number;
    /** The machine the certificate names (the incarnation extension). */
    incarnationId?: string;
  } = {},
) {
  const issued = issueCertificate(
    options.issuer ?? ca,
    options.profile ?? 'kubelet',
    publicKeyRequest(key),
    {
      name: options.name ?? 'node-a',
      dnsNames: [],
      ipAddresses: [],
      ...(options.incarnationId === undefined ? {} : { incarnationId: options.incarnationId }),
    },
    {
      now: options.issuedAt ?? new Date('2026-01-01T00:00:00Z'),
      lifetimeMs: options.lifetimeMs ?? 455 * 86_400_000,
    },
  );
  return new X509Certificate(issued.pem);
}

/** A request whose Authorization is the agent's renewal proof, signed at `signedAt` over `body`. */
async function renewalRequest(
  options: {
    cert?: X509Certificate;
    body?: string;
    signedAt?: Date;
    cluster?: string;
    claimed?: string;
  } = {},
): Promise<BootstrapRequest> {
  const body = Buffer.from(options.body ?? '{"apiVersion":"bootstrap.kops-controller.io/v1"}');
  const current = { nodeName: 'node-a', certificate: options.cert ?? certificate(), key };
  const header = (await renewalProof(
    current,
    options.cluster ?? clusterName,
    () => options.signedAt ?? now,
  )(body)) as string;
  const [scheme, token] = header.split(' ') as [string, string];
  assert.equal(scheme, 'x-kops-renewal');
  return testRequest({
    body,
    proof: { kind: 'node-renewal', token },
    ...(options.claimed ? { claimedNodeName: options.claimed } : {}),
  });
}

function policy(overrides: Partial<RenewalPolicyOptions> = {}) {
  return renewalPolicy({
    clusterName,
    ca,
    addressesOf: async (name) => ({
      dnsNames: [`${name}.internal`],
      ipAddresses: ['10.0.0.9'],
      instanceGroup: 'nodes',
    }),
    ...overrides,
  });
}

async function refusal(request: BootstrapRequest, options: Partial<RenewalPolicyOptions> = {}) {
  const decision = await policy(options).evaluate(request, contextAt(now));
  assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
  return decision.reasons.join('; ');
}

describe('renewal policy', () => {
  test("approves the certificate's node with the cloud's addresses, marked as a renewal of that serial", async () => {
    const cert = certificate();
    const decision = await policy().evaluate(await renewalRequest({ cert }), contextAt(now));
    assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
    assert.equal(decision.facts.nodeName, 'node-a');
    assert.deepEqual(decision.facts.ipAddresses, ['10.0.0.9']);
    assert.equal(decision.facts.instanceGroup, 'nodes');
    assert.equal(BigInt(`0x${decision.facts.renewalOf}`), BigInt(`0x${cert.serialNumber}`));
  });

  test('abstains without a renewal proof', async () => {
    assert.equal((await policy().evaluate(testRequest(), contextAt(now))).verdict, 'abstain');
  });

  test('an expired certificate is refused', async () => {
    const expired = certificate({ issuedAt: new Date('2026-02-01T00:00:00Z'), lifetimeMs: 86_400_000 });
    assert.match(await refusal(await renewalRequest({ cert: expired })), /expired/);
  });

  test('a certificate from a foreign CA is refused', async () => {
    const foreign = certificate({ issuer: createCa({ now: new Date('2025-01-01T00:00:00Z') }) });
    assert.match(await refusal(await renewalRequest({ cert: foreign })), /not from the cluster CA/);
  });

  test("a certificate that is not a node's (kube-proxy) is refused", async () => {
    const proxy = certificate({ profile: 'kube-proxy' });
    assert.match(await refusal(await renewalRequest({ cert: proxy })), /not a node's/);
  });

  test('a request naming another node than the certificate is refused', async () => {
    assert.match(
      await refusal(await renewalRequest({ claimed: 'node-b' })),
      /names node-b, the certificate node-a/,
    );
  });

  test('a proof presented again with another body is refused, on any replica; the same request again (a retry) is not', async () => {
    const guarded = policy();
    const first = await renewalRequest();
    assert.equal((await guarded.evaluate(first, contextAt(now))).verdict, 'approve');
    assert.equal(
      (await guarded.evaluate(first, contextAt(now))).verdict,
      'approve',
      'a retry of the same body',
    );
    const replay = { ...first, body: Buffer.from('{"other":"keys"}') };
    // The replica that answered it and one that never saw it refuse alike: the signature binds the body.
    for (const replica of [guarded, policy()]) {
      const decision = await replica.evaluate(replay, contextAt(now));
      assert.equal(decision.verdict, 'deny');
      assert.match(decision.reasons.join(), /another request body/);
    }
  });

  test('a body swapped under a valid proof is refused', async () => {
    const request = await renewalRequest();
    assert.match(
      await refusal({ ...request, body: Buffer.from('{"swapped":true}') }),
      /another request body/,
    );
  });

  test('a stale (or future) timestamp is refused', async () => {
    const stale = await renewalRequest({ signedAt: new Date(now.getTime() - 10 * 60_000) });
    assert.match(await refusal(stale), /signed at .*, 600 s ago; .*within 300 s .*check the node's clock/);
    const future = await renewalRequest({ signedAt: new Date(now.getTime() + 10 * 60_000) });
    assert.match(
      await refusal(future),
      /signed at .*, 600 s in the future; .*within 300 s .*check the node's clock/,
    );
  });

  test("another cluster's audience is refused", async () => {
    assert.match(await refusal(await renewalRequest({ cluster: 'other.example.com' })), /audience/);
  });

  test("a signature by another key than the certificate's is refused", async () => {
    const other = generateKey('ecdsa-p256');
    const body = Buffer.from('{}');
    const header = (await renewalProof(
      { nodeName: 'node-a', certificate: certificate(), key: other },
      clusterName,
      () => now,
    )(body)) as string;
    const request = testRequest({
      body,
      proof: { kind: 'node-renewal', token: header.split(' ')[1] as string },
    });
    assert.match(await refusal(request), /signature does not verify/);
  });

  test('a malformed token is refused, not a crash', async () => {
    assert.match(
      await refusal(testRequest({ proof: { kind: 'node-renewal', token: 'not-a-token' } })),
      /renewal refused/,
    );
    const junk = Buffer.from(
      JSON.stringify({ v: 1, cert: 'AAAA', ts: 'x', aud: 'a', body: 'a'.repeat(64), sig: 'AA' }),
    ).toString('base64url');
    assert.match(
      await refusal(testRequest({ proof: { kind: 'node-renewal', token: junk } })),
      /renewal refused/,
    );
  });

  test("a proof whose certificate has no signature or an empty validity is refused with the parser's reason, not OpenSSL's or a TypeError's", async () => {
    const [tbs, algorithm, signature] = childrenOf(readRoot(Buffer.from(certificate().raw))).map(bytesOf) as [
      Buffer,
      Buffer,
      Buffer,
    ];
    // The validity is the fifth field of a v3 tbsCertificate.
    const tbsFields = childrenOf(readRoot(tbs)).map(bytesOf);
    const emptyValidity = sequence(
      sequence(...tbsFields.map((field, i) => (i === 4 ? sequence() : field))),
      algorithm,
      signature,
    );
    // The fuzzing campaign's reproducers (tmp/fuzz-s11) were of these two kinds.
    for (const [bad, reason] of [
      [sequence(tbs, algorithm), /^renewal refused: malformed DER: signature is missing$/],
      [emptyValidity, /^renewal refused: malformed DER: notBefore is missing$/],
    ] as const) {
      const body = Buffer.from('{}');
      const token = encodeRenewalToken({
        certificate: bad,
        timestamp: now.toISOString(),
        audience: renewalAudience(clusterName),
        bodySha256: bodyDigest(body),
        signature: Buffer.alloc(64),
      });
      assert.match(await refusal(testRequest({ body, proof: { kind: 'node-renewal', token } })), reason);
    }
  });

  test('a node the cloud no longer knows is refused; a cloud that fails is a fault (503), not a refusal', async () => {
    const gone = {
      addressesOf: async () => Promise.reject(new NotFoundError('instance i-1 does not exist')),
    };
    assert.match(await refusal(await renewalRequest(), gone), /cloud does not vouch for node node-a/);
    const down = policy({
      addressesOf: async () => Promise.reject(new UnavailableError('compute API: HTTP 503')),
    });
    await assert.rejects(down.evaluate(await renewalRequest(), contextAt(now)), (err) =>
      isDependencyFault(err),
    );
  });

  test('without an address source the renewal names no addresses, and a serving certificate is refused', async () => {
    const decision = await policy({ addressesOf: undefined }).evaluate(
      await renewalRequest(),
      contextAt(now),
    );
    assert.equal(decision.verdict, 'approve');
    assert.deepEqual([decision.facts.dnsNames, decision.facts.ipAddresses], [[], []]);
    const serving = {
      ...(await renewalRequest()),
      certificates: { 'kubelet-server': publicKeyRequest(key) },
    };
    assert.match(await refusal(serving, { addressesOf: undefined }), /renews client certificates only/);
  });
});

/**
 * A kubelet client certificate of node-a from the cluster CA whose incarnation extension holds
 * `value` (DER) as it stands: what only a forger with the CA key, or a bug, could make.
 */
function certificateWithIncarnationValue(value: Buffer): X509Certificate {
  const der = signCertificate(
    {
      serial: unsignedInteger(Buffer.from([0x42])),
      issuer: ca.signer.certificate.parsed.subjectDer,
      subject: encodeName({ commonName: 'system:node:node-a', organizations: ['system:nodes'] }),
      notBefore: new Date('2026-01-01T00:00:00Z'),
      notAfter: new Date('2027-01-01T00:00:00Z'),
      spki: spkiOf(key),
      extensions: [extKeyUsageExtension(['clientAuth']), sequence(oid(incarnationOid), octetString(value))],
    },
    ca.signer.scheme,
    ca.signer.key,
  );
  return new X509Certificate(der);
}

describe('renewal bound to the machine the certificate was issued to (its incarnation)', () => {
  const createdAt = new Date('2026-02-01T00:00:00Z');
  const hourMs = 3_600_000;
  const machine = (
    incarnation?: { id: string; createdAt?: Date },
    options: Partial<RenewalPolicyOptions> = {},
  ) =>
    policy({
      addressesOf: async () => ({
        dnsNames: [],
        ipAddresses: ['10.0.0.9'],
        instanceGroup: 'nodes',
        instanceId: 'nodes-a',
        ...(incarnation ? { incarnation } : {}),
      }),
      ...options,
    });

  test('a certificate naming the machine of now renews, and what is renewed names it again', async () => {
    const cert = certificate({ incarnationId: '4000000000000031676' });
    const decision = await machine({ id: '4000000000000031676', createdAt }).evaluate(
      await renewalRequest({ cert }),
      contextAt(now),
    );
    assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
    assert.equal(decision.facts.incarnationId, '4000000000000031676');
    assert.equal(decision.facts.evidence['incarnation'], '4000000000000031676');
    assert.equal('incarnation' in decision.facts, false, 'the cloud record is not copied whole');
  });

  test("attack: a certificate naming another machine of that name (recreated under its name, an IP-based name's next instance) is refused, naming both", async () => {
    const cert = certificate({ incarnationId: '4000000000000015838' });
    const decision = await machine({ id: '4000000000000031676', createdAt }).evaluate(
      await renewalRequest({ cert }),
      contextAt(now),
    );
    assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
    assert.equal(
      decision.reasons.join(),
      'renewal refused: the certificate was issued to another machine of that name: instance id 4000000000000015838, but node-a is now instance id 4000000000000031676; the machine of now joins with its own cloud proof',
    );
  });

  test("a certificate naming no machine (kops', the KCM's) renews unless it starts more than 48 h 5 min before the machine came to be; the renewal then names the machine", async () => {
    // This CA backdates five minutes: issued 48 h before the machine, it starts 48 h 5 min before.
    const lastAccepted = certificate({ issuedAt: new Date(createdAt.getTime() - 48 * hourMs) });
    const accepted = await machine({ id: 'i-0b', createdAt }).evaluate(
      await renewalRequest({ cert: lastAccepted }),
      contextAt(now),
    );
    assert.equal(accepted.verdict, 'approve', JSON.stringify(accepted));
    assert.equal(accepted.facts.incarnationId, 'i-0b');

    const earlier = certificate({ issuedAt: new Date(createdAt.getTime() - 48 * hourMs - 1000) });
    const refused = await machine({ id: 'i-0b', createdAt }).evaluate(
      await renewalRequest({ cert: earlier }),
      contextAt(now),
    );
    assert.equal(refused.verdict, 'deny', JSON.stringify(refused));
    assert.equal(
      refused.reasons.join(),
      'renewal refused: the certificate was issued before this machine existed: it is valid from 2026-01-29T23:54:59.000Z and instance i-0b was created (or last started) at 2026-02-01T00:00:00.000Z; the machine joins again with its cloud proof',
    );
  });

  test("the id is compared before any time: a certificate naming the machine renews even if it starts before the cloud's creation time", async () => {
    const cert = certificate({ issuedAt: new Date('2026-01-01T00:00:00Z'), incarnationId: 'i-0b' });
    const decision = await machine({ id: 'i-0b', createdAt }).evaluate(
      await renewalRequest({ cert }),
      contextAt(now),
    );
    assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
  });

  test('an incarnation without a creation time: a certificate naming no machine renews (the id is all there is to compare)', async () => {
    const decision = await machine({ id: '42' }).evaluate(await renewalRequest(), contextAt(now));
    assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
    assert.equal(decision.facts.incarnationId, '42');
  });

  test('no incarnation (metal, a cloud that names none) or no address source: as before, the renewal names no machine', async () => {
    const cert = certificate({ incarnationId: 'i-0a' });
    for (const renewal of [machine(), policy({ addressesOf: undefined })]) {
      for (const presented of [cert, certificate()]) {
        const decision = await renewal.evaluate(await renewalRequest({ cert: presented }), contextAt(now));
        assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
        assert.equal(decision.facts.incarnationId, undefined);
        assert.equal(decision.facts.evidence['incarnation'], undefined);
      }
    }
  });

  test('unmarked: refuse: a certificate naming no machine renews no more where the cloud names one, however recent; one naming the machine does, and metal (no incarnation) is as before', async () => {
    const refusing = (incarnation?: { id: string; createdAt?: Date }) =>
      machine(incarnation, { unmarked: 'refuse' });
    const recent = certificate({ issuedAt: new Date(createdAt.getTime() + hourMs) });
    for (const incarnation of [{ id: 'i-0b', createdAt }, { id: '42' }]) {
      const refused = await refusing(incarnation).evaluate(
        await renewalRequest({ cert: recent }),
        contextAt(now),
      );
      assert.equal(refused.verdict, 'deny', JSON.stringify(refused));
      assert.equal(
        refused.reasons.join(),
        `renewal refused: the certificate names no machine and this cluster renews only those that do (unmarked: refuse); instance ${incarnation.id} joins again with its cloud proof`,
      );
    }
    const marked = certificate({ incarnationId: 'i-0b' });
    const renewed = await refusing({ id: 'i-0b', createdAt }).evaluate(
      await renewalRequest({ cert: marked }),
      contextAt(now),
    );
    assert.equal(renewed.verdict, 'approve', JSON.stringify(renewed));
    for (const renewal of [refusing(), policy({ addressesOf: undefined, unmarked: 'refuse' })]) {
      const decision = await renewal.evaluate(await renewalRequest({ cert: recent }), contextAt(now));
      assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
    }
  });

  test('each verdict on a certificate naming no machine where the cloud names one is counted, and nothing else is', async () => {
    const counted: string[] = [];
    const countUnmarked = (verdict: string) => counted.push(verdict);
    const recent = certificate({ issuedAt: new Date(createdAt.getTime() + hourMs) });
    const early = certificate({ issuedAt: new Date(createdAt.getTime() - 49 * hourMs) });
    const cases = [
      [machine({ id: 'i-0b', createdAt }, { countUnmarked }), recent, 'approve'],
      [machine({ id: 'i-0b', createdAt }, { countUnmarked }), early, 'deny'],
      [machine({ id: 'i-0b', createdAt }, { countUnmarked, unmarked: 'refuse' }), recent, 'deny'],
      [
        machine({ id: 'i-0b', createdAt }, { countUnmarked }),
        certificate({ incarnationId: 'i-0b' }),
        'approve',
      ],
      [machine({ id: 'i-0b', createdAt }, { countUnmarked }), certificate({ incarnationId: 'i-0a' }), 'deny'],
      [machine(undefined, { countUnmarked }), recent, 'approve'],
    ] as const;
    for (const [renewal, cert, verdict] of cases) {
      const decision = await renewal.evaluate(await renewalRequest({ cert }), contextAt(now));
      assert.equal(decision.verdict, verdict, JSON.stringify(decision));
    }
    assert.deepEqual(counted, ['approve', 'deny', 'deny']);
  });

  test('a certificate whose incarnation value is malformed is refused with the reason, not a crash', async () => {
    for (const [value, reason] of [
      [
        octetString(Buffer.from('i-0b')),
        /malformed incarnation extension: the value has tag 0x4, not a UTF8String/,
      ],
      [utf8String('i-0b\nx'), /malformed incarnation extension: it has a character other than visible ASCII/],
      [Buffer.from([0x0c, 0x05, 0x41]), /malformed DER/],
    ] as const) {
      const cert = certificateWithIncarnationValue(value);
      for (const renewal of [machine({ id: 'i-0b', createdAt }), policy({ addressesOf: undefined })]) {
        const decision = await renewal.evaluate(await renewalRequest({ cert }), contextAt(now));
        assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
        assert.match(decision.reasons.join(), /^renewal refused: /);
        assert.match(decision.reasons.join(), reason);
      }
    }
  });
});

describe("renewal addresses from the cloud (the Node's providerID, then the instance)", () => {
  const providerID = 'hcloud://42';
  const identifier = (result: IdentifyResult): NodeIdentifier => ({
    identify: async (ids, options) => {
      assert.deepEqual(ids, [providerID]);
      assert.equal(options?.maxAgeMs, 0, 'a trust decision reads the cloud afresh');
      return new Map([[providerID, result]]);
    },
  });
  const running: IdentifyResult = {
    ok: true,
    identity: {
      providerID,
      instanceId: '42',
      instanceGroup: 'nodes-fsn1',
      state: 'running',
      addresses: [
        { type: 'InternalIP', address: '10.0.0.4' },
        { type: 'ExternalIP', address: '203.0.113.4' },
        { type: 'InternalDNS', address: 'nodes-fsn1-42.internal' },
        { type: 'Hostname', address: 'nodes-fsn1-42' },
      ],
    },
  };

  test("every IP and DNS name the cloud reports now, and the instance's group", async () => {
    const addresses = await cloudAddresses({
      providerIdOf: async () => providerID,
      identifier: identifier(running),
    })('nodes-fsn1-42.internal');
    assert.deepEqual(addresses, {
      dnsNames: ['nodes-fsn1-42.internal'],
      ipAddresses: ['10.0.0.4', '203.0.113.4'],
      instanceGroup: 'nodes-fsn1',
      instanceId: '42',
    });
  });

  test("the instance's incarnation, when the cloud names one, with the addresses", async () => {
    const incarnation = { id: '42', createdAt: new Date('2026-02-01T00:00:00Z') };
    const addresses = await cloudAddresses({
      providerIdOf: async () => providerID,
      identifier: identifier({
        ok: true,
        identity: { ...(running.ok ? running.identity : ({} as never)), incarnation },
      }),
    })('nodes-fsn1-42.internal');
    assert.deepEqual(addresses.incarnation, incarnation);
  });

  test('no providerID, a stopped instance or one the cloud does not know: the renewal is refused', async () => {
    const stopped: IdentifyResult = {
      ok: true,
      identity: { ...(running.ok ? running.identity : ({} as never)), state: 'stopped' },
    };
    const cases = [
      cloudAddresses({ providerIdOf: async () => undefined, identifier: identifier(running) }),
      cloudAddresses({ providerIdOf: async () => providerID, identifier: identifier(stopped) }),
      cloudAddresses({
        providerIdOf: async () => providerID,
        identifier: identifier({ ok: false, error: new NotFoundError('server 42 does not exist') }),
      }),
    ];
    for (const addressesOf of cases) {
      const decision = await policy({ addressesOf }).evaluate(await renewalRequest(), contextAt(now));
      assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
      assert.match(decision.reasons.join(), /cloud does not vouch for node node-a/);
    }
  });

  test("the node's name must be one of its instance's names: the instance id, its DNS names or its hostname", async () => {
    for (const name of ['42', 'nodes-fsn1-42', 'nodes-fsn1-42.internal']) {
      const addressesOf = cloudAddresses({
        providerIdOf: async () => providerID,
        identifier: identifier(running),
      });
      const request = await renewalRequest({ cert: certificate({ name }) });
      const decision = await policy({ addressesOf }).evaluate(request, contextAt(now));
      assert.equal(decision.verdict, 'approve', `${name}: ${JSON.stringify(decision)}`);
      assert.deepEqual(decision.facts.ipAddresses, ['10.0.0.4', '203.0.113.4'], name);
    }
  });

  test("attack: a Node registered with another instance's providerID renews into nothing of that instance: refused, its name is none of the instance's", async () => {
    // node-z holds a valid kubelet client certificate of its own (a bootstrap token's, say) and
    // registered its Node with the providerID of instance 42, which another node runs as.
    const addressesOf = cloudAddresses({
      providerIdOf: async () => providerID,
      identifier: identifier(running),
    });
    const request = {
      ...(await renewalRequest({ cert: certificate({ name: 'node-z' }) })),
      certificates: { kubelet: publicKeyRequest(key), 'kubelet-server': publicKeyRequest(key) },
    };
    const decision = await policy({ addressesOf }).evaluate(request, contextAt(now));
    assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
    assert.match(
      decision.reasons.join(),
      /cloud does not vouch for node node-z: node node-z is not a name of instance 42 \(its names: 42, 10\.0\.0\.4, nodes-fsn1-42\.internal, nodes-fsn1-42\)/,
    );
  });
});
