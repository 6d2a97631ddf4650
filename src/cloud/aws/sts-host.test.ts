import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fipsFromEnv, stsHost } from './sts-host.ts';

test("stsHost is the region's STS host in every AWS partition, as the SDKs (and so nodeup) sign for it", () => {
  const hosts = Object.fromEntries(
    ['us-east-1', 'cn-north-1', 'us-gov-west-1', 'us-iso-east-1', 'us-isob-east-1', 'eusc-de-east-1'].map(
      (region) => [region, stsHost(region)],
    ),
  );
  assert.deepEqual(hosts, {
    'us-east-1': 'sts.us-east-1.amazonaws.com',
    'cn-north-1': 'sts.cn-north-1.amazonaws.com.cn',
    'us-gov-west-1': 'sts.us-gov-west-1.amazonaws.com',
    'us-iso-east-1': 'sts.us-iso-east-1.c2s.ic.gov',
    'us-isob-east-1': 'sts.us-isob-east-1.sc2s.sgov.gov',
    'eusc-de-east-1': 'sts.eusc-de-east-1.amazonaws.eu',
  });
  // FIPS, when the environment asks for it as the SDKs read it (AWS_USE_FIPS_ENDPOINT).
  assert.equal(stsHost('us-east-1', { fips: true }), 'sts-fips.us-east-1.amazonaws.com');
});

test('a region that is none is a configuration error, never a host built of it', async () => {
  const { ConfigError } = await import('../../errors.ts');
  for (const region of ['', 'us east', 'x/evil', 'US-EAST-1']) {
    assert.throws(() => stsHost(region), ConfigError, region);
  }
});

test('AWS_USE_FIPS_ENDPOINT is read as the Go SDK kops nodeup signs with reads it: true in any case', () => {
  for (const value of ['true', 'TRUE', 'True']) {
    const fips = fipsFromEnv({ AWS_USE_FIPS_ENDPOINT: value });
    assert.equal(
      stsHost('us-east-1', { fips }),
      'sts-fips.us-east-1.amazonaws.com',
      `AWS_USE_FIPS_ENDPOINT=${value}: a Go nodeup signs for the FIPS host`,
    );
  }
  assert.equal(fipsFromEnv({ AWS_USE_FIPS_ENDPOINT: 'false' }), false);
});
