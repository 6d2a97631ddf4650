import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sourceAddress, sourceOf } from './source.ts';

test('sourceAddress writes an IPv4-mapped address as IPv4 and an unknown one as empty', () => {
  assert.equal(sourceAddress('::ffff:10.0.0.9'), '10.0.0.9');
  assert.equal(sourceAddress('2001:db8::1'), '2001:db8::1');
  assert.equal(sourceAddress(undefined), '');
});

test('sourceOf: an IPv4 address is its own source, an IPv6 address counts as its /64', () => {
  assert.equal(sourceOf('10.0.0.9'), '10.0.0.9');
  assert.equal(sourceOf('::ffff:10.0.0.9'), '10.0.0.9');
  assert.equal(sourceOf('::ffff:a00:9'), '10.0.0.9', 'a mapped address in hex is still IPv4');
  assert.equal(sourceOf('2001:db8:1:2:aaaa::1'), '2001:db8:1:2::/64');
  assert.equal(sourceOf('2001:db8:1:2:ffff:ffff:ffff:ffff'), '2001:db8:1:2::/64');
  assert.notEqual(sourceOf('2001:db8:1:3::1'), sourceOf('2001:db8:1:2::1'));
  assert.equal(sourceOf('::1'), '::/64');
  assert.equal(sourceOf(''), '');
  assert.equal(sourceOf(undefined), '');
});
