import assert from 'node:assert/strict';
import { test } from 'node:test';
import { issueForFacts } from '../bootstrap/issue.ts';
import type { NodeFacts } from '../bootstrap/types.ts';
import { createCa } from '../pki/ca.ts';
import { generateKey } from '../pki/keys.ts';
import { publicKeyRequest } from '../pki/profiles.ts';
import { epochSeconds, type LedgerEntry } from './ledger.ts';
import { entriesOfIssued, entryOfPem, LedgerRecorder } from './recorder.ts';

const facts: NodeFacts = {
  nodeName: 'node-1',
  instanceGroup: 'nodes-a',
  dnsNames: [],
  ipAddresses: [],
  evidence: {},
};

test('issueForFacts, the one issuance every path shares, tells the ledger each certificate and its node', async () => {
  const ca = createCa();
  let entries: LedgerEntry[] = [];
  const issued = await issueForFacts(
    ca,
    { kubelet: publicKeyRequest(generateKey()), 'kube-proxy': publicKeyRequest(generateKey()) },
    facts,
    { onIssued: (certificates, verified) => (entries = entriesOfIssued(certificates, verified)) },
  );
  assert.deepEqual(
    entries.map((e) => [e.kind, e.instanceGroup, e.instance, e.serial, e.notAfter]),
    (['kube-proxy', 'kubelet'] as const).map((profile) => [
      profile,
      'nodes-a',
      'node-1',
      issued[profile]?.serialHex,
      epochSeconds(issued[profile]?.notAfter as Date),
    ]),
  );
});

test('entryOfPem reads a held certificate: the CA, its serial and its validity', () => {
  const ca = createCa();
  const entry = entryOfPem('ca', 'kubernetes-ca.1', ca.signer.certificate.pem);
  assert.equal(entry.kind, 'ca');
  assert.equal(entry.instanceGroup, '');
  assert.equal(BigInt(`0x${entry.serial}`).toString(), ca.signer.certificate.parsed.serialDecimal);
  assert.doesNotMatch(entry.serial, /^00|[A-F]/);
  assert.equal(entry.notAfter, epochSeconds(ca.signer.certificate.parsed.notAfter));
});

test('held certificates are recorded with a hold that the recorder renews; records are batched', async () => {
  const batches: LedgerEntry[][] = [];
  const now = new Date('2030-01-01T00:00:00Z');
  const recorder = new LedgerRecorder({
    store: {
      add: async (entries) => {
        batches.push([...entries]);
        return { writes: 1, droppedOverCap: 0 };
      },
    },
    holdIntervalMs: 3_600_000,
    now: () => now,
  });
  const held = {
    kind: 'ca',
    instanceGroup: '',
    instance: 'kubernetes-ca.1',
    serial: '01',
    notBefore: 0,
    notAfter: 2e9,
  };
  recorder.hold([held]);
  recorder.record([{ ...held, kind: 'kubelet', instance: 'node-1' }]);
  recorder.record([{ ...held, kind: 'kubelet', instance: 'node-1', serial: '02' }]);
  await recorder.stop();
  assert.deepEqual(batches, [
    [
      { ...held, heldUntil: epochSeconds(now) + 3 * 3600 },
      { ...held, kind: 'kubelet', instance: 'node-1', serial: '02' },
    ],
  ]);
});
