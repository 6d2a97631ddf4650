import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { bytesToIp, canonicalIp, ipToBytes } from './ip.ts';

test('IPv4 and IPv6 addresses convert to the bytes subjectAltName carries and back', () => {
  assert.equal(ipToBytes('10.0.0.1').toString('hex'), '0a000001');
  assert.equal(ipToBytes('::1').toString('hex'), `${'0'.repeat(30)}01`);
  assert.equal(ipToBytes('2001:db8::7').toString('hex'), '20010db8000000000000000000000007');
  assert.equal(ipToBytes('::ffff:1.2.3.4').toString('hex'), '00000000000000000000ffff01020304');
  assert.equal(bytesToIp(Buffer.from('0a000001', 'hex')), '10.0.0.1');
});

test('canonical forms make equal addresses compare equal (RFC 5952)', () => {
  assert.equal(canonicalIp('2001:0DB8:0:0:1:0:0:1'), '2001:db8::1:0:0:1');
  assert.equal(canonicalIp('0:0::1'), '::1');
  assert.equal(canonicalIp('fe80:0:0:0:0:0:0:0'), 'fe80::');
  assert.equal(canonicalIp('1:2:3:4:5:6:7:8'), '1:2:3:4:5:6:7:8');
});

test('anything else is an input error', () => {
  assert.throws(() => ipToBytes('10.0.0'), InvalidInputError);
  assert.throws(() => ipToBytes('node-a'), InvalidInputError);
  assert.throws(() => bytesToIp(Buffer.alloc(5)), InvalidInputError);
});
