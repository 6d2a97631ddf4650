import assert from 'node:assert/strict';
import { createHash, createPublicKey, generateKeyPairSync, type KeyObject, sign } from 'node:crypto';
import { describe, test } from 'node:test';
import type { HostLookup, HostObject } from '../../cloud/metal/hosts.ts';
import { UnavailableError } from '../../errors.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { isDependencyFault } from '../dependency.ts';
import { MemoryReplayGuard } from '../replay-guard.ts';
import type { BootstrapRequest, PolicyDecision } from '../types.ts';
import { pkiTpmPolicy } from './pki-tpm.ts';

const now = new Date('2026-03-01T12:00:00Z');
const nowSeconds = now.getTime() / 1000;
const body = Buffer.from('{"apiVersion":"bootstrap.kops.k8s.io/v1alpha1","certs":{"kubelet":"..."}}');

const ecKey = () => generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey;
const keyA = ecKey();
const keyB = ecKey();
const publicPem = (key: KeyObject) => createPublicKey(key).export({ format: 'pem', type: 'spki' }).toString();

function host(name: string, spec: HostObject['spec']): HostObject {
  return {
    apiVersion: 'kops.k8s.io/v1alpha2',
    kind: 'Host',
    metadata: { name, namespace: 'kops-system' },
    spec,
  };
}

const registered: Record<string, HostObject> = {
  'host-a': host('host-a', { publicKey: publicPem(keyA), instanceGroup: 'nodes' }),
  'host-b': host('host-b', { publicKey: publicPem(keyB), instanceGroup: 'gpu-nodes' }),
  'no-key': host('no-key', { instanceGroup: 'nodes' }),
  'no-group': host('no-group', { publicKey: publicPem(keyA) }),
  // Not what the CRD's schema allows: an answer of a broken API server.
  'group-number': host('group-number', {
    publicKey: publicPem(keyA),
    instanceGroup: 5 as unknown as string,
  }),
  'group-path': host('group-path', { publicKey: publicPem(keyA), instanceGroup: '../control-plane' }),
  'key-object': host('key-object', {
    publicKey: { pem: publicPem(keyA) } as unknown as string,
    instanceGroup: 'nodes',
  }),
  'rsa-key': host('rsa-key', {
    publicKey: publicPem(generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey),
    instanceGroup: 'nodes',
  }),
};

/** A Host store that records which names were asked for. */
function hosts(overrides: Partial<HostLookup> = {}): HostLookup & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    get: async (name) => {
      asked.push(name);
      return registered[name];
    },
    ...overrides,
  };
}

/**
 * The token exactly as nodeup's pkiAuthenticator.CreateToken builds it (pkg/bootstrap/pkibootstrap/
 * pkisigner.go): Go's json.Marshal of AuthTokenData (instance, keyID, requestHash, timestamp, audience;
 * []byte as standard base64), signed with signer.Sign(rand, sha256(data), crypto.SHA256) — ASN.1 DER
 * for an ECDSA key — and wrapped as base64(json.Marshal(AuthToken{Signature, Data})). Written out by
 * hand here so that the product's own encoder is not what the test checks against.
 */
function nodeupToken(
  key: KeyObject,
  overrides: { instance?: string; requestBody?: Buffer; timestamp?: number; audience?: string } = {},
): { header: string; data: Buffer; signature: Buffer } {
  const keyID = JSON.stringify(publicPem(key));
  const requestHash = createHash('sha256')
    .update(overrides.requestBody ?? body)
    .digest('base64');
  const data = Buffer.from(
    `{"instance":${JSON.stringify(overrides.instance ?? 'host-a')},"keyID":${keyID},"requestHash":"${requestHash}",` +
      `"timestamp":${overrides.timestamp ?? nowSeconds},"audience":"${overrides.audience ?? 'kops.k8s.io/node-bootstrap'}"}`,
  );
  const signature = sign('sha256', data, key);
  return { header: wrap(data, signature), data, signature };
}

function wrap(data: Buffer, signature: Buffer): string {
  return Buffer.from(
    `{"signature":"${signature.toString('base64')}","data":"${data.toString('base64')}"}`,
  ).toString('base64');
}

