/**
 * The bootstrap server end to end: real TLS on loopback, the simulated API server for Nodes and the
 * CSR API, the real kubectl for approvals, curl and openssl as independent clients. Policies are
 * small in-test ones, so these tests exercise the server, not a policy.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { IncomingHttpHeaders } from 'node:http';
import { Agent, request } from 'node:https';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { connect } from 'node:tls';
import { promisify } from 'node:util';
import type { KubeConfig } from '@kubernetes/client-node';
import fc from 'fast-check';
import { Registry } from 'prom-client';
import { type RunningBootstrap, startBootstrapServer } from '../cli/bootstrap-server.ts';
import { parseConfig } from '../config/loader.ts';
import { UnavailableError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { assertTlsPolicy, eventually, idleCrowd } from '../net/testing.ts';
import { bundlePem, type CertificateAuthority, createCa } from '../pki/ca.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { saveCa } from '../pki/folder.ts';
import { generateKey, spkiOf } from '../pki/keys.ts';
import { keysetPath } from '../pki/keyset.ts';
import { encodePem } from '../pki/pem.ts';
import { nativeApiVersion } from '../protocol/bootstrap-api.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { openVfs } from '../statestore/open.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { nodeupBody } from '../testing/nodeup.ts';
import { opensslVerify, scratchFile } from '../testing/openssl.ts';
import { toolPath } from '../testing/tools.ts';
import { auditSink } from './audit.ts';
import { DependencyOutages, dependencyFault } from './dependency.ts';
import { bootstrapSignerName, queuedCsrName } from './queue.ts';
import { serveBootstrap, servingCertificate } from './server.ts';
import type { AuditRecord, BootstrapPolicy, NodeFacts } from './types.ts';

const run = promisify(execFile);

const nodeA: NodeFacts = {
  nodeName: 'node-a',
  instanceGroup: 'nodes',
  dnsNames: ['node-a.internal'],
  ipAddresses: ['10.0.0.1'],
  evidence: { token: 'node-a' },
};

/** Approves `Bearer node-a` as node-a, denies `Bearer revoked`, abstains otherwise. */
const tokenPolicy: BootstrapPolicy = {
  name: 'test-token',
  async evaluate(request) {
    if (request.proof.kind !== 'bootstrap-token') return { verdict: 'abstain', reasons: ['no token'] };
    if (request.proof.token === 'node-a') return { verdict: 'approve', facts: nodeA, reasons: ['token ok'] };
    return { verdict: 'deny', reasons: ['the token was revoked', 'ask an admin for a new one'] };
  },
};

/** Queues everything it sees, with only the claimed name (like the seed's `queue`). */
const queueEverything: BootstrapPolicy = {
  name: 'test-queue',
  async evaluate(request) {
    return { verdict: 'queue', reasons: [`${request.claimedNodeName} is claimed, not verified`] };
  },
};

const config = parseConfig({ clusterName: 'c.example.com', cloud: 'metal', server: {} });

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: () => Record<string, unknown>;
}

function kubeletCsr(key: KeyObject, name: string): string {
  return buildCsrPem(key, {
    subject: { commonName: `system:node:${name}`, organizations: ['system:nodes'] },
  });
}

/** Registers a Ready Node straight into the simulated API server's store. */
function createReadyNode(sim: SimApiServer, name: string): void {
  sim.store.create({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name },
    status: { conditions: [{ type: 'Ready', status: 'True' }] },
  });
}

function body(csrs: Record<string, string>, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ apiVersion: nativeApiVersion, certificateSigningRequests: csrs, ...extra });
}

