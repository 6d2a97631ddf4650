import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import { type AddressInfo, createServer as createTcpServer } from 'node:net';
import { after, before, test } from 'node:test';
import type { TLSSocket } from 'node:tls';
import { Registry } from 'prom-client';
import { cloudCallMetrics } from '../../cloud/metrics.ts';
import { KopsError, type UnavailableError } from '../../errors.ts';
import {
  createCertificateAuthority,
  issueClientCertificate,
  issueServingCertificate,
  type SimCertificateAuthority,
  type SimKeyPair,
} from '../../sim/tls.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { cloudCallsTimed, cloudRequests } from '../../testing/cloud-calls.ts';
import { CircuitBreaker, PausedCallError } from '../circuit-breaker.ts';
import { dependencyFault, faultDetail, isDependencyFault } from '../dependency.ts';
import type { BootstrapPolicy, PolicyDecision } from '../types.ts';
import { type BootstrapReview, webhookPolicy } from './webhook.ts';

let ca: SimCertificateAuthority;
let client: SimKeyPair;
let server: Server;
let url: string;
/**
 * What the fake webhook answers next: status and body (and headers), a delay that outlasts the
 * timeout, or an answer written by hand.
 */
let reply:
  | { status: number; body: string; headers?: Record<string, string> }
  | 'hang'
  | ((res: ServerResponse) => void) = { status: 200, body: '{"verdict":"approve"}' };
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
        if (typeof reply === 'function') return reply(res);
        res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
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
  overrides: {
    verifiedBy?: BootstrapPolicy;
    cert?: string;
    key?: string;
    timeoutMs?: number;
    circuit?: CircuitBreaker;
  } = {},
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
    // Only a well-formed verdict is a decision; everything else is a fault (thrown).
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

test('a kept-alive connection the webhook closed as the review went out: sent once more on a new one, not a 503', async () => {
  const p = policy();
  assert.equal((await evaluate(p, { status: 200, body: '{"verdict":"approve"}' })).verdict, 'approve');
  const sent = reviews.length;
  let dropped = 0;
  const decision = await evaluate(p, (res) => {
    if (dropped++ === 0) {
      res.socket?.destroy();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"verdict":"approve"}');
  });
  assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
  assert.equal(reviews.length - sent, 2, 'once on the dead connection, once on a new one');
  // A new connection that fails is no stale one: a fault, not sent again.
  const fresh = policy();
  const before = reviews.length;
  await assert.rejects(
    evaluate(fresh, (res) => res.socket?.destroy()),
    isWebhookFault,
  );
  assert.equal(reviews.length - before, 1);
});

test('webhook refuses a plain-http URL at configuration time', () => {
  assert.throws(
    () => webhookPolicy({ url: 'http://127.0.0.1:1/', ca: '', cert: '', key: '' }),
    /must be https/,
  );
});

/** A fault naming the webhook whose cause, for the log and the audit trail, matches `cause`. */
function webhookFaultFor(cause: RegExp) {
  return (err: unknown) => {
    assert.ok(isWebhookFault(err));
    assert.match(faultDetail(err as UnavailableError), cause);
    return true;
  };
}

