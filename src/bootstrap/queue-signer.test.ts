import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import { RateLimitedError } from '../errors.ts';
import { makeClients } from '../kube/client.ts';
import { createCa } from '../pki/ca.ts';
import { parseCsr } from '../pki/csr.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey } from '../pki/keys.ts';
import { type ReservedNames, reservedNames } from '../pki/reserved-names.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { auditSink, redactAuditRecord } from './audit.ts';
import { httpsNodeReader } from './node-guard.ts';
import { bootstrapSignerName, CsrQueue, queueAnnotations, queuedCsrObject, sealKeyOf } from './queue.ts';
import { denialRecord, type QueueSignerOptions, queueSigner } from './queue-signer.ts';
import type { AuditRecord, BootstrapRequest, NodeFacts } from './types.ts';

function csr(
  conditions: { type: string; reason?: string; message?: string }[],
  signerName = bootstrapSignerName,
): V1CertificateSigningRequest {
  return {
    metadata: {
      name: 'kops-bootstrap-0123',
      annotations: {
        [queueAnnotations.requestId]: 'r-1',
        [queueAnnotations.claimedNode]: 'node-a',
        [queueAnnotations.remoteAddress]: '10.0.0.7',
      },
    },
    spec: { signerName, request: '', usages: [] },
    status: { conditions: conditions.map((c) => ({ ...c, status: 'True' })) },
  };
}

/** A key no test CSR here is sealed with. */
const otherSealKey = sealKeyOf(createCa());

test("an admin's denial is recorded once, as it happens, with the condition's reason and message", () => {
  const denied = csr([{ type: 'Denied', reason: 'KubectlDeny', message: 'not in the inventory' }]);
  const record = denialRecord(csr([]), denied, otherSealKey);
  assert.equal(record?.verdict, 'deny');
  assert.equal(record?.decidedBy, 'admin');
  assert.equal(record?.requestId, 'r-1');
  assert.equal(record?.claimedNodeName, 'node-a');
  assert.equal(record?.remoteAddress, '10.0.0.7');
  assert.equal(record?.reasons[0], 'denied by an admin: KubectlDeny: not in the inventory');
  // Already denied before this update (a relist, a new leader): nothing again.
  assert.equal(denialRecord(denied, denied, otherSealKey), undefined);
  // Another signer's CSR, or one that is not denied, is not ours to record.
  assert.equal(
    denialRecord(csr([]), csr([{ type: 'Denied' }], 'kubernetes.io/kubelet-serving'), otherSealKey),
    undefined,
  );
  assert.equal(denialRecord(csr([]), csr([{ type: 'Approved' }]), otherSealKey), undefined);
  assert.equal(
    denialRecord(csr([]), csr([{ type: 'Denied' }]), otherSealKey)?.reasons[0],
    'denied by an admin: no reason given',
  );
});

test('a token in an annotation is redacted before anything is cut: no part of its secret is written, and the hash is of the whole claimed name', () => {
  const token = 'abcdef.0123456789abcdef';
  // The token starts 490 characters in: a cut at 512 before redacting would keep 15 of its 16.
  const claimed = `${'x'.repeat(489)}-${token}`;
  const forged = csr([]);
  forged.metadata = {
    name: 'kops-bootstrap-0123',
    annotations: {
      [queueAnnotations.requestId]: claimed,
      [queueAnnotations.claimedNode]: claimed,
      [queueAnnotations.remoteAddress]: claimed,
    },
  };
  const denied = {
    ...forged,
    status: { conditions: [{ type: 'Denied', status: 'True', message: claimed }] },
  };
  const { logger, lines } = capturedLogger();
  auditSink(logger)(denialRecord(forged, denied, otherSealKey) as AuditRecord);
  const written = lines.join('');
  assert.ok(!written.includes('0123456789'), written.slice(0, 300));
  const { record } = JSON.parse(lines[0] as string) as { record: AuditRecord };
  assert.equal(record.claimedNodeNameSha256, createHash('sha256').update(claimed).digest('hex'));
});

