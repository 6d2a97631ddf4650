/**
 * `/bootstrap` against the bytes a nodeup built from kops HEAD sends (kubernetes/kops @268927e2,
 * 2026-08-22), and against a node challenge server shaped as kops' own:
 *
 * - the config request (`upup/pkg/fi/nodeup/command.go`, `getNodeConfigFromServers`): a
 *   `nodeup.BootstrapRequest{APIVersion, IncludeNodeConfig: true}` with a challenge, so Go's
 *   `json.Marshal` writes `"certs":null,"keypairIDs":null` (nil maps), in the struct's field order;
 * - the certificate request (`upup/pkg/fi/nodeup/nodetasks/bootstrap_client.go`): `certs` of
 *   `RSA PUBLIC KEY` PEM blocks holding PKIX bytes, `keypairIDs`, `"includeNodeConfig":false`;
 * - the challenge (`pkg/apis/nodeup/bootstrap.go` `ChallengeRequest`: `endpoint`, `ca` and
 *   `challengeSecret` as Go's base64 of []byte, `challengeID` 32 hex) and the node's server
 *   (`pkg/bootstrap/challenge.go` `BuildChallengeServerCertificate`: RSA-2048 from
 *   `pki.GeneratePrivateKey`, serial 1, valid from 15 minutes ago for one hour, keyUsage
 *   digitalSignature+keyEncipherment, extKeyUsage serverAuth, basicConstraints CA:FALSE, no key
 *   identifiers, DNS `challenge-server.<cluster>`; `challenge_server.go`: a client certificate chained
 *   to the cluster CA with CN `kops-controller.<cluster>`, each id answered once with
 *   `sha256(secret || nonce)` since commit 95aa7ca6 — before it, `sha256("")` whatever the nonce).
 *
 * The node's server here is grpc-js, not grpc-go: what is kops' is its certificate and its answers.
 */
