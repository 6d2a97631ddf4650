/**
 * The callback challenge in both bootstrap handlers, end to end on loopback: a test policy sets
 * `challengeEndpoint` (as the callback clouds' policies do) to where the node's real challenge server
 * listens, and the request carries (or not) that server's challenge.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { createServer, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { type ChallengeListener, startChallengeServer } from '../agent/challenge-server.ts';
import { InvalidInputError } from '../errors.ts';
import { silentLogger } from '../log.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey, spkiOf } from '../pki/keys.ts';
import { encodePem } from '../pki/pem.ts';
import { nativeApiVersion } from '../protocol/bootstrap-api.ts';
import { type ChallengeClaim, challengeFieldOf } from '../protocol/challenge.ts';
import { GrpcCallbackChallenger } from './challenge-caller.ts';
import type { BootstrapContext } from './context.ts';
import { isDependencyFault } from './dependency.ts';
import { kopsApiVersion, kopsBootstrap } from './kops-handler.ts';
import { submitCertificates } from './native-handler.ts';
import type { AuditRecord, BootstrapPolicy, NodeFacts } from './types.ts';

const clusterName = 'minimal.example.com';
const ca = createCa();
const challenger = new GrpcCallbackChallenger({ ca, clusterName, timeoutMs: 5000 });
const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;

let node: ChallengeListener;
let other: ChallengeListener;
before(async () => {
  node = await startChallengeServer({ clusterName, clusterCaPem: bundlePem(ca), listen: '127.0.0.1:0' });
  other = await startChallengeServer({ clusterName, clusterCaPem: bundlePem(ca), listen: '127.0.0.1:0' });
});
after(async () => {
  await node.stop();
  await other.stop();
});

/** A callback cloud's policy: `x-hetzner-id 42` is the server whose cloud address is `endpoint()`. */
function callbackPolicy(endpoint: () => string): BootstrapPolicy {
  return {
    name: 'hetzner',
    async evaluate(request) {
      if (request.proof.kind !== 'cloud-id') return { verdict: 'abstain', reasons: ['not a cloud id'] };
      const facts: NodeFacts = {
        nodeName: 'nodes-fsn1-42',
        instanceGroup: 'nodes-fsn1',
        dnsNames: [],
        ipAddresses: ['10.0.0.42'],
        challengeEndpoint: endpoint(),
        evidence: { server: '42' },
      };
      return { verdict: 'approve', facts, reasons: ['server 42 is ours'] };
    },
  };
}

/** PEM armour around bytes that are no certificate: it decodes as PEM, and only reading it fails. */
const garbageCertificatePem = '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n';

function contextFor(endpoint: () => string, audit: AuditRecord[]): BootstrapContext {
  return {
    ca,
    policies: [callbackPolicy(endpoint)],
    readNode: async () => undefined,
    apiServer: 'https://api.internal.minimal.example.com',
    audit: (record) => audit.push(record),
    logger: silentLogger,
  };
}

function kopsBody(challenge?: ChallengeClaim) {
  return Buffer.from(
    JSON.stringify({
      apiVersion: kopsApiVersion,
      certs: { kubelet: encodePem('RSA PUBLIC KEY', spkiOf(rsa)) },
      keypairIDs: {},
      ...(challenge ? { challenge: challengeFieldOf(challenge) } : {}),
    }),
  );
}

async function kops(
  endpoint: () => string,
  challenge: ChallengeClaim | undefined,
  audit: AuditRecord[] = [],
) {
  const answer = await kopsBootstrap(
    contextFor(endpoint, audit),
    { certNames: ['kubelet'], challenger },
    {
      body: kopsBody(challenge),
      authorization: 'x-hetzner-id 42',
      remoteAddress: '10.0.0.42',
      receivedAt: new Date(),
    },
  );
  return { answer, audit };
}