describe('bootstrap server', () => {
  let sim: SimApiServer;
  let ca: CertificateAuthority;
  let boot: RunningBootstrap;
  let signerStop: AbortController;
  let signerDone: Promise<void>;
  let dir: string;
  let kubeconfigPath: string;
  const audit: AuditRecord[] = [];
  const registry = new Registry();
  const agent = new Agent({ keepAlive: true, maxSockets: 8 });

  async function start(): Promise<void> {
    boot = await startBootstrapServer(config, {
      kubeConfig: sim.kubeConfig(),
      policies: [tokenPolicy, queueEverything],
      ca,
      listen: '127.0.0.1:0',
      apiServer: 'https://api.internal.c.example.com',
      serverNames: { ipAddresses: ['127.0.0.1'] },
      audit: (record) => audit.push(record),
      rateLimit: { burst: 100_000, ratePerSecond: 100_000 },
      registry,
    });
    signerStop = new AbortController();
    signerDone = boot.signer.start(signerStop.signal);
    while (!boot.queue.hasSynced()) await new Promise((resolve) => setTimeout(resolve, 10));
  }

  async function stop(): Promise<void> {
    signerStop.abort();
    await signerDone;
    await boot.close();
  }

  function call(
    method: string,
    path: string,
    options: { body?: string | Buffer; headers?: Record<string, string> } = {},
  ): Promise<Reply> {
    return new Promise((resolve, reject) => {
      const req = request(
        `${boot.server.url}${path}`,
        {
          method,
          agent,
          ca: bundlePem(ca),
          headers: {
            // Framed by its length whatever the method: Node's client sends a GET's or a DELETE's
            // body with neither a length nor chunking, and on a kept-alive connection those bytes
            // would become the start of this client's next request.
            ...(options.body === undefined
              ? {}
              : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(options.body) }),
            ...options.headers,
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              text,
              json: () => JSON.parse(text),
            });
          });
        },
      );
      req.on('error', reject);
      req.end(options.body);
    });
  }

  const post = (payload: string, authorization?: string) =>
    call('POST', '/v1/certificates', {
      body: payload,
      headers: authorization ? { authorization } : {},
    });

  const kubectl = async (...args: string[]) =>
    (await run(toolPath('kubectl'), ['--kubeconfig', kubeconfigPath, ...args], { timeout: 30_000 })).stdout;

  /** Waits (bounded) until `condition` holds, e.g. until the guard's Node watch has delivered a change. */
  async function until(condition: () => boolean | undefined, timeoutMs = 5_000): Promise<void> {
    for (let i = 0; i < timeoutMs / 10 && !condition(); i++)
      await new Promise((resolve) => setTimeout(resolve, 10));
    assert.ok(condition(), 'condition never became true');
  }

  before(async () => {
    // The API server's one-minute bookmarks: the guard's Node watch is current once it is accepted.
    sim = await startApiServer();
    ca = createCa();
    dir = await mkdtemp(join(tmpdir(), 'bootstrap-server-'));
    kubeconfigPath = join(dir, 'kubeconfig');
    await writeFile(kubeconfigPath, sim.kubeconfig(), { mode: 0o600 });
    await start();
  });
  after(async () => {
    agent.destroy();
    await stop();
    await sim.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('issues the verified identity: certificates openssl accepts, the CA bundle and the API server', async () => {
    const kubeletKey = generateKey();
    const servingKey = generateKey();
    const reply = await post(
      body({
        kubelet: kubeletCsr(kubeletKey, 'node-a'),
        'kubelet-server': buildCsrPem(servingKey, {
          subject: { commonName: 'system:node:node-a', organizations: ['system:nodes'] },
          ipAddresses: ['10.0.0.1'],
        }),
      }),
      'Bearer node-a',
    );
    assert.equal(reply.status, 200, reply.text);
    const answer = reply.json() as {
      status: string;
      nodeName: string;
      instanceGroup: string;
      certificates: Record<string, string>;
      caBundle: string;
      apiServer: string;
    };
    assert.equal(answer.status, 'issued');
    assert.equal(answer.nodeName, 'node-a');
    assert.equal(answer.instanceGroup, 'nodes');
    assert.equal(answer.caBundle, bundlePem(ca));
    assert.equal(answer.apiServer, 'https://api.internal.c.example.com');
    assert.match(
      opensslVerify(answer.caBundle, answer.certificates['kubelet'] as string, 'sslclient'),
      /: OK$/,
    );
    assert.match(
      opensslVerify(answer.caBundle, answer.certificates['kubelet-server'] as string, 'sslserver'),
      /: OK$/,
    );
    const record = audit.at(-1) as AuditRecord;
    assert.equal(record.verdict, 'approve');
    assert.equal(record.decidedBy, 'test-token');
    assert.equal(record.nodeName, 'node-a');
    assert.deepEqual(Object.keys(record.issued ?? {}).sort(), ['kubelet', 'kubelet-server']);
    const metrics = await registry.metrics();
    assert.match(
      metrics,
      /kops_controller_bootstrap_requests_total\{policy="test-token",verdict="approve"\} 1/,
    );
    assert.match(metrics, /kops_controller_bootstrap_issue_seconds_count 1/);
  });

  test("CSR asking for another node's CN or foreign SANs", async () => {
    const before = audit.length;
    const otherCn = await post(body({ kubelet: kubeletCsr(generateKey(), 'node-b') }), 'Bearer node-a');
    assert.equal(otherCn.status, 403, otherCn.text);
    assert.equal(otherCn.json()['status'], 'denied');
    assert.match(String((otherCn.json()['reasons'] as string[])[0]), /system:node:node-b.*not allowed/);

    const foreignSan = await post(
      body({
        kubelet: kubeletCsr(generateKey(), 'node-a'),
        'kubelet-server': buildCsrPem(generateKey(), {
          subject: { commonName: 'node-a', organizations: [] },
          ipAddresses: ['10.0.0.1', '10.9.9.9'],
          // Not one of the API server's names: those are refused before any policy (reserved-name).
          dnsNames: ['node-b.internal'],
        }),
      }),
      'Bearer node-a',
    );
    assert.equal(foreignSan.status, 403, foreignSan.text);
    assert.match(String((foreignSan.json()['reasons'] as string[])[0]), /not verified for it: .*10\.9\.9\.9/);
    const records = audit.slice(before);
    assert.deepEqual(
      records.map((r) => [r.verdict, r.decidedBy, r.issued]),
      [
        ['deny', 'profile-check', undefined],
        ['deny', 'profile-check', undefined],
      ],
    );
  });

  test('the guard answers "not registered" from its current Node watch, without reading the Node', async () => {
    await until(() => boot.guardPresence?.('node-a').current);
    const reads = async (source: string) =>
      Number(
        new RegExp(`kops_controller_bootstrap_node_guard_reads_total\\{source="${source}"\\} (\\d+)`).exec(
          await registry.metrics(),
        )?.[1] ?? 0,
      );
    const [watchBefore, apiBefore] = [await reads('watch'), await reads('api')];
    const reply = await post(body({ kubelet: kubeletCsr(generateKey(), 'node-a') }), 'Bearer node-a');
    assert.equal(reply.status, 200, reply.text);
    assert.equal(await reads('watch'), watchBefore + 1);
    assert.equal(await reads('api'), apiBefore);
  });

  test('while the Node watch is down, the guard reads every Node: one made Ready meanwhile is still refused', async () => {
    await until(() => boot.guardPresence?.('node-a').current);
    // The watch drops and cannot come back: every list and watch of Nodes fails until reset.
    sim.faults.errors({ resource: 'nodes', verbs: ['list', 'watch'], status: 500, count: 1_000_000 });
    sim.faults.dropWatches({ resource: 'nodes' });
    await until(() => boot.guardPresence?.('node-a').current === false);
    createReadyNode(sim, 'node-a');
    try {
      assert.equal(boot.guardPresence?.('node-a').known, false, 'the watch never saw the Node');
      const reply = await post(body({ kubelet: kubeletCsr(generateKey(), 'node-a') }), 'Bearer node-a');
      assert.equal(reply.status, 409, reply.text);
      assert.equal((reply.json()['error'] as { reason: string }).reason, 'node-already-registered');
    } finally {
      sim.faults.reset();
      sim.store.delete('nodes', undefined, 'node-a');
    }
    // Once the watch is back and current (after the informer's backoff), the guard answers from it again.
    await until(() => boot.guardPresence?.('node-a').current, 40_000);
  });

  test('node name already Ready', async () => {
    createReadyNode(sim, 'node-a');
    try {
      // The watch knowing the Node sends the guard to the API server, whose answer is the 409.
      await until(() => boot.guardPresence?.('node-a').known);
      const reply = await post(body({ kubelet: kubeletCsr(generateKey(), 'node-a') }), 'Bearer node-a');
      assert.equal(reply.status, 409, reply.text);
      assert.equal((reply.json()['error'] as { reason: string }).reason, 'node-already-registered');
      assert.equal(audit.at(-1)?.decidedBy, 'node-guard');
    } finally {
      sim.store.delete('nodes', undefined, 'node-a');
    }
  });

  test('weak key', async () => {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 1024 });
    const reply = await post(body({ kubelet: kubeletCsr(privateKey, 'node-a') }), 'Bearer node-a');
    assert.equal(reply.status, 400, reply.text);
    const error = reply.json()['error'] as { reason: string; message: string };
    assert.equal(error.reason, 'key');
    assert.match(error.message, /RSA key of 1024 bits is too weak/);
  });

  test('oversized and malformed bodies', async () => {
    const oversized = await post(JSON.stringify({ pad: 'x'.repeat(70 * 1024) }), 'Bearer node-a');
    assert.equal(oversized.status, 413);
    assert.equal((oversized.json()['error'] as { reason: string }).reason, 'too-large');
    const chunked = await new Promise<number>((resolve, reject) => {
      // No Content-Length: the limit must hold while the body streams in.
      const req = request(`${boot.server.url}/v1/certificates`, {
        method: 'POST',
        agent: false,
        ca: bundlePem(ca),
        headers: { 'content-type': 'application/json' },
      });
      req.on('response', (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      for (let i = 0; i < 80; i++) req.write('x'.repeat(1024));
      req.end();
    });
    assert.equal(chunked, 413);
    const cases: [string, number, string][] = [
      ['{not json', 400, 'invalid-request'],
      ['[]', 400, 'invalid-request'],
      [body({ kubelet: 'garbage' }), 400, 'malformed'],
      [body({}), 400, 'invalid-request'],
      [body({ kubelet: kubeletCsr(generateKey(), 'node-a') }, { extra: 1 }), 400, 'invalid-request'],
      [body({ 'kube-apiserver': 'x' }), 400, 'invalid-request'],
      [body({ kubelet: kubeletCsr(generateKey(), 'Bad_Name') }), 400, 'invalid'],
    ];
    for (const [payload, status, reason] of cases) {
      const reply = await post(payload, 'Bearer node-a');
      assert.equal(reply.status, status, payload.slice(0, 40));
      assert.equal((reply.json()['error'] as { reason: string }).reason, reason, payload.slice(0, 40));
    }
    const wrongType = await call('POST', '/v1/certificates', {
      body: 'a=b',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    assert.equal(wrongType.status, 415);
    const wrongMethod = await call('GET', '/v1/certificates');
    assert.equal(wrongMethod.status, 405);
    assert.equal(wrongMethod.headers['allow'], 'POST');
    const badScheme = await post(body({ kubelet: kubeletCsr(generateKey(), 'node-a') }), 'Basic dTpw');
    assert.equal(badScheme.status, 400);
    assert.equal((await call('GET', '/nope')).status, 404);
    assert.equal((await call('GET', '/v1/requests/%E0%A4%A?wait=x')).status, 400);
    assert.equal((await call('GET', '/v1/requests/kops-bootstrap-%zz')).status, 400);
    assert.equal((await call('GET', `/v1/requests/kops-bootstrap-${'0'.repeat(40)}`)).status, 404);
  });

  test('a denying policy answers 403 with every reason', async () => {
    const reply = await post(body({ kubelet: kubeletCsr(generateKey(), 'node-a') }), 'Bearer revoked');
    assert.equal(reply.status, 403);
    assert.deepEqual(reply.json(), {
      status: 'denied',
      reasons: ['the token was revoked', 'ask an admin for a new one'],
    });
  });

  test('queued: pending, a retry reuses the request, kubectl certificate approve, the poll returns the certificate', async () => {
    const key = generateKey();
    const csr = kubeletCsr(key, 'node-q');
    const first = await post(body({ kubelet: csr }));
    assert.equal(first.status, 202, first.text);
    const pending = first.json() as { status: string; requestId: string; poll: string; reasons: string[] };
    assert.equal(pending.status, 'pending');
    assert.equal(pending.requestId, queuedCsrName(spkiOf(key), 'node-q'));
    // The reasons the audit trail has (docs/join.md's waiting line): the policy's, and the CSR's name.
    const reasons = ['node-q is claimed, not verified', `queued as ${pending.requestId}`];
    assert.deepEqual(pending.reasons, reasons);
    assert.deepEqual(audit.findLast((r) => r.verdict === 'queue')?.reasons, reasons);
    const retry = await post(body({ kubelet: kubeletCsr(key, 'node-q') }));
    assert.equal(retry.status, 202);
    assert.equal(retry.json()['requestId'], pending.requestId);

    const stored = sim.store.get('certificatesigningrequests', undefined, pending.requestId);
    assert.equal((stored?.['spec'] as { signerName?: string } | undefined)?.signerName, bootstrapSignerName);
    assert.equal(stored?.metadata.annotations?.['bootstrap.kops.k8s.io/claimed-node-name'], 'node-q');
    assert.equal(stored?.metadata.annotations?.['bootstrap.kops.k8s.io/remote-address'], '127.0.0.1');

    const depth = boot.queue.pendingCount();
    assert.ok(depth >= 1, 'the queued request counts as pending');
    const still = await call('GET', `${pending.poll}?wait=0`);
    assert.equal(still.status, 202);
    assert.deepEqual(still.json()['reasons'], reasons, 'the poll answers the same reasons');
    const polled = call('GET', `${pending.poll}?wait=30`);
    assert.match(await kubectl('certificate', 'approve', pending.requestId), /approved/);
    const issued = await polled;
    assert.equal(issued.status, 200, issued.text);
    const certificate = (issued.json()['certificates'] as Record<string, string>)['kubelet'] as string;
    assert.match(opensslVerify(bundlePem(ca), certificate, 'sslclient'), /: OK$/);
    assert.equal(boot.queue.pendingCount(), depth - 1);
    const again = await call('GET', pending.poll);
    assert.equal(again.status, 200);
    assert.equal(audit.at(-1)?.decidedBy, 'queue');
    assert.equal(audit.at(-1)?.verdict, 'approve');
    // kubectl's condition says how it was approved (a CSR never says by whom).
    assert.match(String(audit.at(-1)?.reasons[0]), /^approved by an admin \(KubectlApprove: /);
  });

  test('queued then denied with kubectl: the poll answers 403 with the reason', async () => {
    const first = await post(body({ kubelet: kubeletCsr(generateKey(), 'node-d') }));
    const { requestId, poll } = first.json() as { requestId: string; poll: string };
    await kubectl('certificate', 'deny', requestId);
    const reply = await call('GET', `${poll}?wait=30`);
    assert.equal(reply.status, 403, reply.text);
    assert.equal(reply.json()['status'], 'denied');
    assert.match(String((reply.json()['reasons'] as string[])[0]), /^denied: /);
    // The signer writes the admin's denial to the audit trail as it sees it happen.
    const denial = () => audit.find((r) => r.decidedBy === 'admin' && r.claimedNodeName === 'node-d');
    await until(() => denial() !== undefined);
    assert.equal(denial()?.verdict, 'deny');
    assert.match(String(denial()?.reasons[0]), /^denied by an admin: KubectlDeny/);
  });

  test('the signer refuses an approved request whose node became Ready meanwhile', async () => {
    const first = await post(body({ kubelet: kubeletCsr(generateKey(), 'node-late') }));
    const { requestId, poll } = first.json() as { requestId: string; poll: string };
    createReadyNode(sim, 'node-late');
    await until(() => boot.guardPresence?.('node-late').known);
    await kubectl('certificate', 'approve', requestId);
    const reply = await call('GET', `${poll}?wait=30`);
    assert.equal(reply.status, 403, reply.text);
    const reasons = reply.json()['reasons'] as string[];
    assert.equal(reasons[0], 'signing failed: SignerValidationFailure');
    assert.match(reasons[1] as string, /node node-late is already registered and Ready/);
  });

  test('deterministic-name CSR pre-created with another key', async () => {
    const victimKey = generateKey();
    const name = queuedCsrName(spkiOf(victimKey), 'node-v');
    // An attacker who knows the victim's public key takes the name first, with its own key.
    sim.store.create(
      {
        apiVersion: 'certificates.k8s.io/v1',
        kind: 'CertificateSigningRequest',
        metadata: { name },
        spec: {
          request: Buffer.from(kubeletCsr(generateKey(), 'node-v')).toString('base64'),
          signerName: bootstrapSignerName,
          usages: ['digital signature', 'client auth'],
        },
      },
      { target: 'main', requester: { name: 'system:node:evil', groups: ['system:nodes'] } },
    );
    const reply = await post(body({ kubelet: kubeletCsr(victimKey, 'node-v') }));
    assert.equal(reply.status, 409, reply.text);
    assert.equal((reply.json()['error'] as { reason: string }).reason, 'csr-name-taken');
    assert.equal(audit.at(-1)?.verdict, 'deny');
    assert.match(audit.at(-1)?.reasons[0] ?? '', /holds another public key/);
    // The signer marks the attacker's object Failed as soon as it sees it: it carries no seal.
    const statusOf = () =>
      sim.store.get('certificatesigningrequests', undefined, name)?.['status'] as
        | { conditions?: { type: string; message?: string }[]; certificate?: string }
        | undefined;
    const failed = async () => {
      for (let i = 0; i < 400; i++) {
        const condition = statusOf()?.conditions?.find((c) => c.type === 'Failed');
        if (condition) return condition;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      return assert.fail('the signer never marked the forged request Failed');
    };
    assert.match((await failed()).message ?? '', /seal does not verify/);
    // An admin approving it afterwards does not get it signed either.
    await kubectl('certificate', 'approve', name);
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.ok(statusOf()?.conditions?.some((c) => c.type === 'Approved'));
    assert.equal(statusOf()?.certificate, undefined);
  });

  test('a long-poll whose client hangs up (FIN) is answered at once with the state as it is, not held for its wait', async () => {
    const { poll } = (await post(body({ kubelet: kubeletCsr(generateKey(), 'node-fin') }))).json() as {
      poll: string;
    };
    const before = boot.server.openConnections();
    const started = performance.now();
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect({ port: boot.server.address.port, host: '127.0.0.1', ca: bundlePem(ca) }, () => {
        socket.write(`GET ${poll}?wait=60 HTTP/1.1\r\nHost: bootstrap\r\n\r\n`);
        // The client is done sending and hangs up its side (a killed `join` closes the socket).
        setTimeout(() => socket.end(), 100);
      });
      const chunks: Buffer[] = [];
      socket.on('data', (c: Buffer) => chunks.push(c));
      socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
      socket.on('error', reject);
    });
    assert.ok(performance.now() - started < 5_000, `answered after ${performance.now() - started} ms`);
    assert.match(answer, /^HTTP\/1\.1 202 /);
    assert.equal(await eventually(() => boot.server.openConnections(), before), before);
  });

  test('pending requests survive a restart of the controller', async () => {
    const key = generateKey();
    const first = await post(body({ kubelet: kubeletCsr(key, 'node-r') }));
    const { poll, requestId } = first.json() as { poll: string; requestId: string };
    // A long-poll in progress is answered "still pending" at once when the server shuts down.
    const waiting = call('GET', `${poll}?wait=60`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await stop();
    assert.equal((await waiting).status, 202);
    await start();
    assert.equal((await call('GET', poll)).status, 202);
    await kubectl('certificate', 'approve', requestId);
    const reply = await call('GET', `${poll}?wait=30`);
    assert.equal(reply.status, 200, reply.text);
    assert.equal(reply.json()['nodeName'], 'node-r');
  });

  test('curl reaches the TLS endpoints with the cluster CA', async () => {
    const caFile = scratchFile('ca.pem', bundlePem(ca));
    const curl = (...args: string[]) =>
      run('curl', ['-sS', '--cacert', caFile, '-w', '\\n%{http_code}', ...args], { timeout: 30_000 });
    const healthz = await curl(`${boot.server.url}/healthz`);
    assert.equal(healthz.stdout, 'ok\n\n200');
    const readyz = await curl(`${boot.server.url}/readyz`);
    assert.match(readyz.stdout, /200$/);
    const payloadFile = scratchFile('body.json', body({ kubelet: kubeletCsr(generateKey(), 'node-a') }));
    const issued = await curl(
      '-H',
      'content-type: application/json',
      '-H',
      'authorization: Bearer node-a',
      '--data-binary',
      `@${payloadFile}`,
      `${boot.server.url}/v1/certificates`,
    );
    const [json, status] = issued.stdout.split('\n');
    assert.equal(status, '200');
    assert.equal(JSON.parse(json as string).status, 'issued');
    const tls11 = await run('curl', [
      '-sS',
      '--cacert',
      caFile,
      '--tls-max',
      '1.1',
      `${boot.server.url}/healthz`,
    ]).catch((err: { code: number }) => err);
    assert.notEqual((tls11 as { code?: number }).code ?? 0, 0, 'TLS 1.1 must be refused');
  });

  test('random and mutated requests: no 5xx, no crash, no certificate issued', async () => {
    const issuedBefore = audit.filter((r) => r.issued).length;
    const valid = body({ kubelet: kubeletCsr(generateKey(), 'node-f') });
    const mutate = (text: string, at: number, insert: string, cut: number) =>
      text.slice(0, at % (text.length + 1)) + insert + text.slice((at % (text.length + 1)) + cut);
    const payloads = fc.oneof(
      fc.string({ maxLength: 300 }),
      fc.json(),
      fc
        .tuple(fc.nat(), fc.string({ maxLength: 20 }), fc.nat({ max: 50 }))
        .map(([at, s, cut]) => mutate(valid, at, s, cut)),
      fc
        .record({
          apiVersion: fc.oneof(fc.constant(nativeApiVersion), fc.string()),
          nodeName: fc.oneof(fc.string(), fc.integer(), fc.constant(undefined)),
          certificateSigningRequests: fc.dictionary(
            fc.oneof(fc.constant('kubelet'), fc.constant('kubelet-server'), fc.string()),
            fc.oneof(fc.string(), fc.integer(), fc.constant(null)),
          ),
        })
        .map((r) => JSON.stringify(r)),
    );
    const authorizations = fc.oneof(
      fc.constant(undefined),
      fc.constant('Bearer revoked'),
      fc.string({ maxLength: 40 }).map((s) => `x-aws-sts ${s}`),
      fc.string({ maxLength: 40 }).filter((s) => /^[\x21-\x7e ]*$/.test(s)),
    );
    const waits = fc.constantFrom('0', '0.01', '', '-1', 'x', 'NaN', 'Infinity', '1e400', '0x10');
    const paths = fc.oneof(
      fc.constant('/v1/certificates'),
      fc.constant('/bootstrap'),
      fc.constantFrom(
        '/',
        '/healthz',
        '/readyz',
        '/cluster-info',
        '/v1',
        '/v1/requests/',
        '//v1/certificates',
      ),
      // Well-formed handles of requests that do not exist, with every kind of wait.
      fc
        .tuple(fc.stringMatching(/^[0-9a-f]{40}$/), waits)
        .map(([hex, wait]) => `/v1/requests/kops-bootstrap-${hex}?wait=${wait}`),
      fc.string({ maxLength: 30 }).map((s) => `/v1/requests/${encodeURIComponent(s)}?wait=0`),
      // Raw paths: stray and broken percent escapes, dots, query noise.
      fc
        .string({ maxLength: 40 })
        .map((s) => `/v1/requests/${s.replace(/[^\x21-\x7e]/g, '%').replace(/[#?]/g, '%')}?wait=0&wait=x`),
    );
    const methods = fc.constantFrom('POST', 'POST', 'GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS');
    await fc.assert(
      fc.asyncProperty(
        methods,
        payloads,
        authorizations,
        paths,
        async (method, payload, authorization, path) => {
          const reply = await call(method, path, {
            body: payload,
            headers: authorization ? { authorization } : {},
          });
          assert.ok(
            reply.status < 500,
            `${reply.status} ${reply.text} for ${method} ${path} ${payload.slice(0, 80)}`,
          );
        },
      ),
      { numRuns: 5000 },
    );
    assert.equal((await call('GET', '/healthz')).status, 200);
    assert.equal(audit.filter((r) => r.issued).length, issuedBefore);
  });
});

/** A server of its own, with no policies, for the tests of its limits; `extra` overrides its deps. */
async function standaloneServer(
  kubeConfig: KubeConfig,
  extra: Partial<Parameters<typeof startBootstrapServer>[1]> = {},
): Promise<{ boot: RunningBootstrap; ca: CertificateAuthority }> {
  const ca = createCa();
  const boot = await startBootstrapServer(config, {
    kubeConfig,
    policies: [],
    ca,
    listen: '127.0.0.1:0',
    serverNames: { ipAddresses: ['127.0.0.1'] },
    registry: new Registry(),
    ...extra,
  });
  return { boot, ca };
}

/** GETs `path` from a standalone server: status, headers and body. */
function getFrom(
  { boot, ca }: { boot: RunningBootstrap; ca: CertificateAuthority },
  path: string,
): Promise<{ status: number; headers: IncomingHttpHeaders; text: string }> {
  return new Promise((resolve, reject) => {
    request(`${boot.server.url}${path}`, { ca: bundlePem(ca) }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          text: Buffer.concat(chunks).toString(),
        }),
      );
    })
      .on('error', reject)
      .end();
  });
}

