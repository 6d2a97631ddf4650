/**
 * Every client family honours the egress proxy (src/net/egress-proxy.ts): the simulators are named by
 * names only the simulated proxy knows, so a call reaches them only through a CONNECT tunnel.
 */
import assert from 'node:assert/strict';
import dns from 'node:dns';
import { createServer } from 'node:http';
import { after, before, beforeEach, test } from 'node:test';
import { GetCallerIdentityCommand } from '@aws-sdk/client-sts';
import { OAuth2Client } from 'google-auth-library';
import { KopsError, UnavailableError } from '../errors.ts';
import { listenOnLoopback } from '../net/loopback.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import { type BlobStorageSimulator, startBlobStorageSimulator } from '../sim/azure/blob.ts';
import { type AzureSimulator, startAzureSimulator } from '../sim/azure/simulator.ts';
import {
  type EgressProxySim,
  proxiedUrl,
  refuseDirectLookups,
  startEgressProxy,
} from '../sim/egress-proxy.ts';
import { type GceSimulator, startGceSimulator } from '../sim/gce/simulator.ts';
import { type S3Sim, startS3Sim } from '../sim/s3/server.ts';
import { AzureBlobVfs, azureBlobLocation } from '../statestore/azure-blob-vfs.ts';
import { S3Vfs } from '../statestore/s3-vfs.ts';
import { createAwsClients } from './aws/clients.ts';
import { AzureClient } from './azure/client.ts';
import { createAzureProvider } from './azure/provider.ts';
import { ComputeClient, googleClientOptions } from './gce/compute.ts';

let proxy: EgressProxySim;
let restoreLookups: () => void;
let aws: AwsSimulator;
let s3: S3Sim;
let gce: GceSimulator;
let azure: AzureSimulator;
let blob: BlobStorageSimulator;
const saved = { ...process.env };

before(async () => {
  restoreLookups = refuseDirectLookups();
  proxy = await startEgressProxy();
  aws = await startAwsSimulator();
  s3 = await startS3Sim({ buckets: ['state'] });
  gce = await startGceSimulator();
  azure = await startAzureSimulator({ serverNames: ['arm.proxied.test'] });
  blob = await startBlobStorageSimulator({ validToken: (token) => azure.validToken(token) });
  blob.createContainer('kopsstate', 'state');
});
after(async () => {
  restoreLookups();
  await Promise.all([proxy.close(), aws.close(), s3.close(), gce.close(), azure.close(), blob.close()]);
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

/** A proxy on loopback that records every request (plain or CONNECT) and refuses it. */
async function startRecordingProxy() {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    res.writeHead(502, { 'content-length': '0' }).end();
  });
  server.on('connect', (req, socket) => {
    seen.push(`CONNECT ${req.url}`);
    socket.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n');
  });
  const listener = await listenOnLoopback(server);
  return { url: listener.url, seen, close: () => listener.close() };
}

