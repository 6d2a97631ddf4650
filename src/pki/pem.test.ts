import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { decodePem, decodePemBlocks, encodePem } from './pem.ts';

test('PEM round-trips with 64-character lines', () => {
  const der = Buffer.alloc(100, 7);
  const pem = encodePem('CERTIFICATE', der);
  assert.deepEqual(
    pem.split('\n').map((l) => l.length),
    [27, 64, 64, 8, 25, 0],
  );
  assert.deepEqual(decodePem(pem, 'CERTIFICATE'), [der]);
  assert.equal(decodePemBlocks(`junk before\n${pem}junk after\n${pem}`).length, 2);
});

test('the block type is checked and damage is reported', () => {
  const pem = encodePem('CERTIFICATE', Buffer.from('abc'));
  assert.throws(
    () => decodePem(pem, 'CERTIFICATE REQUEST', 'node.csr'),
    /node\.csr: found a PEM block of type CERTIFICATE, expected CERTIFICATE REQUEST/,
  );
  assert.throws(() => decodePem('nothing', 'CERTIFICATE'), /no PEM block found/);
  assert.throws(() => decodePemBlocks(pem.replace('YWJj', 'Y$Jj')), InvalidInputError);
  assert.throws(() => decodePemBlocks('-----BEGIN A-----\nYWJj\n-----END B-----\n'), /ends with END B/);
});

test('BEGIN lines that never END are no block, however many; a block after them is read to its own END', () => {
  const unterminated = '-----BEGIN CERTIFICATE-----\n'.repeat(4_000);
  assert.throws(() => decodePem(unterminated, 'CERTIFICATE'), /no PEM block found/);
  const block = encodePem('CERTIFICATE', Buffer.from('der'));
  // The first BEGIN's body runs to the first END: the lines between are not base64.
  assert.throws(() => decodePem(`${unterminated}${block}`, 'CERTIFICATE'), /not valid base64/);
  assert.deepEqual(decodePem(`junk\n${block}trailing`, 'CERTIFICATE'), [Buffer.from('der')]);
});
