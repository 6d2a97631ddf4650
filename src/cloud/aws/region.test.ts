import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { ConfigError } from '../../errors.ts';
import { regionFromImds, resolveRegion } from './region.ts';

/** A minimal IMDSv2: a token from PUT, the region only for a request that presents it. */
function startImds(region: string): Promise<{ server: Server; endpoint: string; requests: string[] }> {
  const requests: string[] = [];
  const server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    if (
      req.method === 'PUT' &&
      req.url === '/latest/api/token' &&
      req.headers['x-aws-ec2-metadata-token-ttl-seconds']
    ) {
      res.end('token-1');
    } else if (
      req.url === '/latest/meta-data/placement/region' &&
      req.headers['x-aws-ec2-metadata-token'] === 'token-1'
    ) {
      res.end(region);
    } else {
      res.writeHead(401).end();
    }
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      resolve({ server, endpoint: `http://127.0.0.1:${port}`, requests });
    }),
  );
}

describe('AWS region', () => {
  let imds: Awaited<ReturnType<typeof startImds>>;
  let bogus: Awaited<ReturnType<typeof startImds>>;
  before(async () => {
    imds = await startImds('eu-west-3');
    bogus = await startImds('<html>');
  });
  after(() => {
    imds.server.close();
    bogus.server.close();
  });

  it('uses the configured region without asking IMDS', async () => {
    assert.equal(await resolveRegion('ap-southeast-2', { endpoint: imds.endpoint }), 'ap-southeast-2');
    assert.deepEqual(imds.requests, []);
  });

  it('asks IMDSv2 (token first) when no region is configured', async () => {
    assert.equal(await resolveRegion(undefined, { endpoint: imds.endpoint }), 'eu-west-3');
    assert.deepEqual(imds.requests, ['PUT /latest/api/token', 'GET /latest/meta-data/placement/region']);
  });

  it('fails fast with a clear configuration error off EC2', async () => {
    // Port 9 on loopback: nothing listens, the connection is refused at once.
    await assert.rejects(
      regionFromImds({ endpoint: 'http://127.0.0.1:9', timeoutMs: 200 }),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, /set server\.provider\.aws\.Region/);
        return true;
      },
    );
  });

  it('rejects a malformed region from IMDS or the configuration', async () => {
    await assert.rejects(regionFromImds({ endpoint: bogus.endpoint }), /invalid region/);
    await assert.rejects(resolveRegion('US East'), ConfigError);
  });
});
