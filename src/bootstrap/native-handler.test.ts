import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import { renewalProof } from '../agent/renewal.ts';
import { httpStatusOf, InvalidInputError, RateLimitedError, UnavailableError } from '../errors.ts';
import { silentLogger } from '../log.ts';
import { createCa } from '../pki/ca.ts';
import { CryptoPool } from '../pki/crypto-pool.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey } from '../pki/keys.ts';
import { issueCertificate, publicKeyRequest } from '../pki/profiles.ts';
import { nativeApiVersion } from '../protocol/bootstrap-api.ts';
import type { BootstrapContext } from './context.ts';
import { isDependencyFault } from './dependency.ts';
import { parseCertificatesRequest, pollRequest, submitCertificates } from './native-handler.ts';
import { bootstrapTokenPolicy } from './policies/bootstrap-token.ts';
import { renewalPolicy } from './policies/renewal.ts';
import { type CsrQueue, readBudgetReason } from './queue.ts';
import type { AuditRecord, BootstrapPolicy } from './types.ts';

function input(kubelet: string, authorization?: string) {
  const body = JSON.stringify({ apiVersion: nativeApiVersion, certificateSigningRequests: { kubelet } });
  return {
    body: Buffer.from(body),
    authorization,
    remoteAddress: '127.0.0.1',
    receivedAt: new Date(),
  };
}

const csr = buildCsrPem(generateKey('ecdsa-p256'), {
  subject: { commonName: 'system:node:node-a', organizations: ['system:nodes'] },
});

test('a crypto thread that stops makes a good request a 503 (retry), never a 400 or a certificate', async () => {
  const dying = new CryptoPool({
    threads: 1,
    workerUrl: new URL(`data:text/javascript,${encodeURIComponent('process.exit(1)')}`),
  });
  try {
    await assert.rejects(parseCertificatesRequest(input(csr), dying), (err) => {
      assert.ok(err instanceof UnavailableError, String(err));
      assert.equal(httpStatusOf(err), 503);
      return true;
    });
  } finally {
    await dying.close();
  }
});

test('with working threads the same request parses, and an altered one is a 400', async () => {
  const pool = new CryptoPool({ threads: 1 });
  try {
    const parsed = await parseCertificatesRequest(input(csr), pool);
    assert.equal(parsed.claimedNodeName, 'node-a');
    // Flip a byte inside the signature: the request no longer proves possession of its key.
    const der = Buffer.from(csr.replace(/-----[A-Z ]+-----|\s/g, ''), 'base64');
    der[der.length - 5] = (der[der.length - 5] as number) ^ 0xff;
    const altered = `-----BEGIN CERTIFICATE REQUEST-----\n${der.toString('base64')}\n-----END CERTIFICATE REQUEST-----\n`;
    await assert.rejects(parseCertificatesRequest(input(altered), pool), (err) => {
      assert.ok(err instanceof InvalidInputError);
      assert.match(err.message, /signature does not verify/);
      return true;
    });
  } finally {
    await pool.close();
  }
});

test("attack or mix-up: a node name holding the presented token's secret (the token where the name goes) is a 400 before any policy or record sees it, whatever the chain", async () => {
  const token = 'abcdef.0123456789abcdef';
  for (const name of [token, `n${token}`, `${token}.nodes.example.com`, 'x0123456789abcdefx']) {
    const named = buildCsrPem(generateKey('ecdsa-p256'), {
      subject: { commonName: `system:node:${name}`, organizations: ['system:nodes'] },
    });
    await assert.rejects(parseCertificatesRequest(input(named, `Bearer ${token}`)), (err) => {
      assert.ok(err instanceof InvalidInputError, String(err));
      assert.equal(httpStatusOf(err), 400);
      assert.equal(
        err.message,
        "the node name holds the bootstrap token's secret: give the token as the token and the machine's own name as the node name",
      );
      return true;
    });
  }
  // Another proof, or a name without the secret, parses as before.
  assert.equal((await parseCertificatesRequest(input(csr, `Bearer ${token}`))).claimedNodeName, 'node-a');
  const tokenNamed = buildCsrPem(generateKey('ecdsa-p256'), {
    subject: { commonName: `system:node:${token}`, organizations: ['system:nodes'] },
  });
  assert.equal((await parseCertificatesRequest(input(tokenNamed))).claimedNodeName, token);
});

test('a refused bootstrap token: the node hears one vague reason, the audit trail gets the precise one', async () => {
  const audit: AuditRecord[] = [];
  const context = {
    ca: createCa(),
    policies: [
      bootstrapTokenPolicy({
        validator: { validate: async () => ({ rejected: 'bootstrap token abcdef: expired' }) },
      }),
    ],
    readNode: async () => undefined,
    apiServer: 'https://api.internal.example.com',
    audit: (record: AuditRecord) => audit.push(record),
    logger: silentLogger,
  };
  const answer = await submitCertificates(context, input(csr, 'Bearer abcdef.0123456789abcdef'));
  assert.equal(answer.status, 403);
  const said = JSON.stringify(answer.body);
  assert.match(said, /bootstrap token abcdef is unknown, expired or its secret is wrong/);
  assert.doesNotMatch(said, /: expired/);
  const record = audit.at(-1) as AuditRecord;
  assert.equal(record.verdict, 'deny');
  assert.equal(record.decidedBy, 'bootstrap-token');
  assert.deepEqual(record.detail, ['bootstrap token abcdef: expired']);
  assert.doesNotMatch(JSON.stringify(record), /0123456789abcdef/, 'the secret is never recorded');
});