describe('kops POST /bootstrap with a callback cloud policy', () => {
  test('the node answers the challenge: certificates are issued and the audit names the callback', async () => {
    const { answer, audit } = await kops(() => node.endpoint, node.createChallenge());
    assert.equal(answer.status, 200, String(answer.body));
    assert.ok((answer.body as { Certs: Record<string, string> }).Certs['kubelet']);
    assert.equal(audit.at(-1)?.verdict, 'approve');
    assert.equal(audit.at(-1)?.evidence?.['callback'], `answered at ${node.endpoint}`);
  });

  test('the policy sets an endpoint but the request carries no challenge: 400 "callback failed", nothing issued', async () => {
    const { answer, audit } = await kops(() => node.endpoint, undefined);
    assert.deepEqual(answer, { status: 400, body: 'callback failed\n' });
    assert.equal(audit.at(-1)?.decidedBy, 'callback-challenge');
    assert.equal(audit.at(-1)?.verdict, 'deny');
    assert.equal(audit.at(-1)?.issued, undefined);
    assert.deepEqual(audit.at(-1)?.detail, ['the request carries no callback challenge']);
  });

  test("the callback reaches another node's server (wrong host): 400, nothing issued", async () => {
    const { answer, audit } = await kops(() => other.endpoint, node.createChallenge());
    assert.deepEqual(answer, { status: 400, body: 'callback failed\n' });
    assert.match(audit.at(-1)?.detail?.[0] ?? '', /certificate/);
  });

  test('a challenge whose certificate is PEM of garbage: 400 "callback failed", audited, nothing issued', async () => {
    const claim = { ...node.createChallenge(), serverCertificatePem: garbageCertificatePem };
    const { answer, audit } = await kops(() => node.endpoint, claim);
    assert.deepEqual(answer, { status: 400, body: 'callback failed\n' });
    assert.equal(audit.at(-1)?.decidedBy, 'callback-challenge');
    assert.equal(audit.at(-1)?.verdict, 'deny');
    assert.match(audit.at(-1)?.detail?.[0] ?? '', /challenge\.ca is not a readable certificate/);
  });

  test('a wrong secret: 400, nothing issued', async () => {
    const claim = node.createChallenge();
    const { answer } = await kops(() => node.endpoint, { ...claim, secret: Buffer.alloc(16, 1) });
    assert.deepEqual(answer, { status: 400, body: 'callback failed\n' });
  });

  test('a replayed request (the same challenge id again): 400, nothing issued the second time', async () => {
    const claim = node.createChallenge();
    assert.equal((await kops(() => node.endpoint, claim)).answer.status, 200);
    const { answer, audit } = await kops(() => node.endpoint, claim);
    assert.deepEqual(answer, { status: 400, body: 'callback failed\n' });
    assert.match(audit.at(-1)?.detail?.[0] ?? '', /not found/);
  });

  test('a malformed challenge field: 400 "callback failed"', async () => {
    const answer = await kopsBootstrap(
      contextFor(() => node.endpoint, []),
      { certNames: ['kubelet'], challenger },
      {
        body: Buffer.from(
          JSON.stringify({ apiVersion: kopsApiVersion, certs: {}, challenge: { challengeID: 'zz' } }),
        ),
        authorization: 'x-hetzner-id 42',
        remoteAddress: '10.0.0.42',
        receivedAt: new Date(),
      },
    );
    assert.deepEqual(answer, { status: 400, body: 'callback failed\n' });
  });

  test('a node whose challenge server does not answer in time: 503 with Retry-After, nothing issued', async () => {
    const sockets: Socket[] = [];
    const silent = createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const endpoint = `127.0.0.1:${(silent.address() as { port: number }).port}`;
    const audit: AuditRecord[] = [];
    try {
      const answer = await kopsBootstrap(
        contextFor(() => endpoint, audit),
        {
          certNames: ['kubelet'],
          challenger: new GrpcCallbackChallenger({ ca, clusterName, timeoutMs: 300 }),
        },
        {
          body: kopsBody(node.createChallenge()),
          authorization: 'x-hetzner-id 42',
          remoteAddress: '10.0.0.42',
          receivedAt: new Date(),
        },
      );
      assert.equal(answer.status, 503);
      assert.match(answer.headers?.['retry-after'] ?? '', /^\d+$/);
      assert.equal(audit.at(-1)?.verdict, 'error');
      assert.equal(audit.at(-1)?.issued, undefined);
    } finally {
      for (const socket of sockets) socket.destroy();
      silent.close();
    }
  });

  test('a server without a challenger refuses requests whose policy needs the callback (fail closed)', async () => {
    const answer = await kopsBootstrap(
      contextFor(() => node.endpoint, []),
      { certNames: ['kubelet'] },
      {
        body: kopsBody(node.createChallenge()),
        authorization: 'x-hetzner-id 42',
        remoteAddress: '10.0.0.42',
        receivedAt: new Date(),
      },
    );
    assert.deepEqual(answer, { status: 400, body: 'callback failed\n' });
  });
});

