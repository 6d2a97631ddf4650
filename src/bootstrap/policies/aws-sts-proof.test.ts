import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { signAwsStsProof } from '../../agent/aws-proof.ts';
import { signSigV4 } from '../../cloud/aws/sigv4.ts';
import { stsHost } from '../../cloud/aws/sts-host.ts';
import { UnauthenticatedError } from '../../errors.ts';
import { getCallerIdentityBody, kopsRequestSha } from '../../protocol/aws-sts-proof.ts';
import { parseStsProof } from './aws-sts-proof.ts';

const credentials = { accessKeyId: 'ASIAEXAMPLE', secretAccessKey: 'secret', sessionToken: 'session' };
const host = stsHost('us-east-1');
const body = Buffer.from('{"apiVersion":"x"}');
const at = new Date('2026-03-01T12:00:00Z');

function tokenOf(header: string): string {
  return header.slice(header.indexOf(' ') + 1);
}

function encode(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64');
}

function decode(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token, 'base64').toString());
}

test('a v1 proof parses into the POST to replay, with the signed Host', () => {
  const parsed = parseStsProof(
    1,
    tokenOf(signAwsStsProof(body, credentials, 'us-east-1', 1, { now: at })),
    body,
    host,
  );
  assert.equal(parsed.request.method, 'POST');
  assert.equal(parsed.request.body, getCallerIdentityBody);
  assert.deepEqual(parsed.request.headers['host'], [host]);
  assert.equal(parsed.request.headers['content-length'], undefined, 'the sender sets the length');
  assert.ok(parsed.claims.signedHeaders.includes('x-kops-request-sha'));
});

test('proofs of the ISO and sovereign partitions, and FIPS ones, are for their own STS hosts: read where the signer and the server agree, refused where they do not', () => {
  for (const version of [1, 2] as const) {
    const iso = tokenOf(
      signAwsStsProof(body, credentials, 'us-iso-east-1', version, { now: at, fips: false }),
    );
    const parsed = parseStsProof(version, iso, body, 'sts.us-iso-east-1.c2s.ic.gov');
    assert.deepEqual(parsed.request.headers['host'], ['sts.us-iso-east-1.c2s.ic.gov']);
    const fips = tokenOf(signAwsStsProof(body, credentials, 'us-east-1', version, { now: at, fips: true }));
    assert.ok(parseStsProof(version, fips, body, stsHost('us-east-1', { fips: true })));
    // A v2 proof names its host, refused here; a v1 proof does not carry it (as kops' v1), and its
    // signature over the FIPS host is what STS refuses when the server replays it to its own host.
    if (version === 2) assert.throws(() => parseStsProof(version, fips, body, host), UnauthenticatedError);
  }
});

test('a v2 proof parses into the presigned GET', () => {
  const parsed = parseStsProof(
    2,
    tokenOf(signAwsStsProof(body, credentials, 'us-east-1', 2, { now: at })),
    body,
    host,
  );
  assert.equal(parsed.request.method, 'GET');
  assert.match(parsed.request.url, /^\/\?Action=GetCallerIdentity&/);
  assert.equal(parsed.claims.presigned, true);
});

test('attack: a proof for another body is refused, in both versions', () => {
  for (const version of [1, 2] as const) {
    const token = tokenOf(signAwsStsProof('{"other":1}', credentials, 'us-east-1', version, { now: at }));
    assert.throws(() => parseStsProof(version, token, body, host), /signed for another request/);
  }
});

test('attack: X-Kops-Request-Sha present but not signed is refused', () => {
  const headers = { host, 'content-type': 'application/x-www-form-urlencoded; charset=utf-8' };
  const signed = signSigV4({ method: 'POST', url: '/', headers, body: getCallerIdentityBody }, credentials, {
    region: 'us-east-1',
    service: 'sts',
    now: at,
  });
  const token = encode({
    Authorization: [signed['authorization']],
    'X-Amz-Date': [signed['x-amz-date']],
    'X-Amz-Security-Token': [signed['x-amz-security-token']],
    'Content-Type': [headers['content-type']],
    'X-Kops-Request-Sha': [kopsRequestSha(body)],
  });
  assert.throws(() => parseStsProof(1, token, body, host), /not among the signed headers/);
});

test('attack: another host, plain http, another path or action, or a second Action are refused', () => {
  const v1 = decode(tokenOf(signAwsStsProof(body, credentials, 'us-east-1', 1, { now: at })));
  assert.throws(
    () => parseStsProof(1, encode({ ...v1, Host: ['evil.example.com'] }), body, host),
    /names host "evil\.example\.com", not sts\.us-east-1\.amazonaws\.com/,
  );
  const v2 = decode(tokenOf(signAwsStsProof(body, credentials, 'us-east-1', 2, { now: at })));
  const url = v2['url'] as string;
  const cases: [string, RegExp][] = [
    [url.replace('https://', 'http://'), /not https/],
    [url.replace(host, 'sts.evil.example.com'), /names host/],
    [url.replace('/?', '/x?'), /not the STS root path/],
    [url.replace('Action=GetCallerIdentity', 'Action=AssumeRole'), /exactly one Action=GetCallerIdentity/],
    [`${url}&Action=GetCallerIdentity`, /exactly one Action=GetCallerIdentity/],
    [url.replace(`${host}/?`, `${host}?`), /does not start with/],
    [url.replace('https://', 'https://user@'), /not the STS root path|names host/],
  ];
  for (const [bad, message] of cases) {
    assert.throws(() => parseStsProof(2, encode({ ...v2, url: bad }), body, host), message);
  }
  assert.throws(() => parseStsProof(2, encode({ ...v2, method: 'POST' }), body, host), /method is not GET/);
});

