import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidInputError } from '../../errors.ts';
import { canonicalCidr, overlaps, parseCidr, sameRanges, truncate } from './cidr.ts';

test('a range parses to its network and canonical text, host bits cleared', () => {
  assert.equal(parseCidr('2600:1f13:0:0:0001::/80').text, '2600:1f13:0:0:1::/80');
  assert.equal(parseCidr('10.4.1.7/24').text, '10.4.1.0/24');
  assert.equal(parseCidr('10.4.1.0/24').family, 4);
  assert.equal(parseCidr('::/0').prefixLength, 0);
});

test('anything but address/length is a typed input error naming the text', () => {
  for (const bad of ['', '10.0.0.0', '10.0.0.0/33', '2600::/129', 'fe80::/x', 'host/24', ' 10.0.0.0/8']) {
    assert.throws(
      () => parseCidr(bad),
      (err: unknown) => err instanceof InvalidInputError && err.message.includes(`"${bad}"`),
    );
  }
  assert.equal(canonicalCidr('not a range'), 'not a range');
});

test('ranges overlap when one contains the other, never across families', () => {
  const a = parseCidr('2001:db8:0:1::/64');
  assert.ok(overlaps(a, parseCidr('2001:db8:0:1:5::/80')));
  assert.ok(overlaps(parseCidr('2001:db8:0:1:5::/80'), a));
  assert.ok(!overlaps(parseCidr('2001:db8:0:1:5::/80'), parseCidr('2001:db8:0:1:6::/80')));
  assert.ok(!overlaps(parseCidr('0.0.0.0/0'), parseCidr('::/0')));
  assert.equal(truncate(parseCidr('2001:db8:0:1:5::/80'), 64), '2001:db8:0:1::/64');
});

test('two lists are the same ranges whatever their order and spelling', () => {
  assert.ok(sameRanges(['2001:db8::/80', '10.0.0.0/24'], ['10.0.0.0/24', '2001:0db8:0::/80']));
  assert.ok(!sameRanges(['10.0.0.0/24'], ['10.0.1.0/24']));
  assert.ok(!sameRanges(['10.0.0.0/24'], []));
});
