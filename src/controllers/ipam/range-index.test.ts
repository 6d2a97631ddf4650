import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseCidr } from './cidr.ts';
import { RangeIndex } from './range-index.ts';

test('the index finds the nodes holding a range, an overlap of it, or a range inside it', () => {
  const index = new RangeIndex();
  index.set('a', ['2001:db8:0:1:1::/80']);
  index.set('b', ['2001:db8:0:1:2::/80', '10.0.2.0/24']);
  index.set('wide', ['2001:db8:0:2::/64']);
  index.set('narrow', ['10.0.3.128/25']);
  assert.deepEqual(index.holders(parseCidr('2001:db8:0:1:1::/80')), ['a']);
  assert.deepEqual(index.holders(parseCidr('2001:db8:0:1:1::/80'), 'a'), []);
  assert.deepEqual(index.holders(parseCidr('2001:db8:0:2:9::/80')), ['wide'], 'contained in a shorter range');
  assert.deepEqual(index.holders(parseCidr('10.0.3.0/24')), ['narrow'], 'contains a longer range');
  assert.deepEqual(index.holders(parseCidr('2001:db8:0:1::/64')), ['a', 'b']);
  assert.deepEqual(index.holders(parseCidr('10.0.9.0/24')), []);
});

test('a node set again or deleted no longer holds its old ranges; unparseable text holds nothing', () => {
  const index = new RangeIndex();
  index.set('a', ['10.0.1.0/24']);
  index.set('a', ['10.0.2.0/24', 'garbage']);
  assert.deepEqual(index.holders(parseCidr('10.0.1.0/24')), []);
  assert.deepEqual(index.holders(parseCidr('10.0.2.0/24')), ['a']);
  index.delete('a');
  assert.deepEqual(index.holders(parseCidr('10.0.0.0/8')), []);
});
