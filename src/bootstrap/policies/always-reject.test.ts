import assert from 'node:assert/strict';
import { test } from 'node:test';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { alwaysRejectPolicy } from './always-reject.ts';

test('always-reject denies even a request with a proof and a name', async () => {
  const decision = await alwaysRejectPolicy().evaluate(
    testRequest({
      claimedNodeName: 'node-a',
      proof: { kind: 'bootstrap-token', token: 'abcdef.0123456789abcdef' },
    }),
    contextAt(),
  );
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /admits no new nodes/);
});
