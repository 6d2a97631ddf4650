import assert from 'node:assert/strict';
import { test } from 'node:test';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import type { BootstrapTokenInfo, BootstrapTokenValidator } from '../types.ts';
import { bootstrapTokenId, bootstrapTokenPolicy, fullMatch } from './bootstrap-token.ts';

const token = 'abcdef.0123456789abcdef';

function validator(info: BootstrapTokenInfo | undefined): BootstrapTokenValidator & { seen: string[] } {
  const seen: string[] = [];
  return {
    seen,
    validate: async (t) => {
      seen.push(t);
      return t === token && info ? info : { rejected: `bootstrap token ${t.slice(0, 6)}: no such token` };
    },
  };
}

const authToken: BootstrapTokenInfo = {
  id: 'abcdef',
  usages: { authentication: true, signing: false },
  extraGroups: [],
};

function withToken(t: string, claimedNodeName = 'worker-1') {
  return testRequest({ claimedNodeName, proof: { kind: 'bootstrap-token', token: t } });
}

test('bootstrap-token approves the claimed name for a valid authentication token', async () => {
  const v = validator(authToken);
  const decision = await bootstrapTokenPolicy({ validator: v }).evaluate(withToken(token), contextAt());
  assert.ok(decision.verdict === 'approve');
  assert.equal(decision.facts.nodeName, 'worker-1');
  assert.deepEqual(decision.facts.evidence, { tokenId: 'abcdef' });
  assert.deepEqual(v.seen, [token]);
  assert.ok(!JSON.stringify(decision).includes('0123456789abcdef'), 'the secret never appears');
});

test('bootstrap-token abstains without a token', async () => {
  const decision = await bootstrapTokenPolicy({ validator: validator(authToken) }).evaluate(
    testRequest({ claimedNodeName: 'worker-1' }),
    contextAt(),
  );
  assert.equal(decision.verdict, 'abstain');
});

test('bootstrap-token denies an unknown or wrong token, naming only its id', async () => {
  const decision = await bootstrapTokenPolicy({ validator: validator(authToken) }).evaluate(
    withToken('abcdef.ffffffffffffffff'),
    contextAt(),
  );
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /abcdef is unknown, expired/);
  assert.ok(!decision.reasons.join().includes('ffffffffffffffff'));
});

test('bootstrap-token denies a malformed token without asking the validator', async () => {
  const v = validator(authToken);
  const decision = await bootstrapTokenPolicy({ validator: v }).evaluate(withToken('nope'), contextAt());
  assert.equal(decision.verdict, 'deny');
  assert.deepEqual(v.seen, []);
});

test('bootstrap-token denies a token without the authentication usage', async () => {
  const v = validator({ ...authToken, usages: { authentication: false, signing: true } });
  const decision = await bootstrapTokenPolicy({ validator: v }).evaluate(withToken(token), contextAt());
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /usage-bootstrap-authentication/);
});

test('bootstrap-token denies names outside the pattern and invalid names', async () => {
  const policy = bootstrapTokenPolicy({ validator: validator(authToken), nodeNamePattern: /worker-[0-9]+/ });
  assert.equal((await policy.evaluate(withToken(token, 'worker-12'), contextAt())).verdict, 'approve');
  assert.equal((await policy.evaluate(withToken(token, 'xworker-12'), contextAt())).verdict, 'deny');
  assert.equal((await policy.evaluate(withToken(token, 'worker-12x'), contextAt())).verdict, 'deny');
  assert.equal((await policy.evaluate(withToken(token, 'Worker_1'), contextAt())).verdict, 'deny');
  assert.equal((await policy.evaluate(withToken(token, ''), contextAt())).verdict, 'deny');
});

test('bootstrapTokenId and fullMatch', () => {
  assert.equal(bootstrapTokenId(token), 'abcdef');
  assert.equal(bootstrapTokenId('ABCDEF.0123456789abcdef'), undefined);
  assert.equal(fullMatch(/a|ab/, 'ab'), true);
  assert.equal(fullMatch(/^a$/, 'a'), true);
});
