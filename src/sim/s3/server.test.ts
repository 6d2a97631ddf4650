import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { GetObjectCommand, PutObjectCommand, S3Client, type S3ServiceException } from '@aws-sdk/client-s3';
import { startS3Sim } from './server.ts';

const sim = await startS3Sim({ buckets: ['b'], verifySignatures: false });
const signed = await startS3Sim({ buckets: ['b'] });
after(() => Promise.all([sim.close(), signed.close()]));

describe('S3 simulator', () => {
  test('binds loopback on an ephemeral port', () => {
    assert.match(sim.endpoint, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.notEqual(sim.endpoint, signed.endpoint);
  });

  test('PutObject, HeadObject, GetObject and DeleteObject with MD5 ETags', async () => {
    const put = await fetch(`${sim.endpoint}/b/dir/key.txt`, { method: 'PUT', body: 'hello' });
    assert.equal(put.status, 200);
    assert.equal(put.headers.get('etag'), '"5d41402abc4b2a76b9719d911017c592"');
    const head = await fetch(`${sim.endpoint}/b/dir/key.txt`, { method: 'HEAD' });
    assert.equal(head.headers.get('content-length'), '5');
    assert.equal(await (await fetch(`${sim.endpoint}/b/dir/key.txt`)).text(), 'hello');
    assert.equal((await fetch(`${sim.endpoint}/b/dir/key.txt`, { method: 'DELETE' })).status, 204);
    const gone = await fetch(`${sim.endpoint}/b/dir/key.txt`);
    assert.equal(gone.status, 404);
    assert.match(await gone.text(), /<Code>NoSuchKey<\/Code>/);
  });

  test('ListObjectsV2 filters by prefix and pages with a continuation token', async () => {
    for (const k of ['p/1', 'p/2', 'p/3', 'q/1']) sim.putObject('b', k, k);
    const first = await (await fetch(`${sim.endpoint}/b?list-type=2&prefix=p/&max-keys=2`)).text();
    assert.match(first, /<Key>p\/1<\/Key><LastModified>/);
    assert.match(first, /<IsTruncated>true<\/IsTruncated>/);
    const token = /<NextContinuationToken>([^<]+)</.exec(first)?.[1];
    const second = await (
      await fetch(`${sim.endpoint}/b?list-type=2&prefix=p/&max-keys=2&continuation-token=${token}`)
    ).text();
    assert.match(second, /<Key>p\/3<\/Key>/);
    assert.doesNotMatch(second, /q\/1/);
    assert.match(second, /<IsTruncated>false<\/IsTruncated>/);
  });

  test('a missing bucket, a failure injection and request counting', async () => {
    const missing = await fetch(`${sim.endpoint}/nope/k`);
    assert.equal(missing.status, 404);
    assert.match(await missing.text(), /NoSuchBucket/);
    sim.failNext(1);
    assert.equal((await fetch(`${sim.endpoint}/b/p/1`)).status, 503);
    assert.equal((await fetch(`${sim.endpoint}/b/p/1`)).status, 200);
    assert.ok((sim.requestCounts()['GetObject'] ?? 0) >= 3);
  });

  test('with signatures on, unsigned requests are AccessDenied and nothing is written', async () => {
    const put = await fetch(`${signed.endpoint}/b/k`, { method: 'PUT', body: 'x' });
    assert.equal(put.status, 403);
    assert.match(await put.text(), /AccessDenied/);
    assert.equal(signed.getObject('b', 'k'), undefined);
  });

  test('SDK requests signed with the right key work; a wrong secret or an unknown key is refused as S3 does', async () => {
    const client = (credentials: { accessKeyId: string; secretAccessKey: string }) =>
      new S3Client({
        region: 'us-test-1',
        endpoint: signed.endpoint,
        forcePathStyle: true,
        credentials,
        maxAttempts: 1,
      });
    const good = client({ ...signed.credentials });
    await good.send(new PutObjectCommand({ Bucket: 'b', Key: 'dir/a b+c', Body: 'v1' }));
    const got = await good.send(new GetObjectCommand({ Bucket: 'b', Key: 'dir/a b+c' }));
    assert.equal(await got.Body?.transformToString(), 'v1');
    const codeOf = async (credentials: { accessKeyId: string; secretAccessKey: string }) => {
      try {
        await client(credentials).send(new GetObjectCommand({ Bucket: 'b', Key: 'dir/a b+c' }));
        return 'accepted';
      } catch (err) {
        return (err as S3ServiceException).name;
      }
    };
    assert.equal(await codeOf({ ...signed.credentials, secretAccessKey: 'wrong' }), 'SignatureDoesNotMatch');
    assert.equal(await codeOf({ accessKeyId: 'AKIAUNKNOWN', secretAccessKey: 'x' }), 'InvalidAccessKeyId');
  });
});
