import assert from 'node:assert/strict';
import { test } from 'node:test';
import { awsPodRanges, gcePodRanges, hostPodRanges, podRangesOf } from './pod-ranges.ts';

const eni = (id: string, ...ipv6Prefixes: string[]) => ({ networkInterfaceId: id, ipv6Prefixes });

test('AWS: the one prefix of the one ENI, canonical (kops awsipam.go)', () => {
  assert.deepEqual(awsPodRanges('i-1', [eni('eni-1', '2600:1f13:0:0:0001::/80')]), {
    kind: 'ranges',
    cidrs: ['2600:1f13:0:0:1::/80'],
  });
});

test('AWS: no ENI or no prefix yet is nothing to assign; two ENIs or two prefixes are never guessed between', () => {
  assert.equal(awsPodRanges('i-1', []).kind, 'none');
  assert.equal(awsPodRanges('i-1', [eni('eni-1')]).kind, 'none');
  const twoEnis = awsPodRanges('i-1', [eni('eni-1', '2600::/80'), eni('eni-2')]);
  assert.equal(twoEnis.kind, 'unusable');
  assert.match((twoEnis as { reason: string }).reason, /2 network interfaces \(eni-1, eni-2\)/);
  const twoPrefixes = awsPodRanges('i-1', [eni('eni-1', '2600:0:0:0:1::/80', '2600:0:0:0:2::/80')]);
  assert.equal(twoPrefixes.kind, 'unusable');
  assert.match((twoPrefixes as { reason: string }).reason, /2 IPv6 prefixes/);
  assert.equal(awsPodRanges('i-1', [eni('eni-1', 'not-a-prefix')]).kind, 'unusable');
});

test('GCE: the one external IPv6 range, as kops; two are unusable', () => {
  assert.deepEqual(gcePodRanges('n1', { externalIpv6Ranges: ['2600:1900:4000:9::/96'] }), {
    kind: 'ranges',
    cidrs: ['2600:1900:4000:9::/96'],
  });
  assert.equal(gcePodRanges('n1', { externalIpv6Ranges: [] }).kind, 'none');
  const two = gcePodRanges('n1', { externalIpv6Ranges: ['2600:1900:4000:9::/96', '2600:1900:4000:a::/96'] });
  assert.equal(two.kind, 'unusable');
  assert.match((two as { reason: string }).reason, /2 IPv6 ranges/);
});

test("metal: the Host's podCIDRs; no Host or an empty list is nothing to assign", () => {
  assert.deepEqual(hostPodRanges('h1', ['10.1.0.0/24']), { kind: 'ranges', cidrs: ['10.1.0.0/24'] });
  assert.equal(hostPodRanges('h1', undefined).kind, 'none');
  assert.equal(hostPodRanges('h1', []).kind, 'none');
  assert.equal(podRangesOf(['10.1.0.0/24', '10.2.0.0/24'], 'x').kind, 'unusable');
});
