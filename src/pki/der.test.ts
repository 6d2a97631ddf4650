import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  childrenOf,
  contentOf,
  namedBits,
  oid,
  readNamedBits,
  readNode,
  readOid,
  readRoot,
  readString,
  readTime,
  sequence,
  smallInteger,
  Tag,
  time,
  tlv,
  unsignedInteger,
  utf8String,
} from './der.ts';

test('object identifiers round-trip, including multi-byte arcs', () => {
  assert.equal(oid('1.2.840.113549.1.1.11').toString('hex'), '06092a864886f70d01010b');
  for (const dotted of ['2.5.29.17', '1.3.6.1.5.5.7.3.2', '1.2.840.10045.4.3.2', '2.999.1']) {
    assert.equal(readOid(readRoot(oid(dotted))), dotted);
  }
});

test('integers are minimal and positive', () => {
  assert.equal(unsignedInteger(Buffer.from([0x80])).toString('hex'), '02020080');
  assert.equal(unsignedInteger(Buffer.from([0, 0, 0x7f])).toString('hex'), '02017f');
  assert.equal(smallInteger(0).toString('hex'), '020100');
  assert.equal(smallInteger(2).toString('hex'), '020102');
});

test('named bit strings drop trailing zero bits (key usage)', () => {
  // digitalSignature + keyCertSign + cRLSign = bits 0, 5, 6 → 0x86 with one unused bit
  assert.equal(namedBits([0, 5, 6]).toString('hex'), '03020186');
  assert.equal(namedBits([0]).toString('hex'), '03020780');
  assert.deepEqual(readNamedBits(readRoot(namedBits([0, 2, 8]))), [0, 2, 8]);
});

test('times use UTCTime through 2049 and GeneralizedTime after', () => {
  const y2049 = new Date('2049-12-31T23:59:59Z');
  const y2050 = new Date('2050-01-01T00:00:00Z');
  assert.equal(time(y2049)[0], Tag.utcTime);
  assert.equal(time(y2050)[0], Tag.generalizedTime);
  assert.equal(readTime(readRoot(time(y2049))).getTime(), y2049.getTime());
  assert.equal(readTime(readRoot(time(y2050))).getTime(), y2050.getTime());
});

test('times out of range are malformed, not rolled over into the next month or day', () => {
  for (const [tag, text] of [
    [Tag.utcTime, '261301000000Z'],
    [Tag.utcTime, '260230000000Z'],
    [Tag.utcTime, '260101240000Z'],
    [Tag.generalizedTime, '20260101006000Z'],
    [Tag.generalizedTime, '20260101000060Z'],
  ] as const) {
    assert.throws(() => readTime(readRoot(tlv(tag, Buffer.from(text)))), /malformed DER: invalid time/, text);
  }
  assert.throws(() => readTime(undefined, 'notAfter'), /malformed DER: notAfter is missing/);
});

test('long lengths encode and decode', () => {
  const big = utf8String('x'.repeat(70_000));
  assert.equal(readString(readRoot(big)).length, 70_000);
  const nested = sequence(big, smallInteger(5));
  assert.deepEqual(
    childrenOf(readRoot(nested)).map((n) => n.tag),
    [Tag.utf8String, Tag.integer],
  );
});

test('the reader refuses what DER forbids or what does not fit', () => {
  assert.throws(() => readRoot(Buffer.from('3080', 'hex')), /indefinite lengths/);
  assert.throws(() => readRoot(Buffer.from('300500', 'hex')), /runs past the end/);
  assert.throws(() => readRoot(Buffer.from('3081050000000000', 'hex')), /non-minimal length/);
  assert.throws(() => readRoot(Buffer.from('30020500ff', 'hex')), /1 trailing bytes/);
  assert.throws(() => readRoot(Buffer.from('30', 'hex')), /truncated/);
  assert.throws(() => readRoot(Buffer.from('3f0100', 'hex')), /high tag number/);
  assert.throws(() => childrenOf(readRoot(Buffer.from('0500', 'hex'))), /expected a constructed value/);
});

test('strings decode from every X.500 string type; an odd-length BMPString is malformed DER', () => {
  const tlv = (tag: number, content: Buffer) => Buffer.concat([Buffer.from([tag, content.length]), content]);
  assert.equal(readString(readRoot(tlv(Tag.utf8String, Buffer.from('zoë', 'utf8')))), 'zoë');
  assert.equal(readString(readRoot(tlv(Tag.printableString, Buffer.from('abc')))), 'abc');
  // BMPString is UTF-16 big-endian: two bytes a character.
  assert.equal(readString(readRoot(tlv(Tag.bmpString, Buffer.from('0061006200e9', 'hex')))), 'abé');
  assert.equal(readString(readRoot(tlv(Tag.bmpString, Buffer.alloc(0)))), '');
  for (const odd of ['61', '616263', '00610062ff']) {
    assert.throws(
      () => readString(readRoot(tlv(Tag.bmpString, Buffer.from(odd, 'hex')))),
      (err: unknown) =>
        (err as Error).name === 'InvalidInputError' &&
        /^malformed DER: BMPString of \d+ bytes/.test((err as Error).message),
    );
  }
});

test('the reader never throws anything but an input error on random bytes', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
      try {
        const node = readNode(Buffer.from(bytes));
        contentOf(node);
        if (node.tag & 0x20) childrenOf(node);
        else readString(node);
      } catch (err) {
        assert.equal((err as Error).name, 'InvalidInputError');
      }
    }),
  );
});