describe('bootstrap server limits on slow clients, and readiness', () => {
  /** Opens a TLS connection, writes `text` and resolves with what the server sent before closing, and when. */
  function slowClient(
    url: string,
    caPem: string,
    text: string,
  ): Promise<{ answer: string; closedAfterMs: number }> {
    const { hostname, port } = new URL(url);
    return new Promise((resolve, reject) => {
      const started = Date.now();
      const chunks: Buffer[] = [];
      const socket = connect({ host: hostname, port: Number(port), ca: caPem }, () => socket.write(text));
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.on('error', reject);
      socket.on('close', () =>
        resolve({ answer: Buffer.concat(chunks).toString('latin1'), closedAfterMs: Date.now() - started }),
      );
    });
  }

  test('a client that never finishes its headers, or its body, is answered 408 and cut off in time', async () => {
    const sim = await startApiServer();
    const { boot, ca } = await standaloneServer(sim.kubeConfig(), {
      connectionLimits: { headersTimeout: 300, requestTimeout: 600, connectionsCheckingInterval: 50 },
    });
    try {
      const json = 'Host: x\r\nContent-Type: application/json\r\n';
      const cases = [
        { what: 'headers never finished', text: `POST /v1/certificates HTTP/1.1\r\n${json}`, status: 408 },
        {
          what: 'body never finished',
          text: `POST /v1/certificates HTTP/1.1\r\n${json}Content-Length: 100\r\n\r\n{"api`,
          status: 408,
        },
        {
          what: 'headers over 16 KiB',
          text: `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
          status: 431,
        },
        { what: 'not HTTP', text: 'NOT HTTP AT ALL\r\n\r\n', status: 400 },
      ];
      for (const { what, text, status } of cases) {
        const { answer, closedAfterMs } = await slowClient(boot.server.url, bundlePem(ca), text);
        assert.match(answer, new RegExp(`^HTTP/1\\.1 ${status} `), what);
        assert.ok(closedAfterMs < 3_000, `${what}: closed after ${closedAfterMs} ms`);
      }
    } finally {
      await boot.close();
      await sim.close();
    }
  });

  test('/readyz answers 503 with the reason until the CSR queue has listed; /healthz answers 200', async () => {
    // An API server that is gone: the queue can never list.
    const sim = await startApiServer();
    const kubeConfig = sim.kubeConfig();
    await sim.close();
    const server = await standaloneServer(kubeConfig);
    try {
      const readyz = await getFrom(server, '/readyz');
      assert.equal(readyz.status, 503);
      assert.match(readyz.text, /not ready: the CSR queue has not listed yet/);
      assert.equal((await getFrom(server, '/healthz')).status, 200);
    } finally {
      await server.boot.close();
    }
  });
});

describe('bootstrap server rate limit', () => {
  test('a source over its burst gets 429 with Retry-After; health checks are not limited', async () => {
    const sim = await startApiServer();
    const server = await standaloneServer(sim.kubeConfig(), { rateLimit: { burst: 2, ratePerSecond: 0.01 } });
    const { boot } = server;
    try {
      const get = (path: string) => getFrom(server, path);
      assert.equal((await get('/nope')).status, 404);
      assert.equal((await get('/nope')).status, 404);
      const limited = await get('/nope');
      assert.equal(limited.status, 429);
      assert.equal(limited.headers['retry-after'], '100');
      assert.equal((await get('/healthz')).status, 200);
    } finally {
      await boot.close();
      await sim.close();
    }
  });
});

/** Requests `path` from a standalone server over a connection from `localAddress` (or an `agent`'s). */
function requestFrom(
  { boot, ca }: { boot: RunningBootstrap; ca: CertificateAuthority },
  path: string,
  from: { localAddress?: string; agent?: Agent; method?: string; body?: string },
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${boot.server.url}${path}`,
      {
        ca: bundlePem(ca),
        method: from.method ?? 'GET',
        ...(from.agent ? { agent: from.agent } : { agent: false, localAddress: from.localAddress }),
        headers: from.body === undefined ? {} : { 'content-type': 'application/json' },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }),
        );
      },
    );
    req.on('error', reject);
    req.end(from.body);
  });
}

