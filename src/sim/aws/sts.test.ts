import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { getCallerIdentity } from './sts.ts';

describe('simulated GetCallerIdentity', () => {
  it('reports the caller in the STS response shape', () => {
    const xml = getCallerIdentity({
      account: '111122223333',
      arn: 'arn:aws:iam::111122223333:user/x',
      userId: 'AIDAEXAMPLE',
    });
    assert.match(
      xml,
      /<GetCallerIdentityResponse xmlns="https:\/\/sts\.amazonaws\.com\/doc\/2011-06-15\/"><GetCallerIdentityResult><Arn>arn:aws:iam::111122223333:user\/x<\/Arn><UserId>AIDAEXAMPLE<\/UserId><Account>111122223333<\/Account><\/GetCallerIdentityResult><ResponseMetadata><RequestId>/,
    );
  });
});
