import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import type { TLSSocket } from 'node:tls';
import { Registry } from 'prom-client';
import { cloudCallMetrics } from '../../cloud/metrics.ts';
import { KopsError } from '../../errors.ts';
import {
  createCertificateAuthority,
  issueClientCertificate,
  issueServingCertificate,
  type SimCertificateAuthority,
  type SimKeyPair,
} from '../../sim/tls.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { cloudCallsTimed, cloudRequests } from '../../testing/cloud-calls.ts';
import { dependencyFault } from '../dependency.ts';
import type { BootstrapPolicy, PolicyDecision } from '../types.ts';
import { type BootstrapReview, webhookPolicy } from './webhook.ts';

let ca: SimCertificateAuthority;
let client: SimKeyPair;
let server: Server;
let url: string;
/** What the fake webhook answers next: status and body, or a delay that outlasts the timeout. */
let reply: { status: number; body: string } | 'hang' = { status: 200, body: '{"verdict":"approve"}' };
const reviews: BootstrapReview[] = [];
const peers: string[] = [];

before(async () => {
  ca = await createCertificateAuthority('webhook-ca');
  const serving = await issueServingCertificate(ca);
  client = await issueClientCertificate(ca, { name: 'kops-controller', groups: [] });
  server = createServer(
    {
      cert: serving.certificate,
      key: serving.privateKey,
      ca: ca.certificate,
      requestCert: true,
      rejectUnauthorized: true,
    },
    (req, res) => {
      peers.push(String((req.socket as TLSSocket).getPeerCertificate().subject?.CN ?? ''));
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        reviews.push(JSON.parse(Buffer.concat(chunks).toString()));
        if (reply === 'hang') return;
        res.writeHead(reply.status, { 'content-type': 'application/json' });
        res.end(reply.body);
      });
    },
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/review`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const verifier: BootstrapPolicy = {
  name: 'aws',
  evaluate: async () => ({
    verdict: 'approve',
    facts: {
      nodeName: 'i-0123456789abcdef0',
      instanceGroup: 'nodes',
      dnsNames: ['ip-10-0-0-1.ec2.internal'],
      ipAddresses: ['10.0.0.1'],
      evidence: { account: '1' },
    },
    reasons: ['aws verified'],
  }),
};

function policy(
  overrides: { verifiedBy?: BootstrapPolicy; cert?: string; key?: string; timeoutMs?: number } = {},
) {
  return webhookPolicy({
    url,
    ca: ca.certificate,
    cert: client.certificate,
    key: client.privateKey,
    timeoutMs: 2_000,
    ...overrides,
  });
}

async function evaluate(p: BootstrapPolicy, answer: typeof reply): Promise<PolicyDecision> {
  reply = answer;
  return p.evaluate(testRequest({ claimedNodeName: 'evil-name' }), contextAt());
}

test('webhook approval issues exactly the verified facts; the review carries them, over mTLS', async () => {
  reviews.length = 0;
  const decision = await evaluate(policy({ verifiedBy: verifier }), {
    status: 200,
    body: JSON.stringify({
      verdict: 'approve',
      reasons: ['in the CMDB'],
      nodeName: 'widened',
      dnsNames: ['evil.example'],
    }),
  });
  assert.ok(decision.verdict === 'approve', JSON.stringify(decision));
  assert.equal(decision.facts.nodeName, 'i-0123456789abcdef0');
  assert.deepEqual(decision.facts.dnsNames, ['ip-10-0-0-1.ec2.internal']);
  assert.equal(decision.facts.evidence['webhook'], url);
  assert.deepEqual(decision.reasons, ['aws verified', 'in the CMDB']);
  const review = reviews[0]!;
  assert.equal(review.apiVersion, 'bootstrap.kops-controller.io/v1');
  assert.equal(review.verifiedBy, 'aws');
  assert.equal(review.facts?.nodeName, 'i-0123456789abcdef0');
  assert.equal(review.request.claimedNodeName, 'evil-name');
  assert.equal(peers.at(-1), 'kops-controller');
});

test('webhook deny and abstain', async () => {
  const denied = await evaluate(policy({ verifiedBy: verifier }), {
    status: 200,
    body: '{"verdict":"deny","reasons":["not in the CMDB"]}',
  });
  assert.deepEqual(denied, { verdict: 'deny', reasons: ['not in the CMDB'] });
  const abstained = await evaluate(policy({ verifiedBy: verifier }), {
    status: 200,
    body: '{"verdict":"abstain"}',
  });
  assert.equal(abstained.verdict, 'approve', 'the verified decision stands');
});

test('webhook without a verifying policy approves only the claimed name, no SANs', async () => {
  const decision = await evaluate(policy(), { status: 200, body: '{"verdict":"approve"}' });
  assert.ok(decision.verdict === 'approve');
  assert.deepEqual(
    [decision.facts.nodeName, decision.facts.dnsNames, decision.facts.ipAddresses],
    ['evil-name', [], []],
  );
});

test('webhook is not called when the verifying policy denies', async () => {
  reviews.length = 0;
  const denier: BootstrapPolicy = {
    name: 'aws',
    evaluate: async () => ({ verdict: 'deny', reasons: ['no'] }),
  };
  const decision = await evaluate(policy({ verifiedBy: denier }), {
    status: 200,
    body: '{"verdict":"approve"}',
  });
  assert.equal(decision.verdict, 'deny');
  assert.equal(reviews.length, 0);
});

/** Asserts a dependency fault naming the webhook: the node gets 503 and retries, and nothing is issued. */
function isWebhookFault(err: unknown): boolean {
  assert.ok(err instanceof KopsError, String(err));
  assert.equal(err.kind, 'unavailable', err.message);
  assert.equal(err.details?.['reason'], 'dependency-unavailable', err.message);
  assert.equal(err.details?.['dependency'], 'webhook', err.message);
  return true;
}

test('fail closed, retryable: unreachable, TLS refused, timeout, 5xx or 429 is a dependency fault, never an approval', async () => {
  const p = policy({ verifiedBy: verifier, timeoutMs: 300 });
  for (const answer of [
    { status: 500, body: '{"verdict":"approve"}' },
    { status: 503, body: '{"verdict":"approve"}' },
    { status: 429, body: '{}' },
    'hang' as const,
  ]) {
    await assert.rejects(evaluate(p, answer), isWebhookFault, JSON.stringify(answer));
  }
  const unreachable = webhookPolicy({
    url: 'https://127.0.0.1:1/review',
    ca: ca.certificate,
    cert: client.certificate,
    key: client.privateKey,
    verifiedBy: verifier,
  });
  await assert.rejects(evaluate(unreachable, { status: 200, body: '{"verdict":"approve"}' }), isWebhookFault);
  const stranger = await createCertificateAuthority('stranger');
  const wrong = await issueClientCertificate(stranger, { name: 'intruder', groups: [] });
  await assert.rejects(
    evaluate(policy({ cert: wrong.certificate, key: wrong.privateKey }), {
      status: 200,
      body: '{"verdict":"approve"}',
    }),
    isWebhookFault,
    'the webhook refuses our client certificate',
  );
  const impostor = webhookPolicy({
    url,
    ca: stranger.certificate,
    cert: client.certificate,
    key: client.privateKey,
  });
  await assert.rejects(
    evaluate(impostor, { status: 200, body: '{"verdict":"approve"}' }),
    isWebhookFault,
    'a webhook whose certificate our CA does not vouch for',
  );
});

test('fail closed, final: a malformed answer, or a non-200 that is not a failure, denies', async () => {
  const p = policy({ verifiedBy: verifier, timeoutMs: 300 });
  for (const answer of [
    { status: 200, body: 'approve' },
    { status: 200, body: '{"verdict":"yes"}' },
    { status: 403, body: '{"verdict":"approve"}' },
    { status: 204, body: '' },
    { status: 200, body: `{"verdict":"approve","reasons":["${'x'.repeat(70_000)}"]}` },
  ]) {
    const decision = await evaluate(p, answer);
    assert.equal(decision.verdict, 'deny', JSON.stringify(answer).slice(0, 80));
    assert.match(decision.reasons[0] ?? '', /webhook .* answered .*, so the request is denied/);
  }
});

test("a dependency fault of the verifying policy is the webhook's answer too, and the webhook is not called", async () => {
  reviews.length = 0;
  const failing: BootstrapPolicy = {
    name: 'aws',
    evaluate: async () => {
      throw dependencyFault('sts', new Error('connect ECONNREFUSED'));
    },
  };
  await assert.rejects(
    evaluate(policy({ verifiedBy: failing }), { status: 200, body: '{"verdict":"approve"}' }),
    (err: unknown) => err instanceof KopsError && err.details?.['dependency'] === 'sts',
  );
  assert.equal(reviews.length, 0);
});

test('each review sent is counted as call BootstrapReview: ok, rejected, throttled or an error', async () => {
  const registry = new Registry();
  const p = webhookPolicy({
    url,
    ca: ca.certificate,
    cert: client.certificate,
    key: client.privateKey,
    timeoutMs: 300,
    verifiedBy: verifier,
    cloudCalls: cloudCallMetrics(registry),
  });
  for (const answer of [
    { status: 200, body: '{"verdict":"deny"}' },
    { status: 200, body: '{"verdict":"approve"}' },
    { status: 403, body: '{}' },
    { status: 429, body: '{}' },
    { status: 500, body: '{}' },
    { status: 204, body: '' },
    { status: 200, body: '{"verdict":"yes"}' },
    'hang' as const,
  ]) {
    // 429, 500 and no answer are faults (thrown); the rest are decisions.
    await evaluate(p, answer).catch((err: unknown) => assert.ok(isWebhookFault(err)));
  }
  // A webhook the verifying policy's denial spares is not called, so not counted.
  const denier: BootstrapPolicy = { name: 'aws', evaluate: async () => ({ verdict: 'deny', reasons: [] }) };
  await evaluate(
    webhookPolicy({
      url,
      ca: ca.certificate,
      cert: '',
      key: '',
      verifiedBy: denier,
      cloudCalls: cloudCallMetrics(registry),
    }),
    { status: 200, body: '{"verdict":"approve"}' },
  );
  assert.deepEqual(await cloudRequests(registry), {
    'webhook BootstrapReview ok': 2,
    'webhook BootstrapReview rejected': 1,
    'webhook BootstrapReview throttled': 1,
    'webhook BootstrapReview error': 4,
  });
  assert.equal(await cloudCallsTimed(registry, 'webhook', 'BootstrapReview'), 8);
});

test('webhook refuses a plain-http URL at configuration time', () => {
  assert.throws(
    () => webhookPolicy({ url: 'http://127.0.0.1:1/', ca: '', cert: '', key: '' }),
    /must be https/,
  );
});
