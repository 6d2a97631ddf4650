import assert from 'node:assert/strict';
import { test } from 'node:test';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { insecureAlwaysApprovePolicy, startupWarning } from './insecure-always-approve.ts';

test('insecure-always-approve approves the claimed name, no other SANs, marked insecure', async () => {
  const decision = await insecureAlwaysApprovePolicy().evaluate(
    testRequest({ claimedNodeName: 'node-a' }),
    contextAt(),
  );
  assert.equal(decision.verdict, 'approve');
  assert.ok(decision.verdict === 'approve');
  assert.deepEqual(decision.facts, {
    nodeName: 'node-a',
    dnsNames: [],
    ipAddresses: [],
    evidence: { insecure: 'true' },
  });
});

test('insecure-always-approve denies a request that claims no name', async () => {
  const decision = await insecureAlwaysApprovePolicy().evaluate(testRequest(), contextAt());
  assert.equal(decision.verdict, 'deny');
});

test('the start-up warning says INSECURE and why', () => {
  assert.match(startupWarning(), /^INSECURE: .*any node name/);
});