/** Sets variables; returns the function that puts them back. */
function setEnv(variables: Record<string, string>): () => void {
  const before = Object.fromEntries(Object.keys(variables).map((k) => [k, process.env[k]]));
  Object.assign(process.env, variables);
  return () => {
    for (const [k, v] of Object.entries(before)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
}

/** Makes `name` resolve to 127.0.0.1 in this process (no DNS query); returns the function that undoes it. */
function resolveToLoopback(name: string): () => void {
  const original = dns.lookup;
  const stub = function (this: unknown, hostname: string, ...rest: unknown[]) {
    if (String(hostname).toLowerCase() !== name) {
      return (original as (...args: unknown[]) => unknown).call(this, hostname, ...rest);
    }
    const callback = rest[rest.length - 1] as (err: null, address: unknown, family?: number) => void;
    const all = rest.length > 1 && (rest[0] as { all?: boolean } | null)?.all === true;
    process.nextTick(() =>
      all ? callback(null, [{ address: '127.0.0.1', family: 4 }]) : callback(null, '127.0.0.1', 4),
    );
    return {};
  };
  (dns as { lookup: unknown }).lookup = stub;
  return () => {
    (dns as { lookup: unknown }).lookup = original;
  };
}

test('Azure: the managed-identity token request to a metadata service is never proxied, whatever NO_PROXY says', async () => {
  const recorder = await startRecordingProxy();
  // The IMDS simulator named as a metadata service (metadata.google.internal, resolved here to the
  // simulator on loopback): nothing is sent to 169.254.169.254, and a proxy is never right for it.
  const imds = new URL(azure.imdsEndpoint);
  imds.hostname = 'metadata.google.internal';
  const restoreEnv = setEnv({
    HTTPS_PROXY: recorder.url,
    HTTP_PROXY: recorder.url,
    // kops' NO_PROXY on a cloud other than AWS: no 169.254.169.254.
    NO_PROXY:
      '127.0.0.1,localhost,c1.example.com,api.internal.c1.example.com,100.64.0.1,100.64.0.0/10,10.0.0.0/16',
    AZURE_TOKEN_CREDENTIALS: 'ManagedIdentityCredential',
    AZURE_POD_IDENTITY_AUTHORITY_HOST: imds.origin,
    IDENTITY_ENDPOINT: '',
    MSI_ENDPOINT: '',
    AZURE_FEDERATED_TOKEN_FILE: '',
    AZURE_CLIENT_ID: '',
  });
  const restoreName = resolveToLoopback('metadata.google.internal');
  try {
    const tokens = azure.count('imds.token');
    // ARM's credential, as the provider makes it.
    const provider = await createAzureProvider({
      clusterName: 'c1.example.com',
      subscriptionId: azure.clientOptions.subscriptionId,
      resourceGroup: azure.clientOptions.resourceGroup,
      endpoint: azure.armEndpoint,
      caPem: azure.caPem,
    });
    try {
      assert.deepEqual(await provider.client.listScaleSets(), []);
    } finally {
      provider.close();
    }
    // The state store's, as it makes it.
    const store = new AzureBlobVfs(azureBlobLocation(new URL('azureblob://kopsstate/state/c1')), {
      endpoint: blob.endpoint,
      caPem: blob.caPem,
      maxTries: 1,
    });
    await store.write('config', 'via managed identity');
    assert.equal((await store.read('config')).data.toString(), 'via managed identity');
    assert.ok(azure.count('imds.token') >= tokens + 2, 'both tokens came from the simulated IMDS');
    assert.deepEqual(recorder.seen, []);
  } finally {
    restoreName();
    restoreEnv();
    await recorder.close();
  }
});

/** The Azure Blob store at `endpoint` (path-style), with the simulated IMDS's credential. */
const blobStoreAt = (endpoint: string) =>
  new AzureBlobVfs(azureBlobLocation(new URL('azureblob://kopsstate/state/c1')), {
    endpoint,
    credential: azure.credential,
    caPem: blob.caPem,
    maxTries: 1,
    timeoutMs: 5_000,
  });

test('Azure Blob state store: NO_PROXY as Go reads it (a bare name covers its subdomains; a CIDR covers an address)', async () => {
  const port = new URL(blob.endpoint).port;
  const named = `https://blob.proxied.test:${port}`;
  // Without NO_PROXY the store asks the proxy for a tunnel.
  await blobStoreAt(named)
    .read('config')
    .catch(() => undefined);
  assert.ok(proxy.tunnels.includes(`blob.proxied.test:${port}`), String(proxy.tunnels));
  proxy.tunnels.length = 0;
  process.env['NO_PROXY'] = 'proxied.test,0.0.0.0/8';
  // Direct: the name does not resolve (refuseDirectLookups), so the store cannot be reached.
  const err = await blobStoreAt(named)
    .read('config')
    .catch((e: unknown) => e);
  assert.ok(err instanceof KopsError && err.kind === 'unavailable', String(err));
  // Direct: 0.0.0.0 is this machine (the simulator's certificate does not name it, which is fine here).
  await blobStoreAt(`https://0.0.0.0:${port}`)
    .read('config')
    .catch(() => undefined);
  assert.deepEqual(proxy.tunnels, []);
});

test('Azure Blob state store: a proxy refusing the tunnel is an unavailable dependency, not a denial', async () => {
  proxy.refuse = () => true;
  const err = await blobStoreAt(`https://blob.proxied.test:${new URL(blob.endpoint).port}`)
    .read('config')
    .catch((e: unknown) => e);
  assert.ok(err instanceof UnavailableError, String(err));
  assert.match((err as Error).message, /did not open a tunnel to blob\.proxied\.test:\d+: .*403/);
  assert.doesNotMatch((err as Error).message, /grant the controller's identity/);
});
