import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  type CryptoJob,
  type CryptoResult,
  decodeJobs,
  decodeResults,
  encodeJobs,
  encodeResults,
  WireError,
} from './crypto-wire.ts';

const plain = { noNullPrototype: true } as const;
const bytes = fc.uint8Array({ maxLength: 600 });
const hash = fc.constantFrom(null, 'sha256', 'sha384', 'sha512', 'SHA256');
const job: fc.Arbitrary<CryptoJob> = fc.oneof(
  fc.record({ op: fc.constant('verify' as const), hash, data: bytes, spki: bytes, signature: bytes }, plain),
  fc.record(
    { op: fc.constant('sign' as const), hash, data: bytes, keyId: fc.nat({ max: 0xffffffff }) },
    plain,
  ),
);
const result: fc.Arbitrary<CryptoResult> = fc.oneof(
  fc.record({ valid: fc.boolean() }, plain),
  fc.record({ signature: bytes }, plain),
  fc.record(
    { error: fc.string({ unit: 'grapheme' }), stage: fc.constantFrom('key' as const, 'sign' as const) },
    plain,
  ),
);

test('a batch of jobs unpacks to the same jobs, in order, from one buffer of its own', () => {
  fc.assert(
    fc.property(fc.array(job, { maxLength: 40 }), (jobs) => {
      const packed = encodeJobs(jobs);
      assert.equal(packed.byteOffset, 0);
      assert.equal(packed.byteLength, packed.buffer.byteLength, 'no spare memory is transferred');
      assert.deepEqual(decodeJobs(packed), jobs);
    }),
  );
});

test('results unpack to the same results, in order', () => {
  fc.assert(
    fc.property(fc.array(result, { maxLength: 40 }), (results) => {
      assert.deepEqual(decodeResults(encodeResults(results)), results);
    }),
  );
});

test('unpacked byte strings are views into the message, not copies', () => {
  const packed = encodeJobs([{ op: 'sign', hash: 'sha256', data: new Uint8Array([1, 2, 3]), keyId: 7 }]);
  assert.equal(decodeJobs(packed)[0]?.data.buffer, packed.buffer);
});

test('a message cut short or with an unknown tag is a WireError, never a wrong job or result', () => {
  const packed = encodeJobs([
    {
      op: 'verify',
      hash: 'sha256',
      data: new Uint8Array(5),
      spki: new Uint8Array(9),
      signature: new Uint8Array(3),
    },
  ]);
  for (let cut = 1; cut < packed.byteLength; cut++) {
    assert.throws(() => decodeJobs(packed.subarray(0, cut)), WireError, `cut at ${cut}`);
  }
  assert.throws(() => decodeJobs(new Uint8Array([9, 0])), /unknown crypto job 9/);
  assert.throws(() => decodeResults(new Uint8Array([9])), /unknown crypto result 9/);
  assert.throws(
    () => encodeJobs([{ op: 'sign', hash: 'x'.repeat(256), data: new Uint8Array(1), keyId: 1 }]),
    /hash name longer than 255/,
  );
  const answer = encodeResults([{ signature: new Uint8Array(4) }]);
  assert.throws(() => decodeResults(answer.subarray(0, answer.byteLength - 1)), WireError);
});