function request(token: string, overrides: Partial<BootstrapRequest> = {}): BootstrapRequest {
  return testRequest({ body, proof: { kind: 'pki-tpm', token }, receivedAt: now, ...overrides });
}

function setup(options: { skew?: number; lookup?: HostLookup & { asked: string[] } } = {}) {
  const lookup = options.lookup ?? hosts();
  const policy = pkiTpmPolicy({
    hosts: lookup,
    replayGuard: new MemoryReplayGuard(() => now.getTime()),
    ...(options.skew === undefined ? {} : { maxTimeSkewSeconds: options.skew }),
    lookupTimeoutMs: 200,
  });
  const evaluate = (r: BootstrapRequest) => policy.evaluate(r, contextAt(now));
  return { policy, lookup, evaluate };
}

function denied(decision: PolicyDecision, pattern: RegExp): void {
  assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
  assert.match(decision.reasons.join(' '), pattern);
}

/** The same signature with s replaced by n − s: as valid, and different bytes (ECDSA malleability). */
function malleate(der: Buffer): Buffer {
  const n = BigInt('0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551');
  const rLength = der[3] as number;
  const r = der.subarray(4, 4 + rLength);
  const sLength = der[5 + rLength] as number;
  const s = BigInt(`0x${der.subarray(6 + rLength, 6 + rLength + sLength).toString('hex')}`);
  const integer = (value: Buffer) => {
    const bytes =
      value[0] !== undefined && value[0] >= 0x80 ? Buffer.concat([Buffer.from([0]), value]) : value;
    return Buffer.concat([Buffer.from([0x02, bytes.length]), bytes]);
  };
  const hex = (n - s).toString(16);
  const s2 = Buffer.from(hex.length % 2 ? `0${hex}` : hex, 'hex');
  const inner = Buffer.concat([integer(Buffer.from(r)), integer(s2)]);
  return Buffer.concat([Buffer.from([0x30, inner.length]), inner]);
}

