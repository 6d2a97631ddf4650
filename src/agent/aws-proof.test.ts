import assert from 'node:assert/strict';
import { test } from 'node:test';
import { UnavailableError } from '../errors.ts';
import { getCallerIdentityBody, kopsRequestSha, stsHost } from '../protocol/aws-sts-proof.ts';
import { verifySigV4 } from '../sim/aws/sigv4-verify.ts';
import { awsStsProof, signAwsStsProof } from './aws-proof.ts';

const credentials = { accessKeyId: 'ASIAEXAMPLE', secretAccessKey: 'secret', sessionToken: 'session' };
const at = new Date('2026-03-01T12:00:00Z');
const lookupSecret = () => ({ secretAccessKey: 'secret', sessionToken: 'session' });

test('v1 proof: Go http.Header JSON whose signature covers host and X-Kops-Request-Sha', () => {
  const header = signAwsStsProof('{"x":1}', credentials, 'eu-west-1', 1, { now: at });
  assert.match(header, /^x-aws-sts [A-Za-z0-9+/=]+$/);
  const headers = JSON.parse(Buffer.from(header.split(' ')[1] as string, 'base64').toString()) as Record<
    string,
    string[]
  >;
  assert.deepEqual(Object.keys(headers).sort(), [
    'Authorization',
    'Content-Length',
    'Content-Type',
    'X-Amz-Date',
    'X-Amz-Security-Token',
    'X-Kops-Request-Sha',
  ]);
  assert.deepEqual(headers['X-Kops-Request-Sha'], [kopsRequestSha('{"x":1}')]);
  const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
  const claims = verifySigV4(
    {
      method: 'POST',
      url: '/',
      headers: { ...lower, host: stsHost('eu-west-1') },
      body: getCallerIdentityBody,
    },
    { lookupSecret, now: () => at, region: 'eu-west-1', service: 'sts' },
  );
  assert.ok(claims.signedHeaders.includes('x-kops-request-sha'));
});

test('v2 proof: a presigned https GetCallerIdentity URL that verifies', () => {
  const header = signAwsStsProof('{"x":1}', credentials, 'us-east-1', 2, { now: at });
  const token = JSON.parse(Buffer.from(header.split(' ')[1] as string, 'base64').toString()) as {
    url: string;
    method: string;
    headers: Record<string, string[]>;
  };
  assert.equal(token.method, 'GET');
  const url = new URL(token.url);
  assert.equal(url.host, 'sts.us-east-1.amazonaws.com');
  assert.equal(url.searchParams.get('Action'), 'GetCallerIdentity');
  const claims = verifySigV4(
    {
      method: 'GET',
      url: token.url.slice(token.url.indexOf('/', 8)),
      headers: { host: url.host, 'x-kops-request-sha': token.headers['X-Kops-Request-Sha'] },
      body: '',
    },
    { lookupSecret, now: () => at, region: 'us-east-1', service: 'sts' },
  );
  assert.equal(claims.presigned, true);
  assert.deepEqual(claims.signedHeaders, ['host', 'x-kops-request-sha']);
});

test('instance-profile credentials that cannot be loaded yet are a fault to retry, named in one line', async () => {
  // What the SDK's chain throws at boot while IMDS does not answer (a CredentialsProviderError).
  const failing = async () => {
    throw Object.assign(new Error('Could not load credentials from any providers'), {
      name: 'CredentialsProviderError',
    });
  };
  await assert.rejects(awsStsProof(failing, 'eu-west-1', 2)(Buffer.from('{}')), (err: unknown) => {
    assert.ok(err instanceof UnavailableError, String(err));
    assert.equal(
      err.message,
      "cannot load the instance profile's AWS credentials: Could not load credentials from any providers",
    );
    return true;
  });
});

test('the proof is signed with the credentials loaded for each attempt', async () => {
  let loads = 0;
  const proof = awsStsProof(async () => ({ ...credentials, accessKeyId: `ASIA${loads++}` }), 'eu-west-1', 1);
  assert.match((await proof(Buffer.from('{}'))) ?? '', /^x-aws-sts /);
  await proof(Buffer.from('{}'));
  assert.equal(loads, 2);
});
