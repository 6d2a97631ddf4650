import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

/**
 * Runs `body` with only `vars` of the region-related AWS variables set (a missing config file for the
 * rest), so the machine's own AWS settings cannot decide a test.
 */
async function withEnvironment(vars: Record<string, string>, body: () => Promise<void>): Promise<void> {
  const names = [
    'AWS_REGION',
    'AWS_DEFAULT_REGION',
    'AWS_PROFILE',
    'AWS_CONFIG_FILE',
    'AWS_SHARED_CREDENTIALS_FILE',
  ];
  const saved = Object.fromEntries(names.map((n) => [n, process.env[n]]));
  for (const name of names) delete process.env[name];
  Object.assign(
    process.env,
    {
      AWS_CONFIG_FILE: '/nonexistent/aws-config',
      AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/aws-credentials',
    },
    vars,
  );
  try {
    await body();
  } finally {
    for (const name of names) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
  }
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

  it('asks IMDSv2 (token first) when neither the configuration nor the environment names a region', async () => {
    await withEnvironment({}, async () => {
      assert.equal(await resolveRegion(undefined, { endpoint: imds.endpoint }), 'eu-west-3');
    });
    assert.deepEqual(imds.requests, ['PUT /latest/api/token', 'GET /latest/meta-data/placement/region']);
  });

  // The AWS SDKs' order: environment and profile before the instance metadata service.
  it('takes AWS_REGION before IMDS, which it never asks', async () => {
    imds.requests.length = 0;
    await withEnvironment({ AWS_REGION: 'eu-north-1' }, async () => {
      assert.equal(await resolveRegion(undefined, { endpoint: imds.endpoint }), 'eu-north-1');
      assert.equal(await resolveRegion('', { endpoint: imds.endpoint }), 'eu-north-1');
    });
    assert.deepEqual(imds.requests, []);
  });

  it("takes the AWS profile's region before IMDS, which it never asks", async () => {
    imds.requests.length = 0;
    const dir = mkdtempSync(join(tmpdir(), 'kops-aws-profile-'));
    try {
      const file = join(dir, 'config');
      writeFileSync(file, '[default]\nregion = us-west-1\n[profile ops]\nregion = ap-south-1\n');
      await withEnvironment({ AWS_CONFIG_FILE: file, AWS_PROFILE: 'ops' }, async () => {
        assert.equal(await resolveRegion(undefined, { endpoint: imds.endpoint }), 'ap-south-1');
      });
      await withEnvironment({ AWS_CONFIG_FILE: file }, async () => {
        assert.equal(await resolveRegion(undefined, { endpoint: imds.endpoint }), 'us-west-1');
      });
      // The configuration still comes first.
      await withEnvironment({ AWS_CONFIG_FILE: file, AWS_REGION: 'eu-north-1' }, async () => {
        assert.equal(await resolveRegion('ca-central-1', { endpoint: imds.endpoint }), 'ca-central-1');
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    assert.deepEqual(imds.requests, []);
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

describe('region names', () => {
  it('every partition spells its regions so, and nothing else passes', async () => {
    const { isAwsRegionName } = await import('./region-name.ts');
    for (const name of [
      'us-east-1',
      'cn-north-1',
      'us-gov-west-1',
      'us-iso-east-1',
      'us-isob-east-1',
      'eusc-de-east-1',
    ])
      assert.equal(isAwsRegionName(name), true, name);
    for (const name of ['', 'us east 1', 'x/evil', 'US-EAST-1', 'us-east', 'east-1', 'us-east-1.evil'])
      assert.equal(isAwsRegionName(name), false, name);
  });
});
