/**
 * A failed dependency is never a denial, end to end over real sockets: a real bootstrap server in front of
 * the simulated API server and AWS (src/testing/bootstrap-harness.ts) with faults injected into the
 * replay-marker write, STS, EC2, the guard's Node read and a webhook. Each must answer 503 with Retry-After
 * and a reason naming the dependency — never a final 403 — be counted and audited; a decision on verified
 * facts stays a 403; and the real `join` gets through an API-server 503 storm.
 */
import assert from 'node:assert/strict';
import type { IncomingHttpHeaders } from 'node:http';
import { request } from 'node:https';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { signAwsStsProof } from '../agent/aws-proof.ts';
import type { SigV4Credentials } from '../cloud/aws/sigv4.ts';
import { cloudCallMetrics } from '../cloud/metrics.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey } from '../pki/keys.ts';
import { nativeApiVersion } from '../protocol/bootstrap-api.ts';
import { createCertificateAuthority, issueClientCertificate } from '../sim/tls.ts';
import {
  type BootstrapHarness,
  type HarnessNode,
  startBootstrapHarness,
} from '../testing/bootstrap-harness.ts';
import { cloudCallsMade } from '../testing/cloud-calls.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { nodeupBody, postNodeup } from '../testing/nodeup.ts';
import { CircuitBreaker } from './circuit-breaker.ts';
import { stsReplayCall } from './policies/sts-client.ts';
import { webhookPolicy } from './policies/webhook.ts';

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