/** `count` loopback source addresses other than the server's own 127.0.0.1, from 127.0.1.1 on. */
const loopbackSources = (count: number) => Array.from({ length: count }, (_, i) => `127.0.1.${i + 1}`);

describe('bootstrap server connection limits', () => {
  test('idle connections that never send a byte are closed after the idle timeout; the count returns to zero', async () => {
    const sim = await startApiServer();
    const server = await standaloneServer(sim.kubeConfig(), {
      connectionLimits: { keepAliveTimeout: 1_000, maxConnectionsPerSource: 1_000 },
    });
    const crowd = await idleCrowd(server.boot.server.address.port, 3_000, loopbackSources(10));
    try {
      assert.equal(crowd.sockets.filter((s) => s.connected).length, 3_000, 'every connection was accepted');
      await crowd.settled(15_000);
      assert.equal(crowd.open().length, 0, 'every idle connection was closed');
      assert.ok(
        crowd.sockets.every((s) => !s.closedByUs),
        'the server closed them',
      );
      assert.equal(await eventually(() => server.boot.server.openConnections(), 0), 0);
      assert.equal((await getFrom(server, '/healthz')).status, 200);
    } finally {
      await crowd.release();
      await server.boot.close();
      await sim.close();
    }
  });

  test('a source over its cap is refused as it connects; its established connection, other sources and /healthz are served', async () => {
    const sim = await startApiServer();
    const registry = new Registry();
    const server = await standaloneServer(sim.kubeConfig(), {
      registry,
      connectionLimits: { maxConnectionsPerSource: 50, keepAliveTimeout: 60_000 },
    });
    const { port } = server.boot.server.address;
    // The flooding address already holds a kept-alive connection with work on it.
    const established = new Agent({ keepAlive: true, maxSockets: 1, localAddress: '127.0.0.3' });
    assert.equal((await requestFrom(server, '/healthz', { agent: established })).status, 200);
    const crowd = await idleCrowd(port, 2_000, ['127.0.0.3']);
    try {
      assert.equal(await eventually(() => crowd.open().length, 49), 49, 'held up to the cap of 50');
      const refused = crowd.sockets.filter((s) => s.closedAfterMs !== undefined);
      assert.equal(refused.length, 1_951);
      assert.ok(refused.every((s) => !s.closedByUs));
      // Existing work goes on, on the connection the source already had.
      assert.equal((await requestFrom(server, '/healthz', { agent: established })).status, 200);
      // Another source is served in full: health, and a join request decided by the (empty) chain.
      assert.equal((await requestFrom(server, '/healthz', { localAddress: '127.0.0.2' })).status, 200);
      const decided = await requestFrom(server, '/v1/certificates', {
        localAddress: '127.0.0.2',
        method: 'POST',
        body: body({ kubelet: kubeletCsr(generateKey(), 'node-a') }),
      });
      assert.equal(decided.status, 403, decided.text);
      assert.match(
        await registry.metrics(),
        /^kops_controller_connections_refused_total\{server="bootstrap",reason="per-source"\} 1951$/m,
      );
    } finally {
      await crowd.release();
      established.destroy();
    }
    try {
      assert.equal(await eventually(() => server.boot.server.openConnections(), 0), 0);
    } finally {
      await server.boot.close();
      await sim.close();
    }
  });

  test('beyond the overall cap new connections are refused at once; once the crowd is gone, they are served again', async () => {
    const sim = await startApiServer();
    const server = await standaloneServer(sim.kubeConfig(), {
      connectionLimits: { maxConnections: 200, maxConnectionsPerSource: 1_000, keepAliveTimeout: 60_000 },
    });
    const crowd = await idleCrowd(server.boot.server.address.port, 1_000, loopbackSources(10));
    try {
      assert.equal(await eventually(() => crowd.open().length, 200), 200);
      assert.ok(crowd.sockets.every((s) => !s.closedByUs));
      await assert.rejects(requestFrom(server, '/healthz', { localAddress: '127.0.0.2' }));
    } finally {
      await crowd.release();
    }
    try {
      assert.equal(await eventually(() => server.boot.server.openConnections(), 0), 0);
      assert.equal((await requestFrom(server, '/healthz', { localAddress: '127.0.0.2' })).status, 200);
    } finally {
      await server.boot.close();
      await sim.close();
    }
  });
});