describe('native POST /v1/certificates with a callback cloud policy', () => {
  const csr = buildCsrPem(generateKey('ecdsa-p256'), {
    subject: { commonName: 'system:node:nodes-fsn1-42', organizations: ['system:nodes'] },
  });
  function nativeInput(challenge?: ChallengeClaim) {
    return {
      body: Buffer.from(
        JSON.stringify({
          apiVersion: nativeApiVersion,
          certificateSigningRequests: { kubelet: csr },
          ...(challenge ? { challenge: challengeFieldOf(challenge) } : {}),
        }),
      ),
      authorization: 'x-hetzner-id 42',
      remoteAddress: '10.0.0.42',
      receivedAt: new Date(),
    };
  }

  test('the node answers: issued', async () => {
    const audit: AuditRecord[] = [];
    const answer = await submitCertificates(
      contextFor(() => node.endpoint, audit),
      nativeInput(node.createChallenge()),
      {
        challenger,
      },
    );
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(audit.at(-1)?.evidence?.['callback'], `answered at ${node.endpoint}`);
  });

  test('no challenge in the request: 403 denied, nothing issued', async () => {
    const audit: AuditRecord[] = [];
    const answer = await submitCertificates(
      contextFor(() => node.endpoint, audit),
      nativeInput(),
      { challenger },
    );
    assert.deepEqual(answer, {
      status: 403,
      body: { status: 'denied', reasons: ['the callback challenge failed'] },
    });
    assert.equal(audit.at(-1)?.decidedBy, 'callback-challenge');
    assert.deepEqual(audit.at(-1)?.detail, ['the request carries no callback challenge']);
  });

  test('a node whose clock is an hour ahead: a fault (503, Retry-After) naming the clocks (it retries once chrony sets it), nothing issued', async () => {
    const ahead = await startChallengeServer({
      clusterName,
      clusterCaPem: bundlePem(ca),
      listen: '127.0.0.1:0',
      now: () => new Date(Date.now() + 3_600_000),
    });
    const audit: AuditRecord[] = [];
    try {
      // Thrown to the server's edge, which answers it 503 with its Retry-After and message.
      await assert.rejects(
        submitCertificates(
          contextFor(() => ahead.endpoint, audit),
          nativeInput(ahead.createChallenge()),
          { challenger },
        ),
        (err: unknown) => {
          assert.ok(isDependencyFault(err), String(err));
          assert.equal(err.dependency, 'node-callback');
          assert.ok(err.retryAfterSeconds > 0);
          assert.match(
            err.message,
            /^the node's challenge certificate is not valid yet by this controller's clock: the node's clock is ahead of this controller's .*; retry in \d+ s$/,
          );
          return true;
        },
      );
      assert.equal(audit.at(-1)?.verdict, 'error');
      assert.equal(audit.at(-1)?.issued, undefined);
    } finally {
      await ahead.stop();
    }
  });

  test("another node's server at the endpoint, or a replayed challenge: 403 denied", async () => {
    const claim = node.createChallenge();
    const wrongHost = await submitCertificates(
      contextFor(() => other.endpoint, []),
      nativeInput(claim),
      { challenger },
    );
    assert.equal(wrongHost.status, 403);
    assert.equal(
      (
        await submitCertificates(
          contextFor(() => node.endpoint, []),
          nativeInput(claim),
          { challenger },
        )
      ).status,
      200,
    );
    const replay = await submitCertificates(
      contextFor(() => node.endpoint, []),
      nativeInput(claim),
      { challenger },
    );
    assert.equal(replay.status, 403);
  });

  test('a malformed challenge field is a 400 before any policy runs', async () => {
    const body = JSON.stringify({
      apiVersion: nativeApiVersion,
      certificateSigningRequests: { kubelet: csr },
      challenge: 'x',
    });
    await assert.rejects(
      submitCertificates(
        contextFor(() => node.endpoint, []),
        { ...nativeInput(), body: Buffer.from(body) },
        { challenger },
      ),
      /challenge must be an object/,
    );
  });

  test('a challenge whose certificate is PEM of garbage is a 400, not a server fault', async () => {
    const claim = { ...node.createChallenge(), serverCertificatePem: garbageCertificatePem };
    const body = JSON.stringify({
      apiVersion: nativeApiVersion,
      certificateSigningRequests: { kubelet: csr },
      challenge: challengeFieldOf(claim),
    });
    await assert.rejects(
      submitCertificates(
        contextFor(() => node.endpoint, []),
        { ...nativeInput(), body: Buffer.from(body) },
        { challenger },
      ),
      (err) =>
        err instanceof InvalidInputError && /challenge\.ca is not a readable certificate/.test(err.message),
    );
  });
});