describe('pki-tpm policy', () => {
  test("approves nodeup's token: the Host names the node and its group; no extra names are certified", async () => {
    const { evaluate } = setup();
    const decision = await evaluate(request(nodeupToken(keyA).header));
    assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
    if (decision.verdict !== 'approve') return;
    assert.equal(decision.facts.nodeName, 'host-a');
    assert.equal(decision.facts.instanceGroup, 'nodes');
    assert.deepEqual([decision.facts.dnsNames, decision.facts.ipAddresses], [[], []]);
    assert.equal(decision.facts.evidence['host'], 'kops-system/host-a');
  });

  test('abstains without an x-pki-tpm proof', async () => {
    const { evaluate } = setup();
    const decision = await evaluate(testRequest({ proof: { kind: 'bootstrap-token', token: 'x' } }));
    assert.equal(decision.verdict, 'abstain');
  });

  test('wrong key: a record signed with a key other than the registered one is denied', async () => {
    const { evaluate } = setup();
    denied(await evaluate(request(nodeupToken(keyB).header)), /not by the key registered for host host-a/);
  });

  test("host of another instance group: host-a's key cannot claim host-b (and so gpu-nodes)", async () => {
    const { evaluate } = setup();
    denied(
      await evaluate(request(nodeupToken(keyA, { instance: 'host-b' }).header)),
      /not by the key registered for host host-b/,
    );
  });

  test('stale or future timestamps beyond MaxTimeSkew are denied; within it they pass', async () => {
    const { evaluate } = setup();
    denied(
      await evaluate(request(nodeupToken(keyA, { timestamp: nowSeconds - 301 }).header)),
      /301 s from this controller's clock; at most 300 s/,
    );
    denied(
      await evaluate(request(nodeupToken(keyA, { timestamp: nowSeconds + 301 }).header)),
      /at most 300 s/,
    );
    const inside = await evaluate(request(nodeupToken(keyA, { timestamp: nowSeconds - 299 }).header));
    assert.equal(inside.verdict, 'approve');
  });

  test('server.pki.MaxTimeSkew narrows the window', async () => {
    const { evaluate } = setup({ skew: 60 });
    denied(await evaluate(request(nodeupToken(keyA, { timestamp: nowSeconds - 61 }).header)), /at most 60 s/);
  });

  test('wrong audience is denied', async () => {
    const { evaluate } = setup();
    denied(
      await evaluate(request(nodeupToken(keyA, { audience: 'kops.k8s.io/something-else' }).header)),
      /audience is not kops\.k8s\.io\/node-bootstrap/,
    );
  });

  test('body swap: a proof signed for one body is denied with another, before any lookup', async () => {
    const { evaluate, lookup } = setup();
    const token = nodeupToken(keyA).header;
    denied(
      await evaluate(request(token, { body: Buffer.from('{"certs":{"kubelet":"attacker key"}}') })),
      /requestHash is not the SHA-256 of this request body/,
    );
    assert.deepEqual(lookup.asked, []);
  });

  test('unknown host: denied, nothing spent', async () => {
    const { evaluate } = setup();
    denied(
      await evaluate(request(nodeupToken(keyA, { instance: 'host-z' }).header)),
      /no host kops-system\/host-z is registered/,
    );
  });

  test('a host name that is no object name is denied without a lookup', async () => {
    const { evaluate, lookup } = setup();
    denied(
      await evaluate(request(nodeupToken(keyA, { instance: '../secrets/x' }).header)),
      /is not a host name/,
    );
    assert.deepEqual(lookup.asked, []);
  });

  test('a request naming another node than the proof is denied', async () => {
    const { evaluate } = setup();
    denied(
      await evaluate(request(nodeupToken(keyA).header, { claimedNodeName: 'host-b' })),
      /proof is for host host-a, but the request asks for node host-b/,
    );
  });

  test('replay: the same proof twice, or with its signature malleated to (r, n − s), is denied', async () => {
    const { evaluate } = setup();
    const token = nodeupToken(keyA);
    assert.equal((await evaluate(request(token.header, { id: 'first' }))).verdict, 'approve');
    denied(await evaluate(request(token.header, { id: 'second' })), /already used \(replayed\)/);
    const twin = malleate(token.signature);
    assert.notDeepEqual(twin, token.signature);
    denied(await evaluate(request(wrap(token.data, twin), { id: 'third' })), /already used/);
  });

  test('a Host without a key or group, or with a non-ECDSA key, vouches for no one', async () => {
    const { evaluate } = setup();
    denied(
      await evaluate(request(nodeupToken(keyA, { instance: 'no-key' }).header)),
      /has no spec\.publicKey/,
    );
    denied(
      await evaluate(request(nodeupToken(keyA, { instance: 'no-group' }).header)),
      /has no spec\.instanceGroup/,
    );
    denied(await evaluate(request(nodeupToken(keyA, { instance: 'rsa-key' }).header)), /ECDSA keys only/);
    denied(
      await evaluate(request(nodeupToken(keyA, { instance: 'group-number' }).header)),
      /has no spec\.instanceGroup/,
    );
    denied(
      await evaluate(request(nodeupToken(keyA, { instance: 'group-path' }).header)),
      /spec\.instanceGroup "\.\.\/control-plane" is not a valid name/,
    );
    denied(
      await evaluate(request(nodeupToken(keyA, { instance: 'key-object' }).header)),
      /has no spec\.publicKey/,
    );
  });

  test('malformed proofs are denials with a reason, never crashes', async () => {
    const { evaluate } = setup();
    for (const [token, reason] of [
      ['!!!', /the proof is not base64/],
      [Buffer.from('[1]').toString('base64'), /not a JSON object/],
      [Buffer.from('{"data":"e30="}').toString('base64'), /signature is not base64|no signature/],
      [wrap(Buffer.from('{"timestamp":1}'), Buffer.from('sig')), /names no instance/],
      [wrap(Buffer.from('{"instance":"host-a"}'), Buffer.from('sig')), /no timestamp/],
    ] as const) {
      denied(await evaluate(request(token)), reason);
    }
  });

  test('the API server failing or not answering is a dependency fault (503), not a denial', async () => {
    const failing = setup({
      lookup: hosts({
        get: async () => {
          throw new UnavailableError('read host: HTTP 503');
        },
      }),
    });
    await assert.rejects(failing.evaluate(request(nodeupToken(keyA).header)), isDependencyFault);
    const silent = setup({ lookup: hosts({ get: () => new Promise(() => {}) }) });
    await assert.rejects(silent.evaluate(request(nodeupToken(keyA).header)), isDependencyFault);
  });
});
