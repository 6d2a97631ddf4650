import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isDnsName, isDnsSubdomain } from './dns-name.ts';

const label63 = 'a'.repeat(63);
const label64 = 'a'.repeat(64);

test('isDnsSubdomain accepts lower-case RFC 1123 subdomains of at most 253 characters', () => {
  for (const name of [
    'a',
    'node-a',
    'ip-10-0-0-1.ec2.internal',
    '0.example',
    label64,
    `${label63}.${label63}`,
  ]) {
    assert.equal(isDnsSubdomain(name), true, name);
  }
  const longest = `${'a'.repeat(125)}.${'b'.repeat(127)}`;
  assert.equal(longest.length, 253);
  assert.equal(isDnsSubdomain(longest), true);
  for (const name of ['', 'Node', '-a', 'a-', 'a..b', '.a', 'a.', 'a_b', 'a b', `${longest}c`]) {
    assert.equal(isDnsSubdomain(name), false, name);
  }
});

test('isDnsName also limits every label to 63 characters', () => {
  assert.equal(isDnsName(`${label63}.example`), true);
  assert.equal(isDnsName(`${label64}.example`), false);
  assert.equal(isDnsName(`example.${label64}`), false);
  assert.equal(isDnsName('Node.example'), false);
  assert.equal(isDnsName(''), false);
});
