import assert from 'node:assert/strict';
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
