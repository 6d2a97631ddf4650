import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ipamRecordOf, needsReconcile } from './ipam-record.ts';

const node = (spec: Record<string, unknown>, resourceVersion = '1') =>
  ipamRecordOf({ metadata: { name: 'n1', uid: 'u1', resourceVersion }, spec });

test('the record keeps podCIDRs, or podCIDR alone when only the singular field is set', () => {
  assert.deepEqual(node({ providerID: 'aws:///a/i-1', podCIDRs: ['10.0.0.0/24', 'fd00::/64'] }).podCIDRs, [
    '10.0.0.0/24',
    'fd00::/64',
  ]);
  assert.deepEqual(node({ podCIDR: '10.0.0.0/24' }).podCIDRs, ['10.0.0.0/24']);
  assert.deepEqual(node({}).podCIDRs, []);
});

test('a heartbeat (a new resourceVersion only) queues nothing; a providerID or range change does', () => {
  const before = node({ providerID: 'aws:///a/i-1' });
  assert.equal(needsReconcile(before, node({ providerID: 'aws:///a/i-1' }, '2')), false);
  assert.equal(needsReconcile(before, node({ providerID: 'aws:///a/i-2' }, '2')), true);
  assert.equal(
    needsReconcile(before, node({ providerID: 'aws:///a/i-1', podCIDRs: ['fd00::/64'] }, '2')),
    true,
  );
});

test('a Node whose ranges, providerID or resourceVersion cannot be read is refused, never read by its characters', () => {
  const spoilt: unknown[] = [
    { metadata: { name: 'n1', resourceVersion: '1' }, spec: { podCIDRs: '10.0.0.0/24' } },
    { metadata: { name: 'n1', resourceVersion: '1' }, spec: { podCIDRs: 5 } },
    { metadata: { name: 'n1', resourceVersion: '1' }, spec: { podCIDRs: [5] } },
    { metadata: { name: 'n1', resourceVersion: '1' }, spec: { podCIDR: {} } },
    { metadata: { name: 'n1', resourceVersion: '1' }, spec: { providerID: 42 } },
    { metadata: { name: 'n1', resourceVersion: '1' }, spec: 'x' },
    { metadata: { name: 'n1' }, spec: {} },
  ];
  for (const node of spoilt)
    assert.throws(() => ipamRecordOf(node as never), /not|missing/, JSON.stringify(node));
});