test('an answer that is not a well-formed verdict is a fault (503), never an approval nor a denial', async () => {
  const p = policy({ verifiedBy: verifier, timeoutMs: 1_000 });
  const malformed: Array<[string, RegExp]> = [
    ['', /not JSON/],
    ['approve', /not JSON/],
    ['<html>502 Bad Gateway</html>', /not JSON/],
    ['null', /not \{"verdict"/],
    ['[]', /not \{"verdict"/],
    ['"approve"', /not \{"verdict"/],
    ['{"allowed":true}', /not \{"verdict"/],
    ['{"verdict":"true"}', /not \{"verdict"/],
    ['{"verdict":true}', /not \{"verdict"/],
    ['{"verdict":1}', /not \{"verdict"/],
    ['{"verdict":["approve"]}', /not \{"verdict"/],
    ['{"verdict":"Approve"}', /not \{"verdict"/],
    ['{"verdict":"approve","reasons":"in the CMDB"}', /not \{"verdict"/],
    ['{"verdict":"approve","reasons":[1]}', /not \{"verdict"/],
    ['{"verdict":"deny","reasons":{"0":"no"}}', /not \{"verdict"/],
    ['{"__proto__":{"verdict":"approve"}}', /not \{"verdict"/],
    ['{"verdict":"deny","verdict":"approve"}', /"verdict" twice/],
    ['{"verdict":"approve","reasons":[],"reasons":["x"]}', /"reasons" twice/],
    ['{"verd\\u0069ct":"deny","verdict":"approve"}', /"verdict" twice/],
    ['{"apiVersion":"bootstrap.kops-controller.io/v2","verdict":"approve"}', /apiVersion/],
    ['{"apiVersion":1,"verdict":"approve"}', /apiVersion/],
    ['{"kind":"AdmissionReview","verdict":"approve"}', /kind/],
    [`{"verdict":"approve","reasons":["${'x'.repeat(70_000)}"]}`, /more than 65536 bytes/],
  ];
  for (const [body, cause] of malformed) {
    await assert.rejects(evaluate(p, { status: 200, body }), webhookFaultFor(cause), body.slice(0, 80));
  }
  // The same verdict written by a webhook that echoes the review's own apiVersion and kind is well-formed.
  const echoed = await evaluate(p, {
    status: 200,
    body: '{"apiVersion":"bootstrap.kops-controller.io/v1","kind":"BootstrapReview","verdict":"deny","reasons":["no"]}',
  });
  assert.deepEqual(echoed, { verdict: 'deny', reasons: ['no'] });
});

test('a status other than 200 is a fault (503): the webhook refused or moved, it did not decide', async () => {
  const p = policy({ verifiedBy: verifier, timeoutMs: 1_000 });
  for (const status of [204, 201, 400, 401, 403, 404, 409]) {
    await assert.rejects(
      evaluate(p, { status, body: '{"verdict":"deny"}' }),
      webhookFaultFor(new RegExp(`HTTP ${status}`)),
      String(status),
    );
  }
});

test('a redirect is not followed, to another host or at all, and is a fault', async () => {
  let connections = 0;
  const elsewhere = createTcpServer((socket) => {
    connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => elsewhere.listen(0, '127.0.0.1', resolve));
  try {
    const target = `https://127.0.0.1:${(elsewhere.address() as AddressInfo).port}/review`;
    const p = policy({ verifiedBy: verifier, timeoutMs: 1_000 });
    reviews.length = 0;
    for (const status of [301, 302, 307, 308]) {
      await assert.rejects(
        evaluate(p, { status, body: '{"verdict":"approve"}', headers: { location: target } }),
        webhookFaultFor(new RegExp(`HTTP ${status}`)),
      );
    }
    assert.equal(connections, 0, 'nothing was sent to the host the redirect named');
    assert.equal(reviews.length, 4, 'one review per decision, to the configured webhook only');
  } finally {
    await new Promise((resolve) => elsewhere.close(resolve));
  }
});

test('an answer that trickles is cut at the deadline of the whole exchange, not only an idle one', async () => {
  const p = policy({ verifiedBy: verifier, timeoutMs: 600 });
  const body = '{"verdict":"approve"}                                                  ';
  const timers: NodeJS.Timeout[] = [];
  const started = performance.now();
  await assert.rejects(
    evaluate(p, (res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      let i = 0;
      const tick = setInterval(() => {
        if (i < body.length) res.write(body[i++]);
        else {
          clearInterval(tick);
          res.end();
        }
      }, 50);
      timers.push(tick);
      res.on('close', () => clearInterval(tick));
    }),
    webhookFaultFor(/no answer within 600 ms/),
  );
  for (const t of timers) clearInterval(t);
  const took = performance.now() - started;
  assert.ok(took < 1_500, `decided after ${Math.round(took)} ms`);
});

test('an endless answer is cut off at 64 KiB: a fault, memory bounded, the connection dropped', async () => {
  const p = policy({ verifiedBy: verifier, timeoutMs: 5_000 });
  let sent = 0;
  let closed = false;
  const chunk = Buffer.alloc(16 * 1024, 0x20);
  await assert.rejects(
    evaluate(p, (res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"verdict":"approve","reasons":["');
      const pump = () => {
        while (!closed && sent < 64 * 1024 * 1024) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
      };
      res.on('close', () => {
        closed = true;
      });
      pump();
    }),
    webhookFaultFor(/more than 65536 bytes/),
  );
  assert.ok(sent < 8 * 1024 * 1024, `the webhook got to send ${sent} bytes`);
});

test('429 and 5xx with any Retry-After are faults whose Retry-After stays between 2 and 60 s', async () => {
  const p = policy({ verifiedBy: verifier, timeoutMs: 1_000 });
  for (const retryAfter of ['-1', '0', '99999999999', 'soon', 'Wed, 21 Oct 2015 07:28:00 GMT', '1e400', '']) {
    for (const status of [429, 503]) {
      await assert.rejects(
        evaluate(p, { status, body: '{}', headers: { 'retry-after': retryAfter } }),
        (err: unknown) => {
          assert.ok(isWebhookFault(err));
          const seconds = (err as KopsError).retryAfterSeconds ?? Number.NaN;
          assert.ok(seconds >= 2 && seconds <= 60, `${status} Retry-After ${retryAfter}: ${seconds}`);
          return true;
        },
      );
    }
  }
});

test('an approval never widens what is certified: name, group, SANs and evidence are the verified facts', async () => {
  const body = JSON.stringify({
    verdict: 'approve',
    nodeName: 'kube-apiserver',
    instanceGroup: 'control-plane',
    dnsNames: ['kubernetes.default.svc'],
    ipAddresses: ['10.96.0.1'],
    addresses: ['10.96.0.1'],
    groups: ['system:masters'],
    facts: { nodeName: 'kube-apiserver', instanceGroup: 'control-plane' },
    evidence: { account: 'other' },
  });
  const decision = await evaluate(policy({ verifiedBy: verifier }), { status: 200, body });
  assert.ok(decision.verdict === 'approve', JSON.stringify(decision));
  const verified = await verifier.evaluate(testRequest(), contextAt());
  assert.ok(verified.verdict === 'approve');
  assert.deepEqual(decision.facts, {
    ...verified.facts,
    evidence: { ...verified.facts.evidence, webhook: url },
  });
  const bare = await evaluate(policy(), { status: 200, body });
  assert.ok(bare.verdict === 'approve');
  assert.deepEqual(
    [bare.facts.nodeName, bare.facts.instanceGroup, bare.facts.dnsNames, bare.facts.ipAddresses],
    ['evil-name', undefined, [], []],
  );
});

test('a serving certificate that changes is verified again against the configured CA only', async () => {
  const p = policy({ verifiedBy: verifier, timeoutMs: 1_000 });
  const ok = await evaluate(p, { status: 200, body: '{"verdict":"approve"}' });
  assert.equal(ok.verdict, 'approve');
  const stranger = await createCertificateAuthority('stranger-serving');
  const other = await issueServingCertificate(stranger);
  const original = await issueServingCertificate(ca);
  server.setSecureContext({
    cert: other.certificate,
    key: other.privateKey,
    ca: ca.certificate,
  });
  server.closeAllConnections();
  // The client sees its kept-alive connection closed before it sends again.
  await new Promise((resolve) => setTimeout(resolve, 50));
  try {
    await assert.rejects(
      evaluate(p, { status: 200, body: '{"verdict":"approve"}' }),
      webhookFaultFor(/certificate/),
    );
  } finally {
    server.setSecureContext({
      cert: original.certificate,
      key: original.privateKey,
      ca: ca.certificate,
    });
    server.closeAllConnections();
  }
  const again = await evaluate(p, { status: 200, body: '{"verdict":"approve"}' });
  assert.equal(again.verdict, 'approve', 'a new certificate from the configured CA is fine');
});

test('a webhook that cannot be reached for a while is paused: one review per interval, none in between, and the first verdict resumes it', async () => {
  const clock = { now: 0 };
  const circuit = new CircuitBreaker({
    name: 'the approval webhook',
    failuresToOpen: 3,
    minFailingMs: 1_000,
    probeIntervalMs: 5_000,
    now: () => clock.now,
  });
  const p = policy({ verifiedBy: verifier, circuit });
  reviews.length = 0;
  // The webhook takes the review and drops the connection: no answer.
  const drop = (res: ServerResponse) => res.socket?.destroy();
  for (let i = 0; i < 3; i++) {
    await assert.rejects(evaluate(p, drop), isDependencyFault);
    clock.now += 600;
  }
  assert.equal(reviews.length, 3);
  for (let i = 0; i < 10; i++) {
    const paused = await evaluate(p, drop).catch((err: unknown) => err);
    assert.ok(isDependencyFault(paused), 'a 503 for the node, never a denial');
    assert.ok(paused.cause instanceof PausedCallError, faultDetail(paused));
  }
  assert.equal(reviews.length, 3, 'no review was sent while paused');
  clock.now += 5_000;
  const resumed = await evaluate(p, { status: 200, body: '{"verdict":"approve"}' });
  assert.equal(resumed.verdict, 'approve');
  assert.equal(reviews.length, 4);
  assert.equal(circuit.state, 'closed');
});

test('attack: reviews the webhook fails on (5xx, a 403, a 200 that is no verdict) do not pause it for everyone', async () => {
  const circuit = new CircuitBreaker({ name: 'the approval webhook', failuresToOpen: 3, minFailingMs: 0 });
  const p = policy({ verifiedBy: verifier, circuit });
  // Each kind several times in a row: any of them counted as a failure would open the circuit.
  for (const status of [500, 502, 503, 504, 403, 200]) {
    for (let i = 0; i < 3; i++) {
      await assert.rejects(evaluate(p, { status, body: status === 200 ? '{}' : 'no' }), isDependencyFault);
    }
    assert.equal(circuit.state, 'closed', `after three answers ${status}`);
  }
  assert.equal((await evaluate(p, { status: 200, body: '{"verdict":"approve"}' })).verdict, 'approve');
});
