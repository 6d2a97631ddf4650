import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { createLogger } from '../log.ts';
import { testRequest } from '../testing/bootstrap-request.ts';
import { AuditTrail, auditRecordOf, redactTokens } from './audit.ts';
import type { ChainDecision } from './types.ts';

const secret = '0123456789abcdef';
const tokenRequest = testRequest({
  claimedNodeName: 'worker-1',
  proof: { kind: 'bootstrap-token', token: `abcdef.${secret}` },
});
const approved: ChainDecision = {
  decidedBy: 'bootstrap-token',
  decision: {
    verdict: 'approve',
    facts: {
      nodeName: 'worker-1',
      instanceGroup: 'nodes',
      dnsNames: [],
      ipAddresses: [],
      evidence: { tokenId: 'abcdef' },
    },
    reasons: ['ok'],
  },
  trail: [],
};

test('an approval record names who, what, which policy, why and the serials issued', () => {
  const record = auditRecordOf(
    tokenRequest,
    approved,
    { issued: { kubelet: '0a1b' } },
    new Date('2026-03-01T12:00:00Z'),
  );
  assert.deepEqual(record, {
    time: '2026-03-01T12:00:00.000Z',
    requestId: 'req-1',
    remoteAddress: '10.0.0.5',
    claimedNodeName: 'worker-1',
    proof: 'bootstrap-token',
    verdict: 'approve',
    decidedBy: 'bootstrap-token',
    reasons: ['ok'],
    nodeName: 'worker-1',
    instanceGroup: 'nodes',
    evidence: { tokenId: 'abcdef' },
    issued: { kubelet: '0a1b' },
  });
});

test('a denial records the token id, never its secret, even when a reason quotes it', () => {
  const denied: ChainDecision = {
    decision: { verdict: 'deny', reasons: [`bad token abcdef.${secret}`] },
    trail: [],
  };
  const record = auditRecordOf(tokenRequest, denied);
  assert.equal(record.verdict, 'deny');
  assert.equal(record.evidence?.['tokenId'], 'abcdef');
  assert.deepEqual(record.reasons, ['bad token abcdef.[redacted]']);
  assert.ok(!JSON.stringify(record).includes(secret));
  assert.equal(redactTokens('x'), 'x');
});

test('an issuance error is an error record with the reason', () => {
  const record = auditRecordOf(testRequest(), approved, { error: 'the CA key is unreadable' });
  assert.equal(record.verdict, 'error');
  assert.equal(record.reasons.at(-1), 'the CA key is unreadable');
});

test('AuditTrail writes one JSON line per decision marked audit: true', () => {
  const lines: string[] = [];
  const logger = createLogger({
    level: 'info',
    destination: new Writable({
      write(chunk, _encoding, done) {
        lines.push(String(chunk));
        done();
      },
    }),
  });
  new AuditTrail(logger).record(tokenRequest, approved, { issued: { kubelet: '01' } });
  assert.equal(lines.length, 1);
  const line = JSON.parse(lines[0] as string);
  assert.equal(line.audit, true);
  assert.equal(line.record.nodeName, 'worker-1');
  assert.ok(!(lines[0] as string).includes(secret));
});
