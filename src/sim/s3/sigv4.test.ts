import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { type SignedRequest, verifySigV4 } from './sigv4.ts';

const key = { accessKeyId: 'AKIASIMTEST', secretAccessKey: 'c2VjcmV0LWtleS1mb3ItdGVzdHM=' };

/** Captures one request exactly as the real AWS SDK signs it. */
async function sdkSignedRequest(objectKey: string): Promise<SignedRequest> {
  let captured: SignedRequest | undefined;
  const server = createServer((req, res) => {
    captured = { method: req.method ?? '', rawUrl: req.url ?? '', headers: req.headers };
    res.writeHead(200, { 'content-length': 0, etag: '"x"' }).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = new S3Client({
    region: 'us-test-1',
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    forcePathStyle: true,
    credentials: key,
  });
  await client.send(new GetObjectCommand({ Bucket: 'state', Key: objectKey }));
  server.close();
  return captured!;
}

const withHeaders = (request: SignedRequest, headers: IncomingHttpHeaders): SignedRequest => ({
  ...request,
  headers: { ...request.headers, ...headers },
});

describe('verifySigV4', async () => {
  const request = await sdkSignedRequest('cluster.example.com/instancegroup/nodes a+b');
  const signedAt = Date.parse(
    (request.headers['x-amz-date'] as string).replace(
      /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/,
      '$1-$2-$3T$4:$5:$6Z',
    ),
  );

  test('accepts what the AWS SDK signs, including escaped keys', () => {
    assert.equal(verifySigV4(request, [key], signedAt), undefined);
  });

  test('rejects an unknown key id and a wrong secret', () => {
    assert.equal(
      verifySigV4(request, [{ ...key, accessKeyId: 'AKIAOTHER' }], signedAt)?.code,
      'InvalidAccessKeyId',
    );
    assert.equal(
      verifySigV4(request, [{ ...key, secretAccessKey: 'wrong' }], signedAt)?.code,
      'SignatureDoesNotMatch',
    );
  });

  test('rejects a stale or future date', () => {
    assert.equal(verifySigV4(request, [key], signedAt + 16 * 60_000)?.code, 'RequestTimeTooSkewed');
    assert.equal(verifySigV4(request, [key], signedAt - 16 * 60_000)?.code, 'RequestTimeTooSkewed');
    assert.equal(verifySigV4(request, [key], signedAt + 60_000), undefined);
  });

  test('rejects an altered signed header, path or method', () => {
    assert.equal(
      verifySigV4(withHeaders(request, { host: 'evil.example' }), [key], signedAt)?.code,
      'SignatureDoesNotMatch',
    );
    assert.equal(
      verifySigV4({ ...request, rawUrl: request.rawUrl.replace('nodes', 'masters') }, [key], signedAt)?.code,
      'SignatureDoesNotMatch',
    );
    assert.equal(
      verifySigV4({ ...request, method: 'DELETE' }, [key], signedAt)?.code,
      'SignatureDoesNotMatch',
    );
  });

  test('rejects anonymous and malformed authorization', () => {
    const { authorization: _, ...anonymous } = request.headers;
    assert.equal(verifySigV4({ ...request, headers: anonymous }, [key], signedAt)?.code, 'AccessDenied');
    assert.equal(
      verifySigV4(withHeaders(request, { authorization: 'Bearer x' }), [key], signedAt)?.code,
      'AccessDenied',
    );
  });
});
