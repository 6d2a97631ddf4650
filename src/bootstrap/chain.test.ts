import assert from 'node:assert/strict';
import { test } from 'node:test';
import { evaluateChain } from './chain.ts';
import type { BootstrapPolicy, BootstrapRequest, PolicyDecision } from './types.ts';

const request: BootstrapRequest = {
  id: 'r1',
  body: Buffer.from('{}'),
  certificates: {},
  proof: { kind: 'none' },
  remoteAddress: '127.0.0.1',
  receivedAt: new Date(0),
};
const context = { now: () => new Date(0) };
const facts = { nodeName: 'n1', dnsNames: [], ipAddresses: [], evidence: {} };

function policy(name: string, decision: PolicyDecision | Error): BootstrapPolicy & { calls: number } {
  return {
    name,
    calls: 0,
    async evaluate() {
      this.calls++;
      if (decision instanceof Error) throw decision;
      return decision;
    },
  };
}

test('the first policy that does not abstain decides, and later ones are not asked', async () => {
  const later = policy('later', { verdict: 'deny', reasons: ['no'] });
  const result = await evaluateChain(
    [
      policy('a', { verdict: 'abstain', reasons: ['not mine'] }),
      policy('b', { verdict: 'approve', facts, reasons: ['ok'] }),
      later,
    ],
    request,
    context,
  );
  assert.equal(result.decidedBy, 'b');
  assert.equal(result.decision.verdict, 'approve');
  assert.deepEqual(
    result.trail.map((t) => t.policy),
    ['a', 'b'],
  );
  assert.equal(later.calls, 0);
});

test('all abstaining, or no policy at all, denies (fail closed)', async () => {
  const none = await evaluateChain([], request, context);
  assert.equal(none.decision.verdict, 'deny');
  assert.match(none.decision.reasons[0] ?? '', /no approval policy is configured/);
  const abstained = await evaluateChain(
    [
      policy('aws', { verdict: 'abstain', reasons: ['the request carries no AWS proof'] }),
      policy('quiet', { verdict: 'abstain', reasons: [] }),
    ],
    request,
    context,
  );
  assert.equal(abstained.decision.verdict, 'deny');
  assert.equal(abstained.decidedBy, undefined);
  // The denial says why each policy passed, so the node's operator can tell what proof is missing.
  assert.deepEqual(abstained.decision.reasons, [
    'no policy approved the request (aws abstained: the request carries no AWS proof; quiet abstained)',
  ]);
});

test('a policy that throws denies with its error as the reason', async () => {
  const result = await evaluateChain([policy('aws', new Error('STS unreachable'))], request, context);
  assert.equal(result.decision.verdict, 'deny');
  assert.deepEqual(result.decision.reasons, ['policy aws failed: STS unreachable']);
});

test('explain mode evaluates every policy but keeps the first decision', async () => {
  const result = await evaluateChain(
    [policy('q', { verdict: 'queue', reasons: ['held'] }), policy('x', { verdict: 'deny', reasons: ['no'] })],
    request,
    context,
    { stopAtDecision: false },
  );
  assert.equal(result.decidedBy, 'q');
  assert.equal(result.trail.length, 2);
});
