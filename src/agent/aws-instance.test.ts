import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { holdPort } from '../net/testing.ts';
import { awsInstanceId } from './aws-instance.ts';
import { type FakeImds, startFakeImds } from './imds.test-support.ts';

describe('awsInstanceId', () => {
  let imds: FakeImds;
  before(async () => {
    imds = await startFakeImds({ instanceId: 'i-0123456789abcdef0' });
  });
  after(() => imds.close());

  test('reads the instance id from IMDSv2: a session token first, then the id with it', async () => {
    imds.requests.length = 0;
    assert.equal(await awsInstanceId({ endpoint: imds.url }), 'i-0123456789abcdef0');
    assert.deepEqual(imds.requests, ['PUT /latest/api/token', 'GET /latest/meta-data/instance-id']);
  });

  test('AWS_EC2_METADATA_SERVICE_ENDPOINT names the service, as for the AWS SDK', async () => {
    const saved = process.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'];
    process.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'] = `${imds.url}/`;
    try {
      assert.equal(await awsInstanceId(), 'i-0123456789abcdef0');
    } finally {
      if (saved === undefined) delete process.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'];
      else process.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'] = saved;
    }
  });

  test('a service that fails, refuses the token or cannot be reached is a fault to retry', async () => {
    imds.fail('token', 1);
    await assert.rejects(awsInstanceId({ endpoint: imds.url }), {
      kind: 'unavailable',
      message: /^the metadata service answered 503 for an IMDSv2 session token/,
    });
    imds.fail('instance-id', 1);
    await assert.rejects(awsInstanceId({ endpoint: imds.url }), {
      kind: 'unavailable',
      message: /^the metadata service answered 503 for the EC2 instance id/,
    });
    const closed = await holdPort();
    await closed.release();
    await assert.rejects(awsInstanceId({ endpoint: `http://127.0.0.1:${closed.port}` }), {
      kind: 'unavailable',
      message: new RegExp(
        `^cannot read an IMDSv2 session token from the metadata service at http://127\\.0\\.0\\.1:${closed.port}`,
      ),
    });
  });

  test('an answer that is not an instance id is a final error naming it', async () => {
    const other = await startFakeImds({ instanceId: '<html>captive portal</html>' });
    try {
      await assert.rejects(awsInstanceId({ endpoint: other.url }), {
        kind: 'invalid',
        message:
          /the EC2 instance id "<html>captive portal<\/html>" is not one; is this a server of that cloud\?/,
      });
    } finally {
      await other.close();
    }
  });
});
