import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decide, type IpamFacts } from './decide.ts';

const cloud = { kind: 'ranges' as const, cidrs: ['2001:db8:0:1:1::/80'] };
const nobody = () => [];
const facts = (overrides: Partial<IpamFacts>): IpamFacts => ({
  node: 'n1',
  current: [],
  cloud,
  holders: nobody,
  ...overrides,
});

test("a node without ranges is given the cloud's", () => {
  assert.deepEqual(decide(facts({})), { action: 'assign', cidrs: cloud.cidrs });
});

test('a node with the same ranges (any spelling) is left alone', () => {
  assert.deepEqual(decide(facts({ current: ['2001:0db8:0:1:1:0::/80'] })), { action: 'unchanged' });
  assert.deepEqual(decide(facts({ current: ['10.0.0.0/24'], cloud: { kind: 'none', reason: 'x' } })), {
    action: 'unchanged',
  });
});

test('conflict: a node whose ranges differ from the cloud keeps them and is reported', () => {
  const decision = decide(facts({ current: ['2001:db8:0:1:9::/80'] }));
  assert.equal(decision.action, 'conflict');
  assert.equal((decision as { reason: string }).reason, 'existing-differs');
  assert.match((decision as { message: string }).message, /2001:db8:0:1:9::\/80.*2001:db8:0:1:1::\/80/);
});

test('conflict: a range another node holds is not given again, and a shared range is reported on its holders', () => {
  const holders = (cidr: string) => (cidr === '2001:db8:0:1:1::/80' ? ['other'] : []);
  const taken = decide(facts({ holders }));
  assert.deepEqual([taken.action, (taken as { reason: string }).reason], ['conflict', 'range-in-use']);
  assert.match((taken as { message: string }).message, /held by node other/);
  const shared = decide(facts({ current: cloud.cidrs, holders }));
  assert.deepEqual([shared.action, (shared as { reason: string }).reason], ['conflict', 'range-in-use']);
});

test('conflict: a node that is not the instance its providerID names gets nothing, whatever it has', () => {
  for (const current of [[], ['10.0.0.0/24']]) {
    const decision = decide(facts({ current, notItsInstance: 'node n1 is not a name of instance i-1' }));
    assert.deepEqual(decision, {
      action: 'conflict',
      reason: 'not-its-instance',
      message: 'not assigning podCIDRs: node n1 is not a name of instance i-1',
    });
  }
});

test('no range yet: wait; an unusable cloud answer is a conflict, never a guess', () => {
  assert.deepEqual(decide(facts({ cloud: { kind: 'none', reason: 'no prefix' } })), {
    action: 'wait',
    reason: 'no prefix',
  });
  const unusable = decide(facts({ cloud: { kind: 'unusable', reason: 'two ENIs' } }));
  assert.deepEqual(
    [unusable.action, (unusable as { reason: string }).reason],
    ['conflict', 'unusable-cloud-range'],
  );
});