test("a denial's record says whether the CSR's seal holds, and cuts what its annotations carry to the audit cap", () => {
  const ca = createCa();
  const sealKey = sealKeyOf(ca);
  const request: BootstrapRequest = {
    id: 'r-sealed',
    body: Buffer.from('{}'),
    claimedNodeName: 'node-s',
    certificates: {
      kubelet: parseCsr(
        buildCsrPem(generateKey(), {
          subject: { commonName: 'system:node:node-s', organizations: ['system:nodes'] },
        }),
      ),
    },
    proof: { kind: 'none' },
    remoteAddress: '10.0.0.8',
    receivedAt: new Date(),
  };
  const facts: NodeFacts = {
    nodeName: 'node-s',
    dnsNames: [],
    ipAddresses: [],
    evidence: { verified: 'false' },
  };
  const sealed = queuedCsrObject(request, facts, sealKey);
  const deniedNow = (object: V1CertificateSigningRequest) => ({
    ...object,
    status: {
      conditions: [{ type: 'Denied', status: 'True', reason: 'KubectlDeny', message: 'x'.repeat(5_000) }],
    },
  });
  const ours = denialRecord(sealed, deniedNow(sealed), sealKey);
  assert.equal(ours?.requestId, 'r-sealed');
  assert.equal(ours?.nodeName, 'node-s', 'the sealed facts name the node');
  assert.match(ours?.reasons.join('\n') ?? '', /its seal verifies/);
  assert.ok((ours?.reasons[0]?.length ?? 0) < 600, `a reason of ${ours?.reasons[0]?.length} characters`);

  // Anyone who may create CSRs can name our signer, with annotations of any length.
  const long = 'a'.repeat(12_000);
  const forged = csr([]);
  forged.metadata = {
    name: 'kops-bootstrap-0123',
    annotations: {
      [queueAnnotations.requestId]: long,
      [queueAnnotations.claimedNode]: long,
      [queueAnnotations.remoteAddress]: long,
      [queueAnnotations.proof]: long,
      // Facts naming a node, without a seal that covers them: never taken for the node it names.
      [queueAnnotations.facts]: JSON.stringify({ ...facts, nodeName: 'victim' }),
    },
  };
  const made = denialRecord(forged, { ...forged, status: deniedNow(forged).status }, sealKey);
  assert.ok(made);
  // The claimed name reaches the sink whole (it hashes the name as claimed), which cuts it.
  const record = redactAuditRecord(made);
  assert.match(record.reasons.join('\n'), /its seal does not verify/);
  assert.equal(record.nodeName, undefined);
  for (const [field, value] of Object.entries({
    requestId: record.requestId,
    claimedNodeName: record.claimedNodeName,
    remoteAddress: record.remoteAddress,
    proof: record.proof,
  })) {
    assert.ok(String(value).length < 600, `${field}: ${String(value).length} characters`);
    assert.match(String(value), /… \(12000 characters\)$/, field);
  }
  assert.ok(JSON.stringify(record).length < 4_000, `a record of ${JSON.stringify(record).length} bytes`);
});

