import assert from 'node:assert/strict';
import { test } from 'node:test';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { addressesAreVerified, nameIsVerified, queueDecision, queuePolicy } from './queue.ts';

test('queue holds a claimed name as unverified, for a human', async () => {
  const decision = await queuePolicy().evaluate(testRequest({ claimedNodeName: 'node-a' }), contextAt());
  assert.equal(decision.verdict, 'queue');
  assert.ok(decision.verdict === 'queue');
  assert.equal(decision.facts?.nodeName, 'node-a');
  assert.equal(decision.facts?.evidence['verified'], 'false');
  assert.match(decision.reasons[0] ?? '', /claimed, not verified.*10\.0\.0\.5/);
});

test('queue without a claimed name queues with no facts', async () => {
  const decision = await queuePolicy().evaluate(testRequest(), contextAt());
  assert.deepEqual(decision, {
    verdict: 'queue',
    reasons: ['the request names no node; a human must decide who it is'],
  });
});

test('queueDecision carries verified facts when a policy established them', () => {
  const facts = {
    nodeName: 'host-1',
    instanceGroup: 'nodes',
    dnsNames: [],
    ipAddresses: ['10.0.0.5'],
    evidence: {},
  };
  const decision = queueDecision(testRequest({ claimedNodeName: 'other' }), facts);
  assert.ok(decision.verdict === 'queue');
  assert.deepEqual(decision.facts, { ...facts, evidence: { verified: 'true' } });
  assert.match(decision.reasons[0] ?? '', /host-1 is verified/);
  assert.equal(nameIsVerified(decision.facts), true);
  assert.equal(addressesAreVerified(decision.facts), true);
});

test('only the verified mark set here reads as verified; the node-supplied addresses never do', () => {
  const facts = (evidence: Record<string, string>) => ({
    nodeName: 'n',
    dnsNames: [],
    ipAddresses: [],
    evidence,
  });
  for (const evidence of [
    {} as Record<string, string>,
    { verified: 'false' },
    { verified: 'webhook-only' },
    { verified: 'TRUE' },
  ]) {
    assert.equal(nameIsVerified(facts(evidence)), false, JSON.stringify(evidence));
  }
  assert.equal(nameIsVerified(undefined), false);
  assert.equal(addressesAreVerified(facts({ verified: 'true', addresses: 'requested by the node' })), false);
});