describe('bootstrap server TLS', () => {
  test('TLS 1.3 by default; TLS 1.2 only with an AEAD suite; CBC-only clients and renegotiation are refused (openssl s_client)', async () => {
    const sim = await startApiServer();
    const server = await standaloneServer(sim.kubeConfig());
    const { port } = server.boot.server.address;
    const caFile = scratchFile('ca.pem', bundlePem(server.ca));
    try {
      await assertTlsPolicy(port, caFile);
    } finally {
      await server.boot.close();
      await sim.close();
    }
  });
});

describe("bootstrap server with kops' signing CAs from server.caBasePath", () => {
  test('loads every server.signingCAs entry; etcd-client-cilium is signed by its own CA', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'bootstrap-signers-'));
    const sim = await startApiServer();
    const kubernetesCa = createCa();
    const ciliumCa = createCa({ name: 'etcd-clients-ca-cilium' });
    const pki = openVfs(dir);
    await saveCa(pki, kubernetesCa, 'pem');
    await saveCa(pki, ciliumCa, 'keyset');
    const kopsConfig = parseConfig({
      clusterName: 'c.example.com',
      cloud: 'metal',
      server: {
        caBasePath: dir,
        signingCAs: ['kubernetes-ca', 'etcd-clients-ca-cilium'],
        certNames: ['kubelet', 'etcd-client-cilium'],
      },
    });
    const instance: BootstrapPolicy = {
      name: 'test-instance',
      async evaluate() {
        return { verdict: 'approve', facts: nodeA, reasons: ['test'] };
      },
    };
    const deps = {
      kubeConfig: sim.kubeConfig(),
      policies: [instance],
      listen: '127.0.0.1:0',
      serverNames: { ipAddresses: ['127.0.0.1'] },
      registry: new Registry(),
    };
    const boot = await startBootstrapServer(kopsConfig, deps);
    try {
      const rsa = () => generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
      const certs = {
        kubelet: encodePem('RSA PUBLIC KEY', spkiOf(rsa())),
        'etcd-client-cilium': encodePem('RSA PUBLIC KEY', spkiOf(rsa())),
      };
      const reply = await new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = request(
          `${boot.server.url}/bootstrap`,
          { method: 'POST', ca: bundlePem(kubernetesCa), headers: { authorization: 'x-aws-sts any' } },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () =>
              resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }),
            );
          },
        );
        req.on('error', reject);
        req.end(JSON.stringify({ apiVersion: 'bootstrap.kops.k8s.io/v1alpha1', certs }));
      });
      assert.equal(reply.status, 200, reply.text);
      const issued = (JSON.parse(reply.text) as { Certs: Record<string, string> }).Certs;
      assert.match(opensslVerify(bundlePem(kubernetesCa), issued['kubelet'] as string, 'sslclient'), /: OK$/);
      assert.match(
        opensslVerify(bundlePem(ciliumCa), issued['etcd-client-cilium'] as string, 'sslclient'),
        /: OK$/,
      );
    } finally {
      await boot.close();
    }
    // A configured signer that is missing stops the start with a message naming it.
    await rm(join(dir, keysetPath('etcd-clients-ca-cilium')), { force: true });
    await assert.rejects(
      startBootstrapServer(kopsConfig, { ...deps, registry: new Registry() }),
      (err: Error) => /no CA "etcd-clients-ca-cilium"/.test(err.message),
    );
    await sim.close();
    await rm(dir, { recursive: true, force: true });
  });
});