function send(harness: BootstrapHarness, path: string, body: string, authorization: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${harness.url}${path}`,
      {
        method: 'POST',
        ca: harness.caBundlePem,
        agent: false,
        headers: { 'content-type': 'application/json', authorization },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** A native request for `node` with a fresh key, and its proof. */
async function nativeRequest(node: HarnessNode, harness: BootstrapHarness) {
  const subject = { commonName: `system:node:${node.instanceId}`, organizations: ['system:nodes'] };
  const body = JSON.stringify({
    apiVersion: nativeApiVersion,
    nodeName: node.instanceId,
    certificateSigningRequests: { kubelet: buildCsrPem(generateKey('ecdsa-p256'), { subject }) },
  });
  const authorization = await node.proof(Buffer.from(body));
  assert.ok(authorization, `a proof for ${node.instanceId}`);
  return { send: () => send(harness, '/v1/certificates', body, authorization), body, authorization };
}

/** `node` proving itself with other instance profile credentials (another role, a forged key). */
function stsSigned(harness: BootstrapHarness, node: HarnessNode, credentials: SigV4Credentials): HarnessNode {
  return { ...node, proof: async (body) => signAwsStsProof(body, credentials, harness.aws.region, 2) };
}

/** Asserts a 503 with Retry-After whose JSON reason names `dependency`. */
function assertRetry(reply: Reply, dependency: string, what: string): void {
  assert.equal(reply.status, 503, `${what}: ${reply.status} ${reply.text}`);
  const seconds = Number(reply.headers['retry-after']);
  assert.ok(Number.isInteger(seconds) && seconds >= 1 && seconds <= 60, `${what}: Retry-After ${seconds}`);
  const error = (JSON.parse(reply.text) as { error: Record<string, string> }).error;
  assert.equal(error['reason'], 'dependency-unavailable', what);
  assert.equal(error['dependency'], dependency, what);
  assert.match(error['message'] ?? '', /retry in \d+ s/, what);
}

async function dependencyFailures(harness: BootstrapHarness): Promise<Record<string, number>> {
  const metric = await harness.registry
    .getSingleMetric('kops_controller_bootstrap_dependency_failures_total')
    ?.get();
  return Object.fromEntries((metric?.values ?? []).map((v) => [String(v.labels['dependency']), v.value]));
}

describe('a dependency fault is a 503 with Retry-After, never a final 403', () => {
  let harness: BootstrapHarness;
  before(async () => {
    harness = await startBootstrapHarness({ replayGuardTimeoutMs: 500, aws: { stsTimeoutMs: 500 } });
  });
  after(() => harness.close());

  test('the API server answers 503, 429, 500 or nothing in time to the replay-marker write (a GCE identity token); the same request then passes', async () => {
    const configMapCreates = { resource: 'configmaps', verbs: ['create'], namespace: 'kube-system' };
    for (const status of [503, 429, 500] as const) {
      const node = harness.addGceNode();
      const attempt = await nativeRequest(node, harness);
      harness.api.faults.errors({ ...configMapCreates, count: 1, status });
      assertRetry(await attempt.send(), 'kubernetes-api', `HTTP ${status}`);
      const retried = await attempt.send();
      assert.equal(retried.status, 200, `after HTTP ${status}: ${retried.text}`);
    }
    const node = harness.addGceNode();
    const attempt = await nativeRequest(node, harness);
    harness.api.faults.latency(2_000, configMapCreates);
    try {
      assertRetry(await attempt.send(), 'kubernetes-api', 'no answer in time');
    } finally {
      harness.api.faults.reset();
    }
    assert.equal((await attempt.send()).status, 200, 'after the slow write');
  });

  test('attack: a marker write committed though answered 503 — the node’s retry is issued, the proof on other keys is not', async () => {
    const node = harness.addGceNode();
    const attempt = await nativeRequest(node, harness);
    harness.api.faults.errors({
      resource: 'configmaps',
      verbs: ['create'],
      // The replay markers' namespace: the harness keeps its expiry ledger elsewhere.
      namespace: 'kube-system',
      count: 1,
      status: 503,
      afterCommit: true,
    });
    assertRetry(await attempt.send(), 'kubernetes-api', 'committed, answered 503');
    const retried = await attempt.send();
    assert.equal(retried.status, 200, retried.text);
    // The same identity token presented with another body (other keys) is refused: it was spent on the
    // first (an identity token does not cover the body; the marker is what refuses it).
    const other = await nativeRequest(node, harness);
    const moved = await send(harness, '/v1/certificates', other.body, attempt.authorization);
    assert.equal(moved.status, 403, moved.text);
    assert.match(moved.text, /already used/);
  });

  test('STS dropping the connection, slow, throttled or failing: 503 naming sts', async () => {
    const node = harness.addNode();
    for (const [what, fault] of [
      ['dropped', { drop: true }],
      ['slow', { latencyMs: 1_500 }],
      ['throttled', { error: { code: 'Throttling', status: 400 } }],
      ['5xx', { error: { code: 'InternalFailure', status: 500 } }],
    ] as const) {
      // Twice: a connection dropped while pooled is retried once on a new one, as it should be.
      harness.aws.faults.add({ service: 'sts', count: 2, ...fault });
      try {
        assertRetry(await (await nativeRequest(node, harness)).send(), 'sts', what);
      } finally {
        harness.aws.faults.reset();
      }
    }
    assert.equal((await (await nativeRequest(node, harness)).send()).status, 200);
  });

  test('STS unreachable: 503 naming sts', async () => {
    const unreachable = await startBootstrapHarness({ aws: { stsEndpoint: 'http://127.0.0.1:1' } });
    try {
      assertRetry(
        await (await nativeRequest(unreachable.addNode(), unreachable)).send(),
        'sts',
        'unreachable',
      );
    } finally {
      await unreachable.close();
    }
  });

  test('EC2 throttled beyond the SDK retries: 503 naming ec2; the same request then passes', async () => {
    const node = harness.addNode();
    const attempt = await nativeRequest(node, harness);
    harness.aws.faults.add({
      service: 'ec2',
      count: 4,
      error: { code: 'RequestLimitExceeded', status: 503 },
    });
    assertRetry(await attempt.send(), 'ec2', 'throttled');
    harness.aws.faults.reset();
    assert.equal((await attempt.send()).status, 200);
  });

  test('the impersonation guard cannot read the Node: 503 naming kubernetes-api', {
    timeout: 30_000,
  }, async () => {
    const node = harness.addNode();
    // A Node the guard's watch knows (registered, not Ready yet) is read from the API server.
    harness.api.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: node.instanceId },
      status: { conditions: [] },
    });
    await waitFor(() => harness.bootstrap.guardPresence?.(node.instanceId).known === true);
    harness.api.faults.errors({ resource: 'nodes', verbs: ['get'], count: 1, status: 503 });
    assertRetry(await (await nativeRequest(node, harness)).send(), 'kubernetes-api', 'Node read');
    assert.equal((await (await nativeRequest(node, harness)).send()).status, 200);
  });

  test('a decision on verified facts is still a final 403: a role not allowed, a forged signature', async () => {
    const node = harness.addNode();
    const wrongRole = stsSigned(
      harness,
      node,
      harness.aws.sts.addInstanceProfileSession('masters.x', node.instanceId),
    );
    const denied = await (await nativeRequest(wrongRole, harness)).send();
    assert.equal(denied.status, 403, denied.text);
    assert.match(denied.text, /"status":"denied".*not one of the node roles/);
    const forged = stsSigned(harness, node, { ...node.credentials, secretAccessKey: 'forged' });
    const refused = await (await nativeRequest(forged, harness)).send();
    assert.equal(refused.status, 403, refused.text);
    assert.match(refused.text, /SignatureDoesNotMatch/);
  });

  test("kops' /bootstrap: a replay-marker write that fails is a 503 with Retry-After, not 403 'failed to verify token'", async () => {
    const node = harness.addGceNode();
    const body = nodeupBody();
    const authorization = await node.proof(Buffer.from(body));
    assert.ok(authorization, `a proof for ${node.instanceId}`);
    harness.api.faults.errors({
      resource: 'configmaps',
      verbs: ['create'],
      namespace: 'kube-system',
      count: 1,
      status: 503,
    });
    const reply = await send(harness, '/bootstrap', body, authorization);
    assert.equal(reply.status, 503, reply.text);
    assert.match(String(reply.headers['retry-after']), /^\d+$/);
    assert.match(reply.text, /Kubernetes API server is unavailable.*retry in \d+ s/);
    const retried = await send(harness, '/bootstrap', body, authorization);
    assert.equal(retried.status, 200, retried.text);
  });

  test('every fault is counted by dependency and audited as an error with what failed underneath', async () => {
    const counted = await dependencyFailures(harness);
    assert.ok((counted['kubernetes-api'] ?? 0) >= 6, JSON.stringify(counted));
    assert.ok((counted['sts'] ?? 0) >= 4, JSON.stringify(counted));
    assert.ok((counted['ec2'] ?? 0) >= 1, JSON.stringify(counted));
    const errors = harness.audit.filter((r) => r.verdict === 'error');
    assert.ok(errors.length >= 11, String(errors.length));
    const sts = errors.find((r) => r.reasons[0]?.startsWith('AWS STS is unavailable'));
    assert.equal(sts?.decidedBy, 'aws');
    assert.ok((sts?.detail?.[0] ?? '').length > 0, 'the cause, for the operator');
    assert.ok(errors.some((r) => r.decidedBy === 'node-guard'));
    const text = await harness.registry.metrics();
    assert.match(text, /kops_controller_bootstrap_requests_total\{policy="aws",verdict="error"\} \d+/);
  });

  test('join gets its certificates after the API server answered 503 to every replay-marker write for a while', async () => {
    const node = harness.addGceNode();
    const before = (await dependencyFailures(harness))['kubernetes-api'] ?? 0;
    const progress: string[] = [];
    harness.api.faults.errors({
      resource: 'configmaps',
      verbs: ['create'],
      namespace: 'kube-system',
      rate: 1,
      status: 503,
    });
    const stormEnds = setTimeout(() => harness.api.faults.reset(), 3_000);
    const result = await harness
      .join(node, {
        timeoutMs: 120_000,
        retry: { initialMs: 200, maxMs: 1_000 },
        progress: (line) => progress.push(line),
      })
      .finally(() => {
        clearTimeout(stormEnds);
        harness.api.faults.reset();
      });
    assert.equal(result.nodeName, node.instanceId);
    const refused = ((await dependencyFailures(harness))['kubernetes-api'] ?? 0) - before;
    assert.ok(refused >= 1, 'the storm answered the join 503 at least once');
    assert.ok(
      progress.some((line) => /retrying/.test(line)),
      progress.join('\n'),
    );
  });
});

describe('STS failing every replay for a while: replays are paused, not sent once per retry', () => {
  test('attack: nodes that ignore Retry-After (nodeup retries every ~10 s) cannot make the server hammer a failing STS; the first answer resumes it', async () => {
    const clock = { now: 0 };
    const log = capturedLogger();
    const circuit = new CircuitBreaker({
      name: 'STS',
      failuresToOpen: 5,
      minFailingMs: 1_000,
      probeIntervalMs: 2_000,
      logger: log.logger,
      now: () => clock.now,
    });
    const calls = new Registry();
    const harness = await startBootstrapHarness({ aws: { circuit, cloudCalls: cloudCallMetrics(calls) } });
    const replays = () => cloudCallsMade(calls, 'aws', stsReplayCall);
    try {
      const nodes = Array.from({ length: 5 }, () => harness.addNode());
      harness.aws.faults.add({ service: 'sts', error: { code: 'InternalFailure', status: 500 } });
      for (const node of nodes) {
        assertRetry(await (await nativeRequest(node, harness)).send(), 'sts', 'failing');
        clock.now += 300;
      }
      assert.equal(await replays(), 5, 'each of the first failures was a replay');
      // Every node retries at once, four times, whatever it was told.
      for (let round = 0; round < 4; round++) {
        const replies = await Promise.all(
          nodes.map(async (node) => (await nativeRequest(node, harness)).send()),
        );
        for (const reply of replies) assertRetry(reply, 'sts', `paused, round ${round}`);
      }
      assert.equal(await replays(), 5, 'no replay reached STS while it was paused');
      const paused = await harness.registry
        .getSingleMetric('kops_controller_bootstrap_dependency_paused_total')
        ?.get();
      assert.equal(paused?.values.find((v) => v.labels['dependency'] === 'sts')?.value, 20);
      const failures = await dependencyFailures(harness);
      assert.equal(failures['sts'], 25, 'a paused request is still a fault, counted as one');
      harness.aws.faults.reset();
      clock.now += 2_000;
      const [first, ...rest] = nodes;
      const probe = await (await nativeRequest(first as HarnessNode, harness)).send();
      assert.equal(probe.status, 200, `the probe after the interval: ${probe.text}`);
      for (const node of rest) assert.equal((await (await nativeRequest(node, harness)).send()).status, 200);
      assert.equal(await replays(), 5 + nodes.length);
      assert.deepEqual(
        log.lines.map((line) => (JSON.parse(line) as { msg: string }).msg),
        [
          'dependency failed every call: calls to it paused, one tried at each interval until it answers',
          'dependency answers again: calls to it resumed',
        ],
      );
    } finally {
      await harness.close();
    }
  });
});

describe('STS throttling replays: an answer, not a failure', () => {
  test("attack: proofs signed with the attacker's own throttled account cannot pause STS for everyone", async () => {
    const clock = { now: 0 };
    const circuit = new CircuitBreaker({
      name: 'STS',
      failuresToOpen: 5,
      minFailingMs: 1_000,
      now: () => clock.now,
    });
    const harness = await startBootstrapHarness({ aws: { circuit } });
    try {
      const node = harness.addNode();
      // STS throttles per account, the signer's: here every replay, as a flood from one account sees.
      harness.aws.faults.add({ service: 'sts', error: { code: 'Throttling', status: 400 } });
      for (let i = 0; i < 20; i++) {
        assertRetry(await (await nativeRequest(node, harness)).send(), 'sts', 'throttled');
        clock.now += 300;
      }
      assert.equal(circuit.state, 'closed', 'STS answered every replay: it is up');
      harness.aws.faults.reset();
      assert.equal((await (await nativeRequest(node, harness)).send()).status, 200);
    } finally {
      await harness.close();
    }
  });
});

describe('the API server failing every read of the impersonation guard: requests are turned away before they cost STS', () => {
  test('attack: in an API-server outage, nodes that ignore Retry-After cannot make every attempt replay its proof to STS and then fail at the guard', async () => {
    const calls = new Registry();
    // Each attempt looks its instance up again: a budget that does not pace them keeps the test short.
    const harness = await startBootstrapHarness({
      aws: { cloudCalls: cloudCallMetrics(calls) },
      ec2CallBudget: { burst: 1_000, perSecond: 1_000 },
    });
    const replays = () => cloudCallsMade(calls, 'aws', stsReplayCall);
    try {
      // The whole API server fails, and the Node watch is cut, so the guard must read each Node.
      harness.api.faults.errors({ rate: 1, status: 503 });
      harness.api.faults.dropWatches({ resource: 'nodes' });
      // The guard's circuit opens after 20 failed reads over at least 5 s (the product's defaults). One
      // node retries every 200 ms, each attempt a new request with a fresh proof, until an attempt
      // costs no replay.
      const node = harness.addNode();
      const started = performance.now();
      let attempts = 0;
      let replayed = 0;
      let spared = false;
      while (!spared && attempts < 100) {
        assertRetry(await (await nativeRequest(node, harness)).send(), 'kubernetes-api', 'outage');
        attempts++;
        spared = (await replays()) === replayed;
        if (!spared) replayed++;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      assert.ok(spared, `every one of ${attempts} attempts cost a replay`);
      assert.ok(replayed >= 20, `at least 20 attempts before it opened each cost a replay (${replayed})`);
      assert.ok(performance.now() - started >= 5_000, 'not before the failures had lasted 5 s');
      for (let i = 0; i < 10; i++) {
        assertRetry(await (await nativeRequest(node, harness)).send(), 'kubernetes-api', `native ${i}`);
        const body = nodeupBody();
        const kops = await postNodeup(
          harness.url,
          body,
          (await node.proof(Buffer.from(body))) ?? '',
          harness.caBundlePem,
        );
        assert.equal(kops.status, 503, kops.text);
      }
      const before = replayed;
      assert.equal(await replays(), before, 'no replay while the guard cannot read Nodes');
      const paused = await harness.registry
        .getSingleMetric('kops_controller_bootstrap_dependency_paused_total')
        ?.get();
      assert.equal(paused?.values.find((v) => v.labels['dependency'] === 'kubernetes-api')?.value, 21);
      const audited = harness.audit.filter((r) => r.verdict === 'error' && r.decidedBy === 'node-guard');
      assert.equal(audited.length, attempts + 20, 'each request turned away is audited, naming the guard');
      // The API server answers again: the next probe (within 2 s) closes the circuit and the node joins.
      harness.api.faults.reset();
      const recovered = performance.now();
      let status = 0;
      while (status !== 200 && performance.now() - recovered < 10_000) {
        status = (await (await nativeRequest(node, harness)).send()).status;
        if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 200));
      }
      assert.equal(status, 200, 'joined once the API server answers');
    } finally {
      await harness.close();
    }
  });
});

/** Polls `condition` every 20 ms until it holds (the test's own timeout bounds it). */
async function waitFor(condition: () => boolean | Promise<boolean>): Promise<void> {
  while (!(await condition())) await new Promise((resolve) => setTimeout(resolve, 20));
}

describe('a webhook that cannot be reached is a 503, not a denial', () => {
  test('webhook unreachable: 503 naming webhook; no certificate', async () => {
    const ca = await createCertificateAuthority('webhook-ca');
    const client = await issueClientCertificate(ca, { name: 'kops-controller', groups: [] });
    const harness = await startBootstrapHarness({
      policies: (aws) => [
        webhookPolicy({
          url: 'https://127.0.0.1:1/review',
          ca: ca.certificate,
          cert: client.certificate,
          key: client.privateKey,
          verifiedBy: aws,
        }),
      ],
    });
    try {
      const node = harness.addNode();
      assertRetry(await (await nativeRequest(node, harness)).send(), 'webhook', 'unreachable');
      assert.equal(
        harness.audit.filter((r) => r.issued).length,
        0,
        'fail closed: nothing issued while the webhook is down',
      );
    } finally {
      await harness.close();
    }
  });
});
