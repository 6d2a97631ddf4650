import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import type { Config } from '../config/schema.ts';
import { UnavailableError } from '../errors.ts';
import { apiServerAddresses, gatherValidationInput } from './gather.ts';

test('the API server is resolved when it is a name, not when it is an address', async () => {
  const resolve = async (host: string) => (host === 'api.c.example.com' ? ['10.0.0.9', '10.0.0.10'] : []);
  assert.deepEqual(await apiServerAddresses('https://api.c.example.com', resolve), {
    host: 'api.c.example.com',
    addresses: ['10.0.0.9', '10.0.0.10'],
  });
  assert.equal(await apiServerAddresses('https://127.0.0.1:6443', resolve), undefined);
  assert.equal(await apiServerAddresses('https://[::1]:6443', resolve), undefined);
  const local = await apiServerAddresses('https://localhost:6443');
  assert.ok(
    local?.addresses.some((a) => a === '127.0.0.1' || a === '::1'),
    JSON.stringify(local),
  );
});

test('a name that does not resolve is an outage with the reason', async () => {
  const failing = async () => {
    throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
  };
  await assert.rejects(
    apiServerAddresses('https://api.c.example.com', failing),
    (err) =>
      err instanceof UnavailableError &&
      err.message === 'cannot resolve the API server name api.c.example.com: ENOTFOUND',
  );
});

test('on the placeholder, validation reads nothing else: not the state store, the cloud or the API', async () => {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [{ name: 'c', server: 'https://api.c.example.com' }],
    users: [{ name: 'u' }],
    contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
    currentContext: 'c',
  });
  // A state store and a cloud that cannot be reached: touching either would fail the call.
  const config = {
    clusterName: 'c.example.com',
    cloud: 'aws',
    configBase: 's3://no-such-bucket/c',
  } as Config;
  const input = await gatherValidationInput({
    config,
    kubeConfig,
    resolve: async () => ['203.0.113.123'],
    cloud: { aws: { endpoint: 'http://127.0.0.1:9' } },
  });
  assert.deepEqual(input, {
    apiServer: { host: 'api.c.example.com', addresses: ['203.0.113.123'] },
    instanceGroups: [],
    cloudGroups: [],
    nodes: [],
    pods: [],
  });
});
