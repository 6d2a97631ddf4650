import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Hash } from '@smithy/core/serde';
import { SignatureV4 } from '@smithy/signature-v4';
import { uriEncode } from '../cloud/aws/sigv4.ts';
import { stsHost } from '../cloud/aws/sts-host.ts';
import { UnavailableError } from '../errors.ts';
import { getCallerIdentityBody, kopsRequestSha } from '../protocol/aws-sts-proof.ts';
import { verifySigV4 } from '../sim/aws/sigv4-verify.ts';
import { awsStsProof, signAwsStsProof } from './aws-proof.ts';

const credentials = { accessKeyId: 'ASIAEXAMPLE', secretAccessKey: 'secret', sessionToken: 'session' };
const at = new Date('2026-03-01T12:00:00Z');
const lookupSecret = () => ({ secretAccessKey: 'secret', sessionToken: 'session' });
/** The AWS SDK's SHA-256 on Node (what @smithy/hash-node was; now `Hash` in @smithy/core/serde). */
const Sha256 = Hash.bind(null, 'sha256');

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

/**
 * The proof's signature, checked against an independent SigV4 implementation: the AWS SDK's own
 * signer (@smithy/signature-v4 with the SDK's Node hash). The simulated STS verifies with the same
 * canonicalisation code the node signs with (src/cloud/aws/sigv4.ts), so a canonicalisation bug
 * there (header value folding, query encoding or order, signed-header selection, the credential
 * scope) would pass every simulator test and fail only against real STS. Both proof versions, with a
 * session token that needs encoding (`+ / =`, runs of spaces) and without one.
 */
test('both proof versions sign exactly as the AWS SDK signer does (independent SigV4 check)', async () => {
  const awkward = {
    accessKeyId: 'ASIAQEXAMPLEKEY12345',
    secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
    sessionToken: 'IQoJb3JpZ2luX2VjE+/Ab==  two  spaces/end=',
  };
  const body = '{"certs":{"kubelet":"..."},"keys":{}}';
  for (const [creds, region] of [
    [awkward, 'eu-west-1'],
    [awkward, 'cn-north-1'],
    [{ accessKeyId: 'AKIAEXAMPLE', secretAccessKey: 'long-term+/=' }, 'us-east-1'],
  ] as const) {
    const host = stsHost(region);
    const sha = kopsRequestSha(body);
    const sdk = new SignatureV4({
      credentials: creds,
      region,
      service: 'sts',
      sha256: Sha256,
      applyChecksum: false,
    });
    const label = `${region}${'sessionToken' in creds ? ' with a session token' : ''}`;

    // v1: the signed POST's headers, as the SDK would send them.
    const v1 = JSON.parse(
      Buffer.from(
        signAwsStsProof(body, creds, region, 1, { now: at }).slice('x-aws-sts '.length),
        'base64',
      ).toString(),
    ) as Record<string, string[]>;
    const signed = await sdk.sign(
      {
        method: 'POST',
        protocol: 'https:',
        hostname: host,
        path: '/',
        query: {},
        headers: {
          host,
          'content-type': v1['Content-Type']?.[0] ?? '',
          'content-length': v1['Content-Length']?.[0] ?? '',
          'x-kops-request-sha': sha,
        },
        body: getCallerIdentityBody,
      },
      { signingDate: at },
    );
    const ours = Object.fromEntries(
      Object.entries(v1).map(([name, [value]]) => [name.toLowerCase(), value as string]),
    );
    const { host: _, ...theirs } = signed.headers;
    assert.deepEqual(ours, theirs, `v1 ${label}`);
    assert.match(ours['authorization'] ?? '', /SignedHeaders=content-length;content-type;host;x-amz-date;/);

    // v2: the presigned GET URL, parameter by parameter, and the one header it needs.
    const v2 = JSON.parse(
      Buffer.from(
        signAwsStsProof(body, creds, region, 2, { now: at }).slice('x-aws-sts-v2 '.length),
        'base64',
      ).toString(),
    ) as { url: string; method: string; headers: Record<string, string[]> };
    const presigned = await sdk.presign(
      {
        method: 'GET',
        protocol: 'https:',
        hostname: host,
        path: '/',
        query: { Action: 'GetCallerIdentity', Version: '2011-06-15' },
        headers: { host, 'x-kops-request-sha': sha },
      },
      { signingDate: at, expiresIn: 60 },
    );
    const url = new URL(v2.url);
    assert.equal(`${url.protocol}//${url.host}${url.pathname}`, `https://${host}/`, `v2 ${label}`);
    assert.deepEqual(Object.fromEntries(url.searchParams), presigned.query, `v2 ${label}`);
    // The query is encoded as SigV4 canonicalises it (RFC 3986: `+ / =` and spaces escaped), so the
    // URL STS receives is the one signed.
    const expectedQuery = Object.entries(presigned.query ?? {})
      .map(([k, v]) => `${uriEncode(k)}=${uriEncode(String(v))}`)
      .join('&');
    assert.deepEqual(url.search.slice(1).split('&').sort(), expectedQuery.split('&').sort(), `v2 ${label}`);
    assert.equal(v2.method, presigned.method);
    assert.deepEqual(v2.headers, { 'X-Kops-Request-Sha': [presigned.headers['x-kops-request-sha']] });
  }
});
