import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { cloudCallMetrics } from '../../cloud/metrics.ts';
import { parseConfig } from '../../config/loader.ts';
import { ConfigError } from '../../errors.ts';
import { makeClients } from '../../kube/client.ts';
import { createCa } from '../../pki/ca.ts';
import { startApiServer } from '../../sim/apiserver/index.ts';
import { startAwsSimulator } from '../../sim/aws/server.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import { ConfigMapReplayGuard, MemoryReplayGuard } from '../replay-guard.ts';
import { buildPolicies } from './build.ts';
import { policyDepsFromConfig, policyNamesOf } from './deps.ts';

test('a queue-only chain needs no cloud and no apiserver', async () => {
  const config = parseConfig({
    clusterName: 'c',
    cloud: 'aws',
    bootstrap: { policies: [{ name: 'queue' }] },
  });
  const { deps, close } = await policyDepsFromConfig({ config });
  assert.equal(deps.aws, undefined);
  assert.equal(deps.tokens, undefined);
  assert.ok(deps.replayGuard instanceof MemoryReplayGuard);
  close();
});

test('the kops aws default gets the account from STS (counted) and builds against the simulator', async () => {
  const sim = await startAwsSimulator({ throttling: false });
  try {
    const config = parseConfig({
      clusterName: 'c.example.com',
      cloud: 'aws',
      server: { provider: { aws: { nodesRoles: ['nodes.c.example.com'], Region: sim.region } } },
    });
    const registry = new Registry();
    const { deps, close } = await policyDepsFromConfig({
      config,
      cloud: { aws: { endpoint: sim.endpoint, credentials: sim.credentials } },
      cloudCalls: cloudCallMetrics(registry),
      ca: createCa(),
    });
    try {
      assert.deepEqual(await cloudRequests(registry), { 'aws GetCallerIdentity ok': 1 });
      assert.ok(deps.cloudCalls, 'the policies count their own calls on the same recorder');
      assert.equal(deps.aws?.account, sim.account);
      assert.equal(deps.aws?.partition, 'aws');
      assert.deepEqual(
        (await buildPolicies(config, deps)).map((p) => p.name),
        ['aws', 'renewal'],
      );
    } finally {
      close();
    }
  } finally {
    await sim.close();
  }
});

test('with an apiserver: tokens for bootstrap-token and metal, replay markers in the configured namespace', async () => {
  const api = await startApiServer();
  try {
    const core = makeClients(api.kubeConfig()).core;
    const config = parseConfig({
      clusterName: 'c',
      cloud: 'metal',
      bootstrap: { policies: [{ name: 'bootstrap-token' }], replayNamespace: 'kops-system' },
    });
    const { deps } = await policyDepsFromConfig({ config, core });
    assert.ok(deps.tokens);
    assert.ok(deps.replayGuard instanceof ConfigMapReplayGuard);
  } finally {
    await api.close();
  }
});

test('metal without a state store, pki-tpm without the API server are configuration errors; webhook verifiers count as used', async () => {
  const config = parseConfig({
    clusterName: 'c',
    cloud: 'metal',
    bootstrap: { policies: [{ name: 'metal' }] },
  });
  await assert.rejects(policyDepsFromConfig({ config }), ConfigError);
  await assert.rejects(
    policyDepsFromConfig({ config: parseConfig({ clusterName: 'c', cloud: 'metal', server: { pki: {} } }) }),
    /pki-tpm needs the Kubernetes API/,
  );
  const webhook = parseConfig({
    clusterName: 'c',
    cloud: 'aws',
    bootstrap: {
      policies: [
        { name: 'webhook', url: 'https://h/', caFile: 'a', certFile: 'b', keyFile: 'c', verifiedBy: 'metal' },
      ],
    },
  });
  assert.deepEqual([...policyNamesOf(webhook)], ['webhook', 'metal']);
});
