import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { capturedLogger } from '../testing/log-capture.ts';
import { auditSink, redactAuditRecord, redactTokens } from './audit.ts';
import type { AuditRecord } from './types.ts';

const secret = '0123456789abcdef';
const record: AuditRecord = {
  time: '2026-03-01T12:00:00.000Z',
  requestId: 'req-1',
  remoteAddress: '10.0.0.5',
  claimedNodeName: 'worker-1',
  proof: 'bootstrap-token',
  verdict: 'deny',
  decidedBy: 'bootstrap-token',
  reasons: [`bad token abcdef.${secret}`],
  detail: [`token abcdef.${secret}: expired`],
  evidence: { tokenId: 'abcdef', note: `abcdef.${secret}` },
};

test('redaction keeps the token id and drops the secret everywhere', () => {
  const safe = redactAuditRecord(record);
  assert.deepEqual(safe.reasons, ['bad token abcdef.[redacted]']);
  assert.deepEqual(safe.evidence, { tokenId: 'abcdef', note: 'abcdef.[redacted]' });
  assert.deepEqual(safe.detail, ['token abcdef.[redacted]: expired']);
  assert.ok(!JSON.stringify(safe).includes(secret));
  assert.equal(record.reasons[0], `bad token abcdef.${secret}`, 'the input is not changed');
  assert.equal(redactTokens('node-1'), 'node-1');
});

test('attack: a token-shaped node name is not anonymous in the trail: redacted, with the SHA-256 of the name as claimed', () => {
  const names = ['abcdef.0123456789abcdef', 'abcdef.fedcba9876543210'];
  const written = names.map((name) => redactAuditRecord({ ...record, claimedNodeName: name }));
  for (const [i, safe] of written.entries()) {
    assert.equal(safe.claimedNodeName, 'abcdef.[redacted]');
    assert.equal(
      safe.claimedNodeNameSha256,
      createHash('sha256')
        .update(names[i] as string)
        .digest('hex'),
    );
    assert.ok(!JSON.stringify(safe).includes(names[i] as string), 'the secret-shaped part is not written');
  }
  assert.notEqual(
    written[0]?.claimedNodeNameSha256,
    written[1]?.claimedNodeNameSha256,
    'the two names are told apart',
  );
  const plain = redactAuditRecord({ ...record, claimedNodeName: 'ip-10-0-0-5.ec2.internal' });
  assert.equal(plain.claimedNodeName, 'ip-10-0-0-5.ec2.internal');
  assert.equal('claimedNodeNameSha256' in plain, false, 'a name redaction left alone carries no hash');
});

test('a token-shaped verified node name is redacted and hashed too, and a token run together with other letters or digits is redacted as well', () => {
  const token = 'abcdef.0123456789abcdef';
  for (const name of [token, `n${token}`, `${token}0`, `ip-10-0-0-5x${token}`]) {
    const safe = redactAuditRecord({
      ...record,
      claimedNodeName: name,
      nodeName: name,
      reasons: [`node name ${name} refused`],
    });
    assert.ok(!JSON.stringify(safe).includes('0123456789abcdef'), name);
    const hash = createHash('sha256').update(name).digest('hex');
    assert.equal(safe.claimedNodeNameSha256, hash, name);
    assert.equal(safe.nodeNameSha256, hash, name);
  }
  const plain = redactAuditRecord({ ...record, nodeName: 'worker-1' });
  assert.equal(plain.nodeName, 'worker-1');
  assert.equal('nodeNameSha256' in plain, false);
});

test('the audit sink writes one JSON line per record, marked audit: true, without secrets', () => {
  const { logger, lines } = capturedLogger();
  const sink = auditSink(logger);
  sink(record);
  sink({ ...record, verdict: 'approve', nodeName: 'worker-1', issued: { kubelet: '0a' } });
  assert.equal(lines.length, 2);
  const [first, second] = lines.map((l) => JSON.parse(l));
  assert.equal(first.audit, true);
  assert.equal(first.msg, 'bootstrap deny');
  assert.equal(first.record.evidence.tokenId, 'abcdef');
  assert.deepEqual(second.record.issued, { kubelet: '0a' });
  assert.ok(!lines.join('').includes(secret));
});

test("attack: a record's texts are cut to 512 characters with their length, so a reason no call site bounded cannot make a record of kilobytes", () => {
  // A SigV4 credential scope, say, that a refusal repeats in full (the header allows 16 KiB).
  const credential = `AKIA/${'x'.repeat(12_000)}`;
  const refusal = `the credential "${credential}" is not of the form <key>/<YYYYMMDD>/<region>/<service>/aws4_request`;
  const long: AuditRecord = {
    ...record,
    claimedNodeName: 'n'.repeat(2_000),
    reasons: [refusal],
    detail: ['d'.repeat(3_000)],
    evidence: { note: 'e'.repeat(3_000) },
  };
  const safe = redactAuditRecord(long);
  const reason = safe.reasons[0] as string;
  assert.ok(reason.startsWith('the credential "AKIA/xxx'), 'what was wrong still shows');
  assert.ok(reason.endsWith(`… (${refusal.length} characters)`), reason.slice(-40));
  assert.ok(reason.length < 540, String(reason.length));
  assert.match(safe.detail?.[0] ?? '', /^d{512}… \(3000 characters\)$/);
  assert.match(safe.claimedNodeName ?? '', /^n{512}… \(2000 characters\)$/);
  assert.match(safe.evidence?.['note'] ?? '', /^e{512}… \(3000 characters\)$/);
  assert.ok(JSON.stringify(safe).length < 3_000, String(JSON.stringify(safe).length));
  // Redacted before it is cut: a token across the cut leaves no part of its secret behind.
  const straddling = redactAuditRecord({ ...record, reasons: [`${'x'.repeat(500)} abcdef.${secret}`] });
  assert.ok(!(straddling.reasons[0] as string).includes(secret.slice(0, 4)), straddling.reasons[0]);
  assert.deepEqual(
    redactAuditRecord(record).reasons,
    ['bad token abcdef.[redacted]'],
    'short texts unchanged',
  );
});