import assert from 'node:assert/strict';
import { createHash, generateKeyPairSync, type KeyObject, randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { Server, ServerCredentials, type ServerUnaryCall, type sendUnaryData, status } from '@grpc/grpc-js';
import { silentLogger } from '../log.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import { unsignedInteger } from '../pki/der.ts';
import { generateKey, privateKeyPem, signatureSchemeFor, spkiOf } from '../pki/keys.ts';
import { encodePem } from '../pki/pem.ts';
import {
  basicConstraintsExtension,
  encodeName,
  extKeyUsageExtension,
  keyUsageExtension,
  signCertificate,
  subjectAltNameExtension,
} from '../pki/x509.ts';
import type { ChallengeRequestMessage, ChallengeResponseMessage } from '../protocol/challenge.ts';
import { callbackService } from '../protocol/challenge-grpc.ts';
import { MemfsVfs } from '../statestore/memfs-vfs.ts';
import { nodeSecretsReader } from '../statestore/secrets.ts';
import { opensslText } from '../testing/openssl.ts';
import { GrpcCallbackChallenger } from './challenge-caller.ts';
import type { BootstrapContext } from './context.ts';
import { type KopsOptions, kopsBootstrap } from './kops-handler.ts';
import type { AuditRecord, BootstrapPolicy, NodeFacts } from './types.ts';

const clusterName = 'hetzner.example.com';
// kops' kubernetes-ca is RSA-2048 (pki.GeneratePrivateKey).
const ca = createCa({ algorithm: 'rsa-2048' });

/** `BuildChallengeServerCertificate` as kops HEAD writes it (see the module comment). */
function kopsChallengeServerCertificate(now = new Date()): { certificatePem: string; keyPem: string } {
  const key = generateKey('rsa-2048');
  const name = `challenge-server.${clusterName}`;
  const subject = encodeName({ commonName: name, organizations: [] });
  const notBefore = new Date(now.getTime() - 15 * 60_000);
  const der = signCertificate(
    {
      serial: unsignedInteger(Buffer.from([1])),
      issuer: subject,
      subject,
      notBefore,
      notAfter: new Date(notBefore.getTime() + 3_600_000),
      spki: spkiOf(key),
      // Go's order; no subjectKeyIdentifier (Go adds one to CA certificates only) and no AKI.
      extensions: [
        keyUsageExtension(['digitalSignature', 'keyEncipherment']),
        extKeyUsageExtension(['serverAuth']),
        basicConstraintsExtension(false),
        subjectAltNameExtension({ dnsNames: [name], ipAddresses: [] }),
      ],
    },
    signatureSchemeFor(key),
    key,
  );
  return { certificatePem: encodePem('CERTIFICATE', der), keyPem: privateKeyPem(key) };
}

/** A node's challenge server as kops' `ChallengeServer`: one-shot ids, the controller's CN only. */
interface KopsNode {
  endpoint: string;
  /** `ChallengeListener.CreateChallenge`, as the JSON nodeup puts under `challenge`. */
  createChallenge(): string;
  stop(): Promise<void>;
}

async function startKopsNode(answer: 'sha256(secret||nonce)' | 'sha256("")'): Promise<KopsNode> {
  const own = kopsChallengeServerCertificate();
  const challenges = new Map<string, Buffer>();
  const server = new Server();
  server.addService(callbackService().service, {
    Challenge(
      call: ServerUnaryCall<ChallengeRequestMessage, ChallengeResponseMessage>,
      callback: sendUnaryData<ChallengeResponseMessage>,
    ) {
      if (call.getAuthContext()?.sslPeerCertificate?.subject?.CN !== `kops-controller.${clusterName}`) {
        callback({ code: status.UNAUTHENTICATED, details: 'certificate subjects did not match' });
        return;
      }
      const secret = challenges.get(call.request.challenge_id);
      challenges.delete(call.request.challenge_id);
      if (!secret) {
        callback({ code: status.NOT_FOUND, details: 'challenge was not found' });
        return;
      }
      const hash = createHash('sha256');
      if (answer === 'sha256(secret||nonce)') hash.update(secret).update(call.request.challenge_random);
      callback(null, { challenge_response: hash.digest() });
    },
  });
  const tls = ServerCredentials.createSsl(
    Buffer.from(bundlePem(ca)),
    [{ cert_chain: Buffer.from(own.certificatePem), private_key: Buffer.from(own.keyPem) }],
    true,
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', tls, (err, bound) => (err ? reject(err) : resolve(bound))),
  );
  return {
    endpoint: `127.0.0.1:${port}`,
    createChallenge() {
      const challengeID = randomBytes(16).toString('hex');
      const secret = randomBytes(16);
      challenges.set(challengeID, secret);
      // Go: `json:"endpoint,omitempty"`, `json:"ca,omitempty"` ([]byte: base64), `challengeID`,
      // `challengeSecret` ([]byte: base64); the listener's address is `[::]:3987` for ":3987".
      return (
        `{"endpoint":"[::]:3987","ca":"${Buffer.from(own.certificatePem).toString('base64')}",` +
        `"challengeID":"${challengeID}","challengeSecret":"${secret.toString('base64')}"}`
      );
    },
    stop: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
  };
}

/** kops' Hetzner verifier: `x-hetzner-id 4711` is the server whose private address is the node's. */
function hetznerPolicy(endpoint: () => string): BootstrapPolicy {
  return {
    name: 'hetzner',
    async evaluate(request) {
      if (request.proof.kind !== 'cloud-id' || request.proof.token !== '4711') {
        return { verdict: 'abstain', reasons: ['not server 4711'] };
      }
      const facts: NodeFacts = {
        nodeName: 'nodes-fsn1-4711',
        instanceGroup: 'nodes-fsn1',
        dnsNames: [],
        ipAddresses: ['10.10.0.3'],
        challengeEndpoint: endpoint(),
        evidence: { server: '4711' },
      };
      return { verdict: 'approve', facts, reasons: ['server 4711 is ours'] };
    },
  };
}

/** Go's pem.EncodeToMemory of MarshalPKIXPublicKey under the type nodeup writes. */
function nodeupKey(key: KeyObject): string {
  return encodePem('RSA PUBLIC KEY', spkiOf(key));
}

let node: KopsNode;
let oldNode: KopsNode;
before(async () => {
  node = await startKopsNode('sha256(secret||nonce)');
  oldNode = await startKopsNode('sha256("")');
});
after(async () => {
  await node.stop();
  await oldNode.stop();
});

let stores = 0;

function setup(endpoint: () => string) {
  const audit: AuditRecord[] = [];
  const context: BootstrapContext = {
    ca,
    policies: [hetznerPolicy(endpoint)],
    readNode: async () => undefined,
    apiServer: `https://api.internal.${clusterName}`,
    audit: (record) => audit.push(record),
    logger: silentLogger,
  };
  const secrets = new MemfsVfs(new URL(`memfs://wire-${process.pid}-${++stores}/cluster/secrets`));
  const options: KopsOptions = {
    certNames: ['kubelet', 'kubelet-server', 'kube-proxy'],
    challenger: new GrpcCallbackChallenger({ ca, clusterName, timeoutMs: 5000 }),
    nodeConfig: async (group) => ({ nodeupConfig: `instanceGroupName: ${group}\n` }),
    nodeSecrets: nodeSecretsReader(secrets),
  };
  const post = async (body: string) => {
    const answer = await kopsBootstrap(context, options, {
      body: Buffer.from(body),
      authorization: 'x-hetzner-id 4711',
      remoteAddress: '10.10.0.3',
      receivedAt: new Date(),
    });
    // What goes on the wire, as nodeup's json.Decoder reads it.
    return { status: answer.status, json: JSON.parse(JSON.stringify(answer.body)) as unknown, answer };
  };
  return { audit, secrets, post };
}

describe('kops HEAD nodeup on a callback cloud, byte for byte', () => {
  test('the config request (certs and keypairIDs null, includeNodeConfig, a challenge) is answered with its nodeup config and secrets, after the callback', async () => {
    const { audit, secrets, post } = setup(() => node.endpoint);
    await secrets.write('dockerconfig', Buffer.from('{"Data":"eyJhdXRocyI6e319"}'));
    const body =
      '{"apiVersion":"bootstrap.kops.k8s.io/v1alpha1","certs":null,"keypairIDs":null,' +
      `"includeNodeConfig":true,"challenge":${node.createChallenge()}}`;
    const { status: code, json } = await post(body);
    assert.equal(code, 200, JSON.stringify(json));
    const answer = json as { Certs?: Record<string, string>; nodeConfig?: Record<string, unknown> };
    assert.deepEqual(answer.nodeConfig, {
      nodeupConfig: 'instanceGroupName: nodes-fsn1\n',
      nodeSecrets: { dockerconfig: 'eyJhdXRocyI6e319' },
    });
    assert.deepEqual(answer.Certs ?? {}, {});
    assert.equal(audit.at(-1)?.verdict, 'approve');
    assert.match(String(audit.at(-1)?.evidence?.['callback']), /answered at 127\.0\.0\.1:/);
  });

  test("the certificate request (RSA PUBLIC KEY PEMs, keypairIDs, includeNodeConfig false, a challenge) gets every certificate, nodeup's names", async () => {
    const { post } = setup(() => node.endpoint);
    const keys = Array.from(
      { length: 3 },
      () => generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey,
    );
    const certs = JSON.stringify({
      kubelet: nodeupKey(keys[0] as KeyObject),
      'kubelet-server': nodeupKey(keys[1] as KeyObject),
      'kube-proxy': nodeupKey(keys[2] as KeyObject),
    });
    const body =
      `{"apiVersion":"bootstrap.kops.k8s.io/v1alpha1","certs":${certs},` +
      `"keypairIDs":{"kubernetes-ca":"${ca.signer.certificate.keypairId}"},` +
      `"includeNodeConfig":false,"challenge":${node.createChallenge()}}`;
    const { status: code, json } = await post(body);
    assert.equal(code, 200, JSON.stringify(json));
    const answer = json as { Certs: Record<string, string>; nodeConfig?: unknown };
    assert.deepEqual(Object.keys(answer.Certs).sort(), ['kube-proxy', 'kubelet', 'kubelet-server']);
    assert.equal(answer.nodeConfig, undefined);
    assert.match(
      opensslText(answer.Certs['kubelet'] as string),
      /Subject: O ?= ?system:nodes, CN ?= ?system:node:nodes-fsn1-4711/,
    );
  });

  test('a challenge answered once is not answered again: the same request replayed fails the callback (400), as kops', async () => {
    const { post } = setup(() => node.endpoint);
    const body =
      '{"apiVersion":"bootstrap.kops.k8s.io/v1alpha1","certs":null,"keypairIDs":null,' +
      `"includeNodeConfig":true,"challenge":${node.createChallenge()}}`;
    assert.equal((await post(body)).status, 200);
    const replay = await post(body);
    assert.deepEqual(replay.answer, { status: 400, body: 'callback failed\n' });
  });

  test('attack: a node that answers the constant sha256("") of kops before 95aa7ca6 proves nothing: 400 callback failed, nothing issued (kops HEAD refuses it too)', async () => {
    const { audit, post } = setup(() => oldNode.endpoint);
    const key = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
    const body =
      `{"apiVersion":"bootstrap.kops.k8s.io/v1alpha1","certs":${JSON.stringify({ kubelet: nodeupKey(key) })},` +
      `"keypairIDs":{"kubernetes-ca":"${ca.signer.certificate.keypairId}"},` +
      `"includeNodeConfig":false,"challenge":${oldNode.createChallenge()}}`;
    const { answer } = await post(body);
    assert.deepEqual(answer, { status: 400, body: 'callback failed\n' });
    assert.equal(audit.at(-1)?.verdict, 'deny');
    assert.equal(audit.at(-1)?.issued, undefined);
    assert.match(String(audit.at(-1)?.detail), /answered the callback challenge wrongly/);
  });
});
