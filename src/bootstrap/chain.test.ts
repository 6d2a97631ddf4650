import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RateLimitedError, TimeoutError, UnavailableError } from '../errors.ts';
import { evaluateChain } from './chain.ts';
import { dependencyFault, isDependencyFault } from './dependency.ts';
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

test('a policy that throws something other than a dependency failure denies with its error as the reason', async () => {
  const result = await evaluateChain([policy('aws', new Error('a bug'))], request, context);
  assert.equal(result.decision.verdict, 'deny');
  assert.deepEqual(result.decision.reasons, ['policy aws failed: a bug']);
});

test('a dependency fault is neither a denial nor a pass to the next policy: the chain throws it, naming the policy', async () => {
  const later = policy('insecure-always-approve', { verdict: 'approve', facts, reasons: ['ok'] });
  for (const stopAtDecision of [true, false]) {
    await assert.rejects(
      evaluateChain(
        [policy('aws', dependencyFault('sts', new Error('connect ECONNREFUSED'))), later],
        request,
        context,
        { stopAtDecision },
      ),
      (err: unknown) => {
        assert.ok(isDependencyFault(err));
        assert.equal(err.details?.['dependency'], 'sts');
        assert.equal(err.details?.['policy'], 'aws');
        return true;
      },
    );
  }
  assert.equal(later.calls, 0);
});

test('a policy failing transiently without naming what it called: a fault named after the policy', async () => {
  for (const failure of [
    new UnavailableError('read secret: HTTP 503'),
    new RateLimitedError('read secret: HTTP 429'),
    new TimeoutError('read secret timed out'),
  ]) {
    await assert.rejects(
      evaluateChain([policy('bootstrap-token', failure)], request, context),
      (err: unknown) => isDependencyFault(err) && err.details?.['dependency'] === 'policy:bootstrap-token',
      failure.message,
    );
  }
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