describe('bootstrap server with bootstrap.nodeGuard: api', () => {
  test('has no Node watch and reads the Node on every request: a Ready node is refused at once', async () => {
    const sim = await startApiServer();
    const ca = createCa();
    const always: BootstrapPolicy = {
      name: 'test-always',
      async evaluate() {
        return { verdict: 'approve', facts: nodeA, reasons: ['test'] };
      },
    };
    const boot = await startBootstrapServer(
      parseConfig({
        clusterName: 'c.example.com',
        cloud: 'metal',
        server: {},
        bootstrap: { nodeGuard: 'api' },
      }),
      {
        kubeConfig: sim.kubeConfig(),
        policies: [always],
        ca,
        listen: '127.0.0.1:0',
        serverNames: { ipAddresses: ['127.0.0.1'] },
        registry: new Registry(),
      },
    );
    try {
      assert.equal(boot.guardPresence, undefined);
      createReadyNode(sim, 'node-a');
      const status = await new Promise<number>((resolve, reject) => {
        const req = request(
          `${boot.server.url}/v1/certificates`,
          { method: 'POST', ca: bundlePem(ca), headers: { 'content-type': 'application/json' } },
          (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          },
        );
        req.on('error', reject);
        req.end(body({ kubelet: kubeletCsr(generateKey(), 'node-a') }));
      });
      assert.equal(status, 409);
    } finally {
      await boot.close();
      await sim.close();
    }
  });
});

test('the rate limit counts an IPv6 client against its /64, not its own address', async () => {
  // One host commonly holds a whole /64: keyed by address, it would pass as 2^64 sources.
  const ca = createCa();
  const asked: string[] = [];
  const server = await serveBootstrap({
    listen: '[::1]:0',
    tls: servingCertificate(ca, { name: 'kops-controller.internal.c.example.com', ipAddresses: ['::1'] }),
    context: {
      ca,
      policies: [],
      readNode: async () => undefined,
      apiServer: 'https://api.internal.c.example.com',
      logger: silentLogger,
    },
    limiter: {
      take: (source) => {
        asked.push(source);
        return { allowed: false, retryAfterSeconds: 7 };
      },
    },
  });
  try {
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(
        `${server.url}/v1/certificates`,
        { method: 'POST', ca: bundlePem(ca), agent: false },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on('error', reject);
      req.end('{}');
    });
    assert.equal(status, 429);
    assert.deepEqual(asked, ['::/64']);
  } finally {
    await server.close();
  }
});

