import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InvalidInputError } from '../../errors.ts';
import { formatAwsProviderID, parseAwsProviderID } from './providerid.ts';

describe('parseAwsProviderID', () => {
  it('parses aws:///<zone>/<id> with short and long ids and local zones', () => {
    assert.deepEqual(parseAwsProviderID('aws:///us-east-1a/i-0123456789abcdef0'), {
      zone: 'us-east-1a',
      instanceId: 'i-0123456789abcdef0',
    });
    assert.deepEqual(parseAwsProviderID('aws:///us-west-2-lax-1a/i-0a1b2c3d'), {
      zone: 'us-west-2-lax-1a',
      instanceId: 'i-0a1b2c3d',
    });
  });

  it('round-trips with formatAwsProviderID', () => {
    const id = formatAwsProviderID('eu-west-1b', 'i-0123456789abcdef0');
    assert.equal(id, 'aws:///eu-west-1b/i-0123456789abcdef0');
    assert.deepEqual(parseAwsProviderID(id), { zone: 'eu-west-1b', instanceId: 'i-0123456789abcdef0' });
  });

  const malformed: [string, RegExp][] = [
    ['', /has no providerID/],
    ['gce://project/us-central1-a/node-1', /not an AWS providerID/],
    ['aws://us-east-1a/i-0123456789abcdef0', /three slashes/],
    ['aws:////i-0123456789abcdef0', /no valid availability zone/],
    ['aws:///us-east-1a/i-0123456789abcdef0/extra', /malformed/],
    ['aws:///us-east-1a/', /invalid instance id/],
    ['aws:///us-east-1a/i-XYZ', /invalid instance id/],
    ['aws:///us-east-1a/i-0123456789abcdef', /invalid instance id/],
    ['aws:///US-EAST-1A/i-0123456789abcdef0', /no valid availability zone/],
  ];
  for (const [providerID, message] of malformed) {
    it(`rejects ${JSON.stringify(providerID)} with a clear message`, () => {
      assert.throws(
        () => parseAwsProviderID(providerID),
        (err: unknown) => {
          assert.ok(err instanceof InvalidInputError);
          assert.match(err.message, message);
          return true;
        },
      );
    });
  }
});