test('the queue cannot write the CSR or read it back, or a token cannot be looked up: a fault (503), audited, never a denial', async () => {
  const audit: AuditRecord[] = [];
  const failures: string[] = [];
  const queue = {
    submit: async () => {
      throw new UnavailableError('create certificate signing request: HTTP 503');
    },
    wait: async () => {
      throw new RateLimitedError('read certificate signing request: HTTP 429');
    },
  } as unknown as CsrQueue;
  const context = (policies: BootstrapPolicy[]): BootstrapContext => ({
    ca: createCa(),
    policies,
    readNode: async () => undefined,
    queue,
    apiServer: 'https://api.internal.example.com',
    audit: (record: AuditRecord) => audit.push(record),
    metrics: {
      decision: () => undefined,
      issued: () => undefined,
      queueDepth: () => undefined,
      dependencyFailure: (dependency) => failures.push(dependency),
      dependencyPaused: () => undefined,
    },
    logger: silentLogger,
  });
  const held: BootstrapPolicy = {
    name: 'queue',
    evaluate: async () => ({ verdict: 'queue', reasons: ['held'] }),
  };
  const isFault = (dependency: string) => (err: unknown) => {
    assert.ok(isDependencyFault(err), String(err));
    assert.equal(httpStatusOf(err), 503);
    assert.equal(err.details?.['dependency'], dependency);
    return true;
  };
  await assert.rejects(submitCertificates(context([held]), input(csr)), isFault('kubernetes-api'));
  assert.deepEqual([audit.at(-1)?.verdict, audit.at(-1)?.decidedBy], ['error', 'queue']);
  // The queue's own 429 when it is full is an answer with its reason, not the API server failing.
  const full = new RateLimitedError('the queue is full; retry in 60 s', {
    details: { reason: 'queue-full', retryAfterSeconds: 60 },
  });
  const fullQueue = { submit: async () => Promise.reject(full) } as unknown as CsrQueue;
  await assert.rejects(
    submitCertificates({ ...context([held]), queue: fullQueue }, input(csr)),
    (err: unknown) => err === full,
  );
  // Audited as the denial it is, as is a request the queue refuses because it does not fit.
  assert.deepEqual([audit.at(-1)?.verdict, audit.at(-1)?.reasons], ['deny', [full.message]]);
  const misfit = new InvalidInputError('the kubelet CSR asks for a name its facts do not hold');
  const strictQueue = { submit: async () => Promise.reject(misfit) } as unknown as CsrQueue;
  await assert.rejects(
    submitCertificates({ ...context([held]), queue: strictQueue }, input(csr)),
    (err: unknown) => err === misfit,
  );
  assert.deepEqual([audit.at(-1)?.verdict, audit.at(-1)?.reasons], ['deny', [misfit.message]]);
  await assert.rejects(
    pollRequest(context([held]), `kops-bootstrap-${'a'.repeat(40)}`, '0', new AbortController().signal),
    isFault('kubernetes-api'),
  );
  const tokens = bootstrapTokenPolicy({
    validator: {
      validate: async () => {
        throw new UnavailableError('read secret kube-system/bootstrap-token-abcdef: HTTP 503');
      },
    },
  });
  await assert.rejects(
    submitCertificates(context([tokens]), input(csr, 'Bearer abcdef.0123456789abcdef')),
    isFault('kubernetes-api'),
  );
  assert.deepEqual([audit.at(-1)?.verdict, audit.at(-1)?.decidedBy], ['error', 'bootstrap-token']);
  assert.deepEqual(failures, ['kubernetes-api', 'kubernetes-api', 'kubernetes-api']);
});

test('a policy whose proof is the source address (OpenStack) is refused for any Node of the name, Ready or not, as kops', async () => {
  const facts = { nodeName: 'node-a', dnsNames: [], ipAddresses: [], evidence: {} };
  const policy = (firstJoinOnly: boolean): BootstrapPolicy => ({
    name: 'openstack',
    evaluate: async () => ({
      verdict: 'approve',
      facts: firstJoinOnly ? { ...facts, firstJoinOnly } : facts,
      reasons: ['approved'],
    }),
  });
  const context = (policies: BootstrapPolicy[]): BootstrapContext => ({
    ca: createCa(),
    policies,
    readNode: async () => ({ status: { conditions: [{ type: 'Ready', status: 'False' }] } }),
    apiServer: 'https://api.internal.example.com',
    logger: silentLogger,
  });
  // A NotReady Node of the name: any other proof may bootstrap it again (a machine re-provisioned).
  assert.equal((await submitCertificates(context([policy(false)]), input(csr))).status, 200);
  await assert.rejects(
    submitCertificates(context([policy(true)]), input(csr)),
    (err) => httpStatusOf(err) === 409,
  );
});

