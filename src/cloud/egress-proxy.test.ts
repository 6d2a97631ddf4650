/**
 * Every client family honours the egress proxy (src/net/egress-proxy.ts): the simulators are named by
 * names only the simulated proxy knows, so a call reaches them only through a CONNECT tunnel.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { GetCallerIdentityCommand } from '@aws-sdk/client-sts';
import { OAuth2Client } from 'google-auth-library';
import { KopsError } from '../errors.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import { type AzureSimulator, startAzureSimulator } from '../sim/azure/simulator.ts';
import {
  type EgressProxySim,
  proxiedUrl,
  refuseDirectLookups,
  startEgressProxy,
} from '../sim/egress-proxy.ts';
import { type GceSimulator, startGceSimulator } from '../sim/gce/simulator.ts';
import { type S3Sim, startS3Sim } from '../sim/s3/server.ts';
import { S3Vfs } from '../statestore/s3-vfs.ts';
import { createAwsClients } from './aws/clients.ts';
import { AzureClient } from './azure/client.ts';
import { ComputeClient, googleClientOptions } from './gce/compute.ts';

let proxy: EgressProxySim;
let restoreLookups: () => void;
let aws: AwsSimulator;
let s3: S3Sim;
let gce: GceSimulator;
let azure: AzureSimulator;
const saved = { ...process.env };

before(async () => {
  restoreLookups = refuseDirectLookups();
  proxy = await startEgressProxy();
  aws = await startAwsSimulator();
  s3 = await startS3Sim({ buckets: ['state'] });
  gce = await startGceSimulator();
  azure = await startAzureSimulator({ serverNames: ['arm.proxied.test'] });
});
after(async () => {
  restoreLookups();
  await Promise.all([proxy.close(), aws.close(), s3.close(), gce.close(), azure.close()]);
});
beforeEach(() => {
  for (const name of ['HTTPS_PROXY', 'HTTP_PROXY', 'NO_PROXY']) {
    if (saved[name] === undefined) delete process.env[name];
    else process.env[name] = saved[name];
  }
  // The simulators speak http:// (S3, EC2/STS, GCE) and https:// (ARM): both go through the proxy.
  process.env['HTTPS_PROXY'] = proxy.url;
  process.env['HTTP_PROXY'] = proxy.url;
  proxy.tunnels.length = 0;
  proxy.refuse = () => false;
});

const hostOf = (url: string) => new URL(url).host;

test('AWS SDK: STS GetCallerIdentity goes through the proxy; a refused tunnel is an unavailable dependency', async () => {
  const endpoint = proxiedUrl(aws.endpoint, 'sts');
  const clients = await createAwsClients({
    region: aws.region,
    endpoint,
    credentials: aws.credentials,
    maxAttempts: 1,
  });
  try {
    const identity = await clients.sts.send(new GetCallerIdentityCommand({}));
    assert.equal(identity.Account, aws.account);
    assert.ok(proxy.tunnels.includes(hostOf(endpoint)), String(proxy.tunnels));
    proxy.refuse = () => true;
    const refused = await createAwsClients({
      region: aws.region,
      endpoint: proxiedUrl(aws.endpoint, 'sts2'),
      credentials: aws.credentials,
      maxAttempts: 1,
    });
    try {
      const err = (await refused.sts
        .send(new GetCallerIdentityCommand({}))
        .catch((e: unknown) => e)) as Error & {
        code?: string;
      };
      assert.equal(err.code, 'ERR_PROXY_TUNNEL');
      assert.match(err.message, /did not open a tunnel to sts2\.proxied\.test:\d+: .*403/);
    } finally {
      refused.destroy();
    }
  } finally {
    clients.destroy();
  }
});

test('S3 state store: reads go through the proxy; NO_PROXY by domain sends them directly', async () => {
  s3.putObject('state', 'c1/config', 'hello');
  const endpoint = proxiedUrl(s3.endpoint, 's3');
  const store = new S3Vfs(new URL('s3://state/c1'), {
    endpoint,
    region: 'us-test-1',
    credentials: s3.credentials,
  });
  assert.equal((await store.read('config')).data.toString(), 'hello');
  assert.ok(proxy.tunnels.includes(hostOf(endpoint)), String(proxy.tunnels));
  process.env['NO_PROXY'] = '.proxied.test';
  const direct = new S3Vfs(new URL('s3://state/c1'), {
    endpoint: proxiedUrl(s3.endpoint, 's3-direct'),
    region: 'us-test-1',
    credentials: s3.credentials,
    timeoutMs: 2_000,
  });
  const err = await direct.read('config').catch((e: unknown) => e);
  assert.ok(err instanceof KopsError && err.kind === 'unavailable', String(err));
  assert.equal(proxy.tunnels.filter((t) => t.startsWith('s3-direct')).length, 0);
});

test('GCE: the token endpoint and the compute API go through the proxy', async () => {
  const auth = new OAuth2Client({
    clientId: 'sim-client',
    clientSecret: 'sim-secret',
    endpoints: { oauth2TokenUrl: proxiedUrl(gce.tokenUri, 'oauth2') },
    // As defaultAuthClient builds it.
    ...googleClientOptions(),
  });
  auth.setCredentials({ refresh_token: gce.refreshToken });
  const compute = new ComputeClient({
    project: gce.world.defaultProject,
    auth,
    endpoint: proxiedUrl(gce.endpoint, 'compute'),
    retries: 0,
  });
  const err = await compute.getInstance('us-test1-a', 'absent').catch((e: unknown) => e);
  assert.ok(err instanceof KopsError && err.kind === 'not-found', String(err));
  assert.ok(proxy.tunnels.includes(hostOf(proxiedUrl(gce.endpoint, 'compute'))), String(proxy.tunnels));
  assert.ok(proxy.tunnels.includes(hostOf(proxiedUrl(gce.tokenUri, 'oauth2'))), String(proxy.tunnels));
});

test('Azure: ARM goes through the proxy (the pipeline with our agent, not its own proxy policy)', async () => {
  // A CIDR and a host in NO_PROXY that do not match: the Azure pipeline's own policy would not parse them alike.
  process.env['NO_PROXY'] = '10.0.0.0/8,other.example';
  const endpoint = proxiedUrl(azure.armEndpoint, 'arm');
  const client = new AzureClient({ ...azure.clientOptions, endpoint, maxRetries: 0 });
  try {
    assert.deepEqual(await client.listScaleSets(), []);
    assert.ok(proxy.tunnels.includes(hostOf(endpoint)), String(proxy.tunnels));
  } finally {
    client.close();
  }
});