test('connection headers and line breaks are refused', () => {
  const v1 = decode(tokenOf(signAwsStsProof(body, credentials, 'us-east-1', 1, { now: at })));
  assert.throws(
    () => parseStsProof(1, encode({ ...v1, 'Transfer-Encoding': ['chunked'] }), body, host),
    /may not be part/,
  );
  assert.throws(() => parseStsProof(1, encode({ ...v1, 'X-Extra': ['a\r\nb'] }), body, host), /line break/);
  for (const value of ['a\u0001b', 'a\u0100b', 'a\u007fb']) {
    assert.throws(
      () => parseStsProof(1, encode({ ...v1, 'X-Extra': [value] }), body, host),
      /another character HTTP does not allow/,
    );
  }
  const v2 = decode(tokenOf(signAwsStsProof(body, credentials, 'us-east-1', 2, { now: at })));
  for (const smuggled of [' HTTP/1.1', '\tx', '\u0001']) {
    const url = `${v2['url'] as string}&x=${smuggled}`;
    assert.throws(() => parseStsProof(2, encode({ ...v2, url }), body, host), /spaces or control characters/);
  }
});

test('attack: a v2 proof with a body length (to smuggle a request onto a shared STS connection) is refused', () => {
  const v2 = decode(tokenOf(signAwsStsProof(body, credentials, 'us-east-1', 2, { now: at })));
  const withLength = (value: string) => ({
    ...v2,
    headers: { ...(v2['headers'] as object), 'Content-Length': [value] },
  });
  assert.throws(
    () => parseStsProof(2, encode(withLength('100')), body, host),
    /Content-Length does not fit a GET/,
  );
  const parsed = parseStsProof(2, encode(withLength('0')), body, host);
  assert.equal(parsed.request.headers['content-length'], undefined, 'the sender sets the length');
});

test("attack: the proof's unverified fields are quoted and cut in its refusal, never repeated in full", () => {
  const long = (prefix: string) => `${prefix}${'\u00e9'.repeat(5000)}`;
  const v1 = decode(tokenOf(signAwsStsProof(body, credentials, 'us-east-1', 1, { now: at })));
  const v2 = decode(tokenOf(signAwsStsProof(body, credentials, 'us-east-1', 2, { now: at })));
  // Signed for another service, with the binding STS would otherwise accept.
  const headers = { host, 'x-kops-request-sha': kopsRequestSha(body) };
  const signed = signSigV4({ method: 'POST', url: '/', headers, body: getCallerIdentityBody }, credentials, {
    region: 'us-east-1',
    service: long('sqs'),
    now: at,
  });
  const otherService = encode({
    Authorization: [signed['authorization']],
    'X-Amz-Date': [signed['x-amz-date']],
    'X-Kops-Request-Sha': [headers['x-kops-request-sha']],
  });
  const cases: [1 | 2, string, RegExp][] = [
    [1, encode({ ...v1, Host: [long('evil')] }), /names host "evilé+"… \(5004 characters\), not sts\./],
    [
      2,
      encode({ ...v2, url: (v2['url'] as string).replace(host, `${'a'.repeat(5000)}.example`) }),
      /its url names host "a+"… \(5008 characters\), not sts\./,
    ],
    [1, encode({ ...v1, [long('X-')]: ['v'] }), /header name "X-é+"… \(5002 characters\) is invalid/],
    [1, otherService, /signed for service "sqsé+"… \(5003 characters\), not sts/],
  ];
  for (const [version, token, message] of cases) {
    assert.throws(
      () => parseStsProof(version, token, body, host),
      (err: Error) => {
        assert.match(err.message, message);
        assert.ok(err.message.length < 250, `${err.message.length} characters: ${err.message.slice(0, 200)}`);
        return true;
      },
    );
  }
});

test('property: arbitrary and mutated tokens fail only with UnauthenticatedError', () => {
  const good = tokenOf(signAwsStsProof(body, credentials, 'us-east-1', 1, { now: at }));
  fc.assert(
    fc.property(
      fc.oneof(
        fc.string(),
        fc.base64String(),
        fc.json().map((j) => Buffer.from(j).toString('base64')),
        fc
          .tuple(fc.nat(good.length - 1), fc.constantFrom('A', '/', '=', '!'))
          .map(([i, c]) => good.slice(0, i) + c + good.slice(i + 1)),
      ),
      fc.constantFrom(1 as const, 2 as const),
      (token, version) => {
        try {
          parseStsProof(version, token, body, host);
        } catch (err) {
          assert.ok(err instanceof UnauthenticatedError, String(err));
        }
      },
    ),
    { numRuns: 2000 },
  );
});