describe('the signer against the simulated API server', () => {
  let sim: SimApiServer;
  const ca = createCa();
  const sealKey = sealKeyOf(ca);
  /** A reserved set with nothing in it: what a request queued before names were reserved was checked against. */
  const nothingReserved: ReservedNames = { dnsNames: new Set(), ipAddresses: new Set() };

  before(async () => {
    sim = await startApiServer();
  });
  after(() => sim.close());

  function queuedRequest(
    node: string,
    san?: { dnsNames?: string[]; ipAddresses?: string[] },
  ): BootstrapRequest {
    const subject = { commonName: `system:node:${node}`, organizations: ['system:nodes'] };
    return {
      id: `id-${node}`,
      body: Buffer.from('{}'),
      claimedNodeName: node,
      certificates: {
        kubelet: parseCsr(buildCsrPem(generateKey(), { subject })),
        ...(san ? { 'kubelet-server': parseCsr(buildCsrPem(generateKey(), { subject, ...san })) } : {}),
      },
      proof: { kind: 'none' },
      remoteAddress: '10.0.0.9',
      receivedAt: new Date(),
    };
  }

  function conditionsOf(name: string): { type: string; reason?: string; message?: string }[] {
    const csr = sim.store.get('certificatesigningrequests', undefined, name);
    return (
      (csr?.['status'] as { conditions?: { type: string; reason?: string; message?: string }[] })
        ?.conditions ?? []
    );
  }

  function certificateOf(name: string): string | undefined {
    const csr = sim.store.get('certificatesigningrequests', undefined, name);
    return (csr?.['status'] as { certificate?: string } | undefined)?.certificate;
  }

  async function until(condition: () => boolean, what: string): Promise<void> {
    for (let i = 0; i < 500 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.ok(condition(), what);
  }

  function approve(name: string): void {
    const csr = sim.store.get('certificatesigningrequests', undefined, name) as KubeObject;
    sim.store.update(
      {
        ...csr,
        status: {
          conditions: [
            ...conditionsOf(name),
            { type: 'Approved', status: 'True', reason: 'Test', message: 'ok' },
          ],
        },
      },
      { target: 'approval' },
    );
  }

  async function withSigner(
    options: Partial<QueueSignerOptions>,
    body: (audit: AuditRecord[]) => Promise<void>,
  ): Promise<void> {
    const audit: AuditRecord[] = [];
    const stop = new AbortController();
    const signer = queueSigner({
      kubeConfig: sim.kubeConfig(),
      certificates: makeClients(sim.kubeConfig()).certificates,
      ca,
      readNode: httpsNodeReader(sim.kubeConfig()),
      audit: (record) => audit.push(record),
      ...options,
    });
    const running = signer.start(stop.signal);
    try {
      await body(audit);
    } finally {
      stop.abort();
      await running;
    }
  }

  test('an approved request naming the API server is refused at signing, even one queued before names were reserved', async () => {
    const cases: [string, { dnsNames?: string[]; ipAddresses?: string[] }, RegExp][] = [
      [
        'node-r1',
        { dnsNames: ['kubernetes.default.svc'] },
        /kubernetes\.default\.svc is a name of the cluster's API server/,
      ],
      ['node-r2', { ipAddresses: ['10.96.0.1'] }, /10\.96\.0\.1 is an address of the cluster's API server/],
      ['node-r3', { dnsNames: ['api.internal.c.example.com'] }, /api\.internal\.c\.example\.com is a name/],
    ];
    const names: string[] = [];
    for (const [node, san] of cases) {
      const request = queuedRequest(node, san);
      const facts: NodeFacts = {
        nodeName: node,
        dnsNames: san.dnsNames ?? [],
        ipAddresses: san.ipAddresses ?? [],
        evidence: { verified: 'false' },
      };
      const object = queuedCsrObject(request, facts, sealKey, nothingReserved);
      names.push(object.metadata?.name as string);
      sim.store.create(object as never, {
        target: 'main',
        requester: { name: 'kops-controller', groups: [] },
      });
      approve(object.metadata?.name as string);
    }
    await withSigner(
      { issueOptions: { reserved: reservedNames({ clusterName: 'c.example.com' }) } },
      async (audit) => {
        for (const [i, name] of names.entries()) {
          await until(() => conditionsOf(name).some((c) => c.type === 'Failed'), `${name} was marked Failed`);
          const failed = conditionsOf(name).find((c) => c.type === 'Failed');
          assert.equal(failed?.reason, 'SignerValidationFailure');
          assert.match(failed?.message ?? '', cases[i]?.[2] as RegExp);
          assert.equal(certificateOf(name), undefined, 'no certificate');
        }
        // The audit record follows the status write that marked it Failed.
        await until(
          () => audit.filter((r) => r.verdict === 'deny').length === names.length,
          'every refusal audited',
        );
      },
    );
  });

  test('a CSR of the bootstrap signer that kops-controller did not seal is marked Failed at once, never signed', async () => {
    const request = queuedRequest('node-forged');
    // Evidence that claims a verified cloud identity, written by a node that can create CSRs.
    const forged = queuedCsrObject(
      request,
      {
        nodeName: 'node-forged',
        dnsNames: [],
        ipAddresses: [],
        evidence: { verified: 'true', providerID: 'aws:///x/i-1' },
      },
      sealKeyOf(createCa()),
    );
    const name = forged.metadata?.name as string;
    sim.store.create(forged as never, {
      target: 'main',
      requester: { name: 'system:node:evil', groups: ['system:nodes'] },
    });
    await withSigner({}, async (audit) => {
      await until(
        () => conditionsOf(name).some((c) => c.type === 'Failed'),
        'the forged CSR was marked Failed',
      );
      const failed = conditionsOf(name).find((c) => c.type === 'Failed');
      assert.equal(failed?.reason, 'SealInvalid');
      assert.match(failed?.message ?? '', /not created by kops-controller/);
      // Approving it afterwards changes nothing: it is never signed.
      approve(name);
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.equal(certificateOf(name), undefined);
      await until(() => audit.some((r) => r.requestId === name), 'the refusal was audited');
      const record = audit.find((r) => r.requestId === name);
      assert.equal(record?.verdict, 'deny');
      assert.match(record?.reasons[0] ?? '', /created by system:node:evil/);
    });
  });

  test('pending requests expire after the TTL: marked Failed (Expired), audited, their slot freed', async () => {
    const kubeConfig = sim.kubeConfig();
    const queue = new CsrQueue({
      certificates: makeClients(kubeConfig).certificates,
      kubeConfig,
      ca,
      limits: { maxPending: 1, maxPendingPerSource: 1 },
    });
    queue.start();
    try {
      while (!queue.hasSynced()) await new Promise((resolve) => setTimeout(resolve, 10));
      // Everything pending from earlier tests is decided first, so that the cap counts only this test.
      for (const csr of sim.store.list('certificatesigningrequests')) {
        if (!(csr['status'] as { conditions?: unknown[] } | undefined)?.conditions?.length) {
          sim.store.delete('certificatesigningrequests', undefined, csr.metadata.name as string);
        }
      }
      const request = queuedRequest('node-old');
      const facts: NodeFacts = {
        nodeName: 'node-old',
        dnsNames: [],
        ipAddresses: [],
        evidence: { verified: 'false' },
      };
      const state = await queue.submit(request, facts);
      assert.equal(state.state, 'pending');
      await assert.rejects(
        queue.submit(queuedRequest('node-new'), { ...facts, nodeName: 'node-new' }),
        RateLimitedError,
      );
      const twoHoursOn = () => Date.now() + 2 * 3_600_000;
      await withSigner({ pendingTtlMs: 3_600_000, now: twoHoursOn, expirySweepMs: 20 }, async (audit) => {
        await until(
          () => conditionsOf(state.name).some((c) => c.type === 'Failed'),
          'the old request expired',
        );
        const failed = conditionsOf(state.name).find((c) => c.type === 'Failed');
        assert.equal(failed?.reason, 'Expired');
        assert.match(failed?.message ?? '', /not approved or denied within 1h/);
        await until(() => audit.some((r) => r.requestId === 'id-node-old'), 'the expiry was audited');
        const record = audit.find((r) => r.requestId === 'id-node-old');
        assert.equal(record?.verdict, 'deny');
        assert.equal(record?.decidedBy, 'queue-expiry');
        const polled = await queue.lookup(state.name);
        assert.equal(polled.state, 'denied');
        assert.match(polled.state === 'denied' ? (polled.reasons[0] ?? '') : '', /^expired: /);
        await until(() => queue.pendingCount() === 0, 'the slot was freed');
        assert.equal(
          (await queue.submit(queuedRequest('node-new'), { ...facts, nodeName: 'node-new' })).state,
          'pending',
        );
      });
    } finally {
      await queue.stop();
    }
  });
});