/**
 * node-a renews on /v1/certificates with its current kubelet client certificate (valid
 * `presentedLifetimeMs`) through the real renewal policy; its Node is registered and Ready.
 */
async function renewNatively(presentedLifetimeMs: number) {
  const ca = createCa();
  const key = generateKey('ecdsa-p256');
  const presented = new X509Certificate(
    issueCertificate(
      ca,
      'kubelet',
      publicKeyRequest(key),
      { name: 'node-a' },
      { lifetimeMs: presentedLifetimeMs },
    ).pem,
  );
  const audit: AuditRecord[] = [];
  const context: BootstrapContext = {
    ca,
    policies: [renewalPolicy({ clusterName: 'c.example.com', ca })],
    readNode: async () => ({ status: { conditions: [{ type: 'Ready', status: 'True' }] } }),
    apiServer: 'https://api.internal.example.com',
    audit: (record) => audit.push(record),
    logger: silentLogger,
  };
  const request = input(csr);
  const current = { nodeName: 'node-a', certificate: presented, key };
  const authorization = (await renewalProof(current, 'c.example.com')(request.body)) as string;
  const answer = await submitCertificates(context, { ...request, authorization });
  const pem = (answer.body as { certificates?: { kubelet?: string } }).certificates?.kubelet;
  return { answer, audit, presented, issued: pem === undefined ? undefined : new X509Certificate(pem) };
}

const validityMs = (c: X509Certificate) => Date.parse(c.validTo) - Date.parse(c.validFrom);

test('a renewal of a Ready node is issued (the guard is for first joins); a first join of that name is still 409', async () => {
  const { answer } = await renewNatively(86_400_000);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  const join: BootstrapPolicy = {
    name: 'insecure-always-approve',
    evaluate: async () => ({
      verdict: 'approve',
      facts: { nodeName: 'node-a', dnsNames: [], ipAddresses: [], evidence: {} },
      reasons: ['approved'],
    }),
  };
  const context: BootstrapContext = {
    ca: createCa(),
    policies: [join],
    readNode: async () => ({ status: { conditions: [{ type: 'Ready', status: 'True' }] } }),
    apiServer: 'https://api.internal.example.com',
    logger: silentLogger,
  };
  await assert.rejects(submitCertificates(context, input(csr)), (err) => httpStatusOf(err) === 409);
});

test('attack: a renewal never outlives the certificate it presents: a 2-hour kubelet certificate renews for 2 hours, not the native day', async () => {
  const { answer, presented, issued } = await renewNatively(2 * 3_600_000);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  assert.ok(issued);
  assert.ok(validityMs(issued) <= validityMs(presented), `${validityMs(issued)} > ${validityMs(presented)}`);
  assert.ok(validityMs(presented) - validityMs(issued) <= 2_000, 'exactly its lifetime, not spread again');
});

test('a renewal presenting a certificate valid for less than the shortest lifetime issued is denied (403), not lengthened', async () => {
  const { answer, audit, issued } = await renewNatively(6 * 60_000);
  assert.equal(answer.status, 403, JSON.stringify(answer.body));
  assert.equal(issued, undefined);
  assert.match(
    JSON.stringify(answer.body),
    /valid for less than the shortest lifetime this server issues \(10 min\)/,
  );
  assert.equal(audit.at(-1)?.verdict, 'deny');
});

test("a poll refused by the queue's own read budget is its 429 with reason and Retry-After: not an API-server fault, not counted or logged as one", async () => {
  const failures: string[] = [];
  const outages: unknown[] = [];
  const spent = new RateLimitedError('too many reads of bootstrap requests the CSR watch does not hold', {
    reason: readBudgetReason,
    retryAfterSeconds: 1,
  });
  const throttled = new RateLimitedError('read certificate signing request: HTTP 429', {
    retryAfterSeconds: 1,
  });
  let thrown: Error = spent;
  const context = {
    ca: createCa(),
    policies: [],
    readNode: async () => undefined,
    queue: { wait: async () => Promise.reject(thrown) } as unknown as CsrQueue,
    apiServer: 'https://api.internal.example.com',
    metrics: { dependencyFailure: (dependency: string) => failures.push(dependency) },
    outages: {
      failed: (fault: unknown) => {
        outages.push(fault);
        return fault;
      },
    },
    logger: silentLogger,
  } as unknown as BootstrapContext;
  const poll = () =>
    pollRequest(context, `kops-bootstrap-${'b'.repeat(40)}`, '30', new AbortController().signal);
  await assert.rejects(poll(), (err: unknown) => {
    assert.equal(err, spent);
    assert.equal(httpStatusOf(err), 429);
    return true;
  });
  assert.deepEqual(failures, []);
  assert.deepEqual(outages, []);
  // The API server's own 429 is still the API server failing.
  thrown = throttled;
  await assert.rejects(poll(), (err: unknown) => {
    assert.ok(isDependencyFault(err), String(err));
    assert.equal(httpStatusOf(err), 503);
    return true;
  });
  assert.deepEqual(failures, ['kubernetes-api']);
  assert.equal(outages.length, 1);
});
