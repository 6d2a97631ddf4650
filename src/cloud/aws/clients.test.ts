import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError } from '../../errors.ts';
import { createAwsClients } from './clients.ts';

describe('createAwsClients', () => {
  it('configures every client with the region, adaptive retries and the endpoint', async () => {
    const clients = await createAwsClients({
      region: 'eu-west-1',
      endpoint: 'http://127.0.0.1:1',
      credentials: { accessKeyId: 'AKIDTEST', secretAccessKey: 'secret' },
    });
    try {
      for (const client of [clients.ec2, clients.autoscaling, clients.sts]) {
        assert.equal(await client.config.region(), 'eu-west-1');
        assert.equal(((await client.config.retryStrategy()) as { mode?: string }).mode, 'adaptive');
        assert.equal(await client.config.maxAttempts(), 8);
      }
      assert.equal(clients.region, 'eu-west-1');
    } finally {
      clients.destroy();
    }
  });

  it('fails with a configuration error when no region is configured and IMDS is unreachable', async () => {
    await assert.rejects(
      createAwsClients({ imds: { endpoint: 'http://127.0.0.1:9', timeoutMs: 200 } }),
      ConfigError,
    );
  });
});