describe('bootstrap server over raw TLS: hostile HTTP', () => {
  let sim: SimApiServer;
  let server: { boot: RunningBootstrap; ca: CertificateAuthority };
  const audit: AuditRecord[] = [];
  const { logger, lines } = capturedLogger();
  let joined = 0;
  /** Approves `Bearer ok` as a fresh node (the claimed name on /v1, a new one on kops' /bootstrap). */
  const approveOk: BootstrapPolicy = {
    name: 'test-ok',
    async evaluate(request) {
      if (request.proof.kind !== 'bootstrap-token' || request.proof.token !== 'ok')
        return { verdict: 'deny', reasons: ['not ok'] };
      const nodeName = request.claimedNodeName ?? `kops-node-${++joined}`;
      return {
        verdict: 'approve',
        facts: { nodeName, instanceGroup: 'nodes', dnsNames: [], ipAddresses: [], evidence: {} },
        reasons: ['ok'],
      };
    },
  };
  const issued = () => audit.filter((record) => record.issued).length;

  before(async () => {
    sim = await startApiServer();
    server = await standaloneServer(sim.kubeConfig(), {
      policies: [approveOk],
      audit: (record) => audit.push(record),
      logger,
      rateLimit: { burst: 10_000, ratePerSecond: 10_000 },
    });
  });
  after(async () => {
    await server.boot.close();
    await sim.close();
  });

  /**
   * Opens a TLS connection, writes `text` (then, with `end`, half-closes or resets it), and resolves
   * with everything the server sent until the connection closed.
   */
  function raw(text: string, end: 'half-close' | 'reset' | 'none' = 'none'): Promise<string> {
    const { port } = server.boot.server.address;
    return new Promise((resolve) => {
      const chunks: Buffer[] = [];
      // TLS over a TCP socket of its own, which can be reset.
      const tcp = netConnect(port, '127.0.0.1');
      tcp.on('error', () => undefined);
      const socket = connect({ socket: tcp, ca: bundlePem(server.ca), servername: '127.0.0.1' }, () => {
        socket.write(text);
        if (end === 'half-close') socket.end();
        if (end === 'reset') setTimeout(() => tcp.resetAndDestroy(), 100);
      });
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.on('error', () => undefined);
      socket.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    });
  }

  const statuses = (answer: string) => answer.match(/HTTP\/1\.1 \d{3}/g) ?? [];
  const nodeupPost = (target: string, method = 'POST', extra = '') => {
    const payload = nodeupBody();
    return (
      `${method} ${target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n${extra}` +
      `Content-Length: ${Buffer.byteLength(payload)}\r\nConnection: close\r\n\r\n${payload}`
    );
  };

  test('attack: a request target that is not a plain path (dot segments, "//", a backslash, encoded dots, a fragment) is refused with 400, not served as the endpoint it resolves to', async () => {
    const before = issued();
    for (const target of [
      '/x/../bootstrap',
      '/./bootstrap',
      '/bootstrap/../bootstrap',
      '//x/bootstrap',
      '/\\x/bootstrap',
      '/x/%2e%2e/bootstrap',
      '/x/%2E%2E/v1/certificates',
      '//x/v1/certificates',
      '/v1/requests/../certificates',
      '/bootstrap#fragment',
    ]) {
      const answer = await raw(nodeupPost(target, 'POST', 'Content-Type: application/json\r\n'));
      assert.deepEqual(statuses(answer), ['HTTP/1.1 400'], `${target}: ${answer}`);
      const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as {
        error: { reason: string; message: string };
      };
      assert.equal(body.error.reason, 'invalid', target);
      assert.match(body.error.message, /request target/, target);
    }
    assert.equal(issued(), before, 'a certificate was issued for a request target that is not a plain path');
    // What is served: the plain path, with a query, or in absolute form (RFC 9112 §3.2.2).
    for (const target of [
      '/bootstrap',
      '/bootstrap?x=1',
      'https://kops-controller.internal.c.example.com/bootstrap',
    ]) {
      const answer = await raw(nodeupPost(target));
      assert.deepEqual(statuses(answer), ['HTTP/1.1 200'], `${target}: ${answer}`);
    }
  });

  test("attack: kops' /bootstrap with a method other than POST is 405 with Allow: POST, and nothing is issued (a HEAD would issue a certificate whose answer carries no body)", async () => {
    const before = issued();
    for (const method of ['GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD']) {
      const answer = await raw(nodeupPost('/bootstrap', method));
      assert.deepEqual(statuses(answer), ['HTTP/1.1 405'], `${method}: ${answer}`);
      assert.match(answer, /^allow: POST\r$/im, method);
    }
    assert.equal(issued(), before);
  });

  test('a client that cuts its body off (reset or half-close) is no server failure: nothing is logged as an error, nothing issued', async () => {
    const before = issued();
    const logged = lines.length;
    const payload = body({ kubelet: kubeletCsr(generateKey(), 'node-cut') });
    const head = (path: string) =>
      `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer ok\r\n` +
      `Content-Length: ${Buffer.byteLength(payload) + 10}\r\n\r\n${payload}`;
    for (const path of ['/v1/certificates', '/bootstrap']) {
      assert.deepEqual(statuses(await raw(head(path), 'half-close')), ['HTTP/1.1 400']);
      assert.equal(await raw(head(path), 'reset'), '');
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    const errors = lines.slice(logged).filter((line) => JSON.parse(line).level === 'error');
    assert.deepEqual(errors, []);
    assert.equal(issued(), before);
  });

  test('attack: a request followed on its connection by bytes that are not HTTP gets its own answer (the certificate), then 400 and the close', async () => {
    const payload = body({ kubelet: kubeletCsr(generateKey(), 'node-piped') });
    const answer = await raw(
      'POST /v1/certificates HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer ok\r\n' +
        `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}NOT HTTP\r\n\r\n`,
    );
    assert.deepEqual(statuses(answer), ['HTTP/1.1 200', 'HTTP/1.1 400'], answer);
    assert.match(answer, /"status":"issued"/);
  });

  test('attack: ambiguous framing (request smuggling) is refused with 400 and the connection closed; a valid request inside it is never decided', async () => {
    const before = issued();
    const decided = audit.length;
    const payload = body({ kubelet: kubeletCsr(generateKey(), 'node-smuggled') });
    const length = Buffer.byteLength(payload);
    const chunked = `${length.toString(16)}\r\n${payload}\r\n0\r\n\r\n`;
    const start = 'POST /v1/certificates HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n';
    const json = 'Content-Type: application/json\r\n';
    for (const [what, text] of [
      [
        'Content-Length and Transfer-Encoding',
        `${start}${json}Content-Length: ${length}\r\nTransfer-Encoding: chunked\r\n\r\n${chunked}`,
      ],
      [
        'Transfer-Encoding and Content-Length',
        `${start}${json}Transfer-Encoding: chunked\r\nContent-Length: ${length}\r\n\r\n${chunked}`,
      ],
      [
        'two Content-Lengths',
        `${start}${json}Content-Length: ${length}\r\nContent-Length: 2\r\n\r\n${payload}`,
      ],
      ['a Content-Length list', `${start}${json}Content-Length: ${length}, ${length}\r\n\r\n${payload}`],
      ['a signed Content-Length', `${start}${json}Content-Length: +${length}\r\n\r\n${payload}`],
      ['chunked not last', `${start}${json}Transfer-Encoding: chunked, identity\r\n\r\n${chunked}`],
      ['a folded Transfer-Encoding', `${start}${json}Transfer-Encoding:\r\n chunked\r\n\r\n${chunked}`],
      [
        'a space before the colon',
        `${start}${json}Transfer-Encoding : chunked\r\nContent-Length: ${length}\r\n\r\n${chunked}`,
      ],
      ['a chunk size that is not hex', `${start}${json}Transfer-Encoding: chunked\r\n\r\nzz${chunked}`],
      ['a bare CR', `${start}${json}Content-Length: ${length}\rX: y\r\n\r\n${payload}`],
      ['a NUL in a header', `${start}${json}X: a\0b\r\nContent-Length: ${length}\r\n\r\n${payload}`],
    ]) {
      const answer = await raw(text as string);
      assert.deepEqual(statuses(answer), ['HTTP/1.1 400'], `${what}: ${answer}`);
    }
    assert.equal(issued(), before);
    assert.equal(audit.length, decided, 'a request inside an ambiguous frame was decided');
    // The same request framed once, either way, is issued.
    assert.deepEqual(
      statuses(await raw(`${start}${json}Content-Length: ${length}\r\nConnection: close\r\n\r\n${payload}`)),
      ['HTTP/1.1 200'],
    );
  });

  test('a client that half-closes once its request is sent still gets its certificate', async () => {
    const answer = await raw(nodeupPost('/bootstrap'), 'half-close');
    assert.deepEqual(statuses(answer), ['HTTP/1.1 200'], answer);
    assert.match(answer, /"Certs":\{"kubelet":"-----BEGIN CERTIFICATE-----/);
  });
});

describe('bootstrap server during a dependency outage', () => {
  const key = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
  /** A policy whose dependency is down: every request is a fault, as with STS answering 503. */
  const stsDown: BootstrapPolicy = {
    name: 'aws',
    async evaluate() {
      throw dependencyFault(
        'sts',
        new UnavailableError('STS failed (ServiceUnavailable: down); retry later'),
      );
    },
  };

  /** A server in front of `stsDown`; `outages` makes the server's outage record (the server's own by default). */
  async function outageServer(outages?: (logger: Logger) => DependencyOutages) {
    const ca = createCa();
    const { logger, lines } = capturedLogger();
    const audit: AuditRecord[] = [];
    // The product's audit sink, which writes each record as a line of the same log.
    const sink = auditSink(logger);
    const server = await serveBootstrap({
      listen: '127.0.0.1:0',
      tls: servingCertificate(ca, {
        name: 'kops-controller.internal.c.example.com',
        ipAddresses: ['127.0.0.1'],
      }),
      context: {
        ca,
        policies: [stsDown],
        readNode: async () => undefined,
        apiServer: 'https://api.internal.c.example.com',
        audit: (record) => {
          audit.push(record);
          sink(record);
        },
        logger,
        ...(outages ? { outages: outages(logger) } : {}),
      },
      kops: { certNames: ['kubelet'] },
      rateLimit: { burst: 100_000, ratePerSecond: 100_000 },
    });
    /** One native and one kops request: each answer's status, Retry-After and stated wait. */
    const ask = async () =>
      Promise.all(
        [
          ['/v1/certificates', body({ kubelet: kubeletCsr(generateKey(), 'node-a') }), 'x-aws-sts proof'],
          ['/bootstrap', nodeupBody(key), 'x-aws-sts proof'],
        ].map(
          ([path, payload, authorization]) =>
            new Promise<{ status: number; retryAfter: number; told: number }>((resolve, reject) => {
              const req = request(
                `${server.url}${path}`,
                {
                  method: 'POST',
                  ca: bundlePem(ca),
                  agent: false,
                  headers: { 'content-type': 'application/json', authorization },
                },
                (res) => {
                  let text = '';
                  res.on('data', (chunk: Buffer) => (text += chunk));
                  res.on('end', () =>
                    resolve({
                      status: res.statusCode ?? 0,
                      retryAfter: Number(res.headers['retry-after']),
                      told: Number(/retry in (\d+) s/.exec(text)?.[1]),
                    }),
                  );
                },
              );
              req.on('error', reject);
              req.end(payload);
            }),
        ),
      );
    const records = () => lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    const faultLines = () =>
      records().filter(
        (record) =>
          record['msg'] === 'bootstrap request not decided: a dependency failed; the node was told to retry',
      );
    return { server, audit, ask, records, faultLines };
  }

  test('every request turned away is audited, but the warning is written once for the outage, not per request', async () => {
    const { server, audit, ask, records, faultLines } = await outageServer();
    const started = records().length;
    try {
      for (let i = 0; i < 10; i++) {
        for (const answer of await ask()) assert.equal(answer.status, 503);
      }
      assert.equal(audit.length, 20, 'one audit record per request');
      assert.ok(
        audit.every((record) => record.verdict === 'error' && record.detail?.[0]?.includes('STS failed')),
      );
      const warned = faultLines();
      assert.equal(warned.length, 1, JSON.stringify(warned));
      assert.equal(warned[0]?.['level'], 'warn');
      assert.equal(warned[0]?.['dependency'], 'sts');
      assert.equal(warned[0]?.['failures'], 1);
      assert.match(String(warned[0]?.['detail']), /STS failed \(ServiceUnavailable: down\)/);
      // What each request still writes is its audit record, one line, not the warning again.
      const written = records().slice(started);
      assert.equal(written.length, 21);
      const auditLines = written.filter((record) => record['audit'] === true);
      assert.equal(auditLines.length, 20);
      assert.ok(
        auditLines.every((record) => record['msg'] === 'bootstrap error' && record['level'] === 'info'),
      );
    } finally {
      await server.close();
    }
  });

  test('the wait told grows with the outage (2–5 s at first, 30–60 s from four minutes on), the warning comes back every ten minutes with the count, and the next outage starts short again', async () => {
    let now = 0;
    const { server, ask, faultLines } = await outageServer(
      (logger) => new DependencyOutages({ logger, now: () => now }),
    );
    try {
      const waits: number[][] = [];
      // Two requests every 20 s for eleven minutes: the outage goes on.
      for (now = 0; now <= 660_000; now += 20_000) {
        const answers = await ask();
        for (const answer of answers) {
          assert.equal(answer.status, 503);
          assert.equal(answer.told, answer.retryAfter, 'the message tells the wait the header asks');
        }
        waits.push(answers.map((answer) => answer.retryAfter));
      }
      for (const wait of waits[0] ?? []) assert.ok(wait >= 2 && wait <= 5, `at first: ${wait}`);
      for (const wait of waits.slice(12).flat())
        assert.ok(wait >= 30 && wait <= 60, `from 4 min on: ${wait}`);
      const during = faultLines();
      assert.deepEqual(
        during.map((line) => [line['failures'], line['repeated']]),
        [
          [1, undefined],
          // At 600 s, the 61st request: the 59 in between were held back.
          [61, 59],
        ],
      );
      // No request for longer than the longest wait told (60 s) plus 30 s: that outage is over.
      now += 91_000;
      for (const answer of await ask()) {
        assert.ok(answer.retryAfter >= 2 && answer.retryAfter <= 5, `the next outage: ${answer.retryAfter}`);
      }
      const next = faultLines().slice(during.length);
      assert.deepEqual(
        next.map((line) => line['failures']),
        [1],
        'the next outage is written at once, counted afresh',
      );
    } finally {
      await server.close();
    }
  });
});
