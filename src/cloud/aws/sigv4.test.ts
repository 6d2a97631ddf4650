import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { verifySigV4 } from '../../sim/aws/sigv4-verify.ts';
import {
  canonicalRequest,
  computeSignature,
  formatAmzDate,
  parseAmzDate,
  parseSigV4,
  SigV4Error,
  type SigV4Request,
  signSigV4,
} from './sigv4.ts';

// The public AWS SigV4 test-suite credentials and the `get-vanilla` case.
const suiteCredentials = {
  accessKeyId: 'AKIDEXAMPLE',
  secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
};
const suiteTime = new Date('2015-08-30T12:36:00Z');
const getVanilla: SigV4Request = {
  method: 'GET',
  url: '/',
  headers: {
    host: 'example.amazonaws.com',
    'x-amz-date': '20150830T123600Z',
    authorization:
      'AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, ' +
      'SignedHeaders=host;x-amz-date, ' +
      'Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31',
  },
  body: '',
};
const lookupSuite = (id: string) => (id === suiteCredentials.accessKeyId ? suiteCredentials : undefined);

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof SigV4Error, `expected a SigV4Error, got ${String(err)}`);
    return err.awsCode;
  }
  assert.fail('expected the verification to fail');
}

describe('SigV4', () => {
  it('verifies the get-vanilla case of the AWS test suite', () => {
    const claims = verifySigV4(getVanilla, { lookupSecret: lookupSuite, now: () => suiteTime });
    assert.deepEqual(claims.scope, {
      accessKeyId: 'AKIDEXAMPLE',
      date: '20150830',
      region: 'us-east-1',
      service: 'service',
    });
    assert.deepEqual(claims.signedHeaders, ['host', 'x-amz-date']);
  });

  it('builds the canonical request of the suite, query parameters sorted and encoded', () => {
    const canonical = canonicalRequest(
      { ...getVanilla, url: '/example%20space/?Param2=value2&Param1=value%201' },
      ['host', 'x-amz-date'],
      false,
    );
    assert.equal(
      canonical,
      'GET\n/example%20space/\nParam1=value%201&Param2=value2\nhost:example.amazonaws.com\n' +
        'x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n' +
        'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    );
  });

  it('signs exactly as the suite does', () => {
    const headers = signSigV4(
      { method: 'GET', url: '/', headers: { host: 'example.amazonaws.com' }, body: '' },
      suiteCredentials,
      { region: 'us-east-1', service: 'service', now: suiteTime },
    );
    assert.equal(headers['authorization'], getVanilla.headers['authorization']);
  });

  it('rejects a wrong secret key with SignatureDoesNotMatch', () => {
    const wrong = { ...suiteCredentials, secretAccessKey: 'not-the-key' };
    assert.equal(
      codeOf(() => verifySigV4(getVanilla, { lookupSecret: () => wrong, now: () => suiteTime })),
      'SignatureDoesNotMatch',
    );
  });

  it('rejects an unknown access key with InvalidClientTokenId', () => {
    assert.equal(
      codeOf(() => verifySigV4(getVanilla, { lookupSecret: () => undefined, now: () => suiteTime })),
      'InvalidClientTokenId',
    );
  });

  it('rejects a date more than 15 minutes old or ahead', () => {
    const later = new Date(suiteTime.getTime() + 16 * 60_000);
    const earlier = new Date(suiteTime.getTime() - 16 * 60_000);
    assert.equal(
      codeOf(() => verifySigV4(getVanilla, { lookupSecret: lookupSuite, now: () => later })),
      'SignatureDoesNotMatch',
    );
    assert.equal(
      codeOf(() => verifySigV4(getVanilla, { lookupSecret: lookupSuite, now: () => earlier })),
      'SignatureDoesNotMatch',
    );
    const within = new Date(suiteTime.getTime() + 14 * 60_000);
    assert.ok(verifySigV4(getVanilla, { lookupSecret: lookupSuite, now: () => within }));
  });

  it('rejects an altered signed header and an altered body', () => {
    const request: SigV4Request = {
      method: 'POST',
      url: '/',
      headers: { host: 'sts.amazonaws.com', 'x-kops-request-sha': 'abc' },
      body: 'Action=GetCallerIdentity&Version=2011-06-15',
    };
    const signed = {
      ...request,
      headers: {
        ...request.headers,
        ...signSigV4(request, suiteCredentials, { region: 'us-east-1', service: 'sts', now: suiteTime }),
      },
    };
    assert.ok(verifySigV4(signed, { lookupSecret: lookupSuite, now: () => suiteTime }));
    const altered = { ...signed, headers: { ...signed.headers, 'x-kops-request-sha': 'xyz' } };
    assert.equal(
      codeOf(() => verifySigV4(altered, { lookupSecret: lookupSuite, now: () => suiteTime })),
      'SignatureDoesNotMatch',
    );
    const otherBody = { ...signed, body: 'Action=GetCallerIdentity&Version=2011-06-16' };
    assert.equal(
      codeOf(() => verifySigV4(otherBody, { lookupSecret: lookupSuite, now: () => suiteTime })),
      'SignatureDoesNotMatch',
    );
    const { 'x-kops-request-sha': _, ...withoutHeader } = signed.headers;
    assert.equal(
      codeOf(() =>
        verifySigV4(
          { ...signed, headers: withoutHeader },
          { lookupSecret: lookupSuite, now: () => suiteTime },
        ),
      ),
      'SignatureDoesNotMatch',
    );
  });

  it("refuses a declared payload hash that is not the body's", () => {
    const body = 'Action=GetCallerIdentity&Version=2011-06-15';
    const request: SigV4Request = {
      method: 'POST',
      url: '/',
      headers: { host: 'sts.amazonaws.com', 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' },
      body,
    };
    const signed = {
      ...request,
      headers: {
        ...request.headers,
        ...signSigV4(request, suiteCredentials, { region: 'us-east-1', service: 'sts', now: suiteTime }),
      },
    };
    assert.equal(
      codeOf(() => verifySigV4(signed, { lookupSecret: lookupSuite, now: () => suiteTime })),
      'SignatureDoesNotMatch',
    );
  });

  it('requires the session token of temporary credentials', () => {
    const temporary = { ...suiteCredentials, sessionToken: 'session-1' };
    const request: SigV4Request = { method: 'GET', url: '/', headers: { host: 'h' }, body: '' };
    const signed = {
      ...request,
      headers: {
        ...request.headers,
        ...signSigV4(request, temporary, { region: 'r', service: 's', now: suiteTime }),
      },
    };
    assert.ok(verifySigV4(signed, { lookupSecret: () => temporary, now: () => suiteTime }));
    const withoutToken = { ...signed, headers: { ...signed.headers, 'x-amz-security-token': undefined } };
    assert.equal(
      codeOf(() => verifySigV4(withoutToken, { lookupSecret: () => temporary, now: () => suiteTime })),
      'SignatureDoesNotMatch',
    );
    assert.equal(
      codeOf(() =>
        verifySigV4(signed, {
          lookupSecret: () => ({ ...temporary, sessionToken: 'other' }),
          now: () => suiteTime,
        }),
      ),
      'InvalidClientTokenId',
    );
  });

  it('rejects a request scoped to another region or service', () => {
    const options = { lookupSecret: lookupSuite, now: () => suiteTime };
    assert.equal(
      codeOf(() => verifySigV4(getVanilla, { ...options, region: 'eu-west-1' })),
      'SignatureDoesNotMatch',
    );
    assert.equal(
      codeOf(() => verifySigV4(getVanilla, { ...options, service: 'sts' })),
      'SignatureDoesNotMatch',
    );
  });

  it('tells a missing signature from a malformed one', () => {
    const bare: SigV4Request = { method: 'GET', url: '/', headers: { host: 'h' }, body: '' };
    assert.equal(
      codeOf(() => parseSigV4(bare)),
      'MissingAuthenticationToken',
    );
    const basic = { ...bare, headers: { ...bare.headers, authorization: 'Basic abc' } };
    assert.equal(
      codeOf(() => parseSigV4(basic)),
      'IncompleteSignature',
    );
    const partial = {
      ...bare,
      headers: { ...bare.headers, authorization: 'AWS4-HMAC-SHA256 Credential=a/b' },
    };
    assert.equal(
      codeOf(() => parseSigV4(partial)),
      'IncompleteSignature',
    );
    assert.equal(
      codeOf(() => parseSigV4({ ...bare, url: '/?X-Amz-Signature=ab' })),
      'IncompleteSignature',
    );
  });

  it('verifies presigned URLs and their expiry', () => {
    const query =
      'Action=GetCallerIdentity&Version=2011-06-15&X-Amz-Algorithm=AWS4-HMAC-SHA256' +
      '&X-Amz-Credential=AKIDEXAMPLE%2F20150830%2Fus-east-1%2Fsts%2Faws4_request' +
      '&X-Amz-Date=20150830T123600Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host';
    const unsigned: SigV4Request = {
      method: 'GET',
      url: `/?${query}`,
      headers: { host: 'sts.amazonaws.com' },
      body: '',
    };
    const claims = parseSigV4({ ...unsigned, url: `${unsigned.url}&X-Amz-Signature=00` });
    const signature = computeSignature(
      canonicalRequest(unsigned, ['host'], true),
      '20150830T123600Z',
      claims.scope,
      suiteCredentials.secretAccessKey,
    );
    const presigned = { ...unsigned, url: `${unsigned.url}&X-Amz-Signature=${signature}` };
    assert.equal(verifySigV4(presigned, { lookupSecret: lookupSuite, now: () => suiteTime }).presigned, true);
    const late = new Date(suiteTime.getTime() + 61_000);
    assert.equal(
      codeOf(() => verifySigV4(presigned, { lookupSecret: lookupSuite, now: () => late })),
      'SignatureDoesNotMatch',
    );
  });

  it('round-trips the date format', () => {
    assert.equal(formatAmzDate(suiteTime), '20150830T123600Z');
    assert.equal(parseAmzDate('20150830T123600Z')?.getTime(), suiteTime.getTime());
    assert.equal(parseAmzDate('2015-08-30'), undefined);
  });
});
