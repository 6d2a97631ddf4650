import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { configSchema } from '../config/schema.ts';
import { csrInformer, nodeInformer } from '../kube/shared-informer.ts';
import { buildLeaderComponents } from './leader-components.ts';

const kubeConfig = new KubeConfig();
kubeConfig.loadFromOptions({
  clusters: [{ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: false }],
  users: [{ name: 'u', token: 't' }],
  contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
  currentContext: 'x',
});

function build(config: Record<string, unknown>, registry = new Registry()) {
  return buildLeaderComponents({
    config: configSchema.parse({ clusterName: 'c.example.com', ...config }),
    kubeConfig,
    nodes: nodeInformer(kubeConfig),
    csrs: csrInformer(kubeConfig),
    vfsOptions: { env: {} },
    registry,
  });
}

describe('buildLeaderComponents', () => {
  test('a config with a state store and a supported cloud runs the NodeController, CSR approver and validation metrics', async () => {
    const built = await build({ cloud: 'metal', configBase: 'memfs://leader/c.example.com' });
    assert.deepEqual(
      built.components.map((c) => c.name),
      ['node-controller', 'csr-approver', 'validation-metrics'],
    );
    built.close();
  });

  test("the cloud's clients count their calls on the controller's registry", async () => {
    const registry = new Registry();
    const built = await build({ cloud: 'metal', configBase: 'memfs://leader/c.example.com' }, registry);
    assert.ok(registry.getSingleMetric('kops_controller_cloud_requests_total'));
    assert.ok(registry.getSingleMetric('kops_controller_cloud_request_duration_seconds'));
    built.close();
  });

  test('csrApprover.enabled: false leaves kubelet CSRs to others', async () => {
    const built = await build({
      cloud: 'metal',
      configBase: 'memfs://leader/c.example.com',
      csrApprover: { enabled: false },
    });
    assert.deepEqual(
      built.components.map((c) => c.name),
      ['node-controller', 'validation-metrics'],
    );
    built.close();
  });

  test('without configBase no NodeController runs', async () => {
    // Every cloud the config accepts identifies nodes now (src/cloud/from-config.ts identifyingClouds).
    assert.deepEqual((await build({ cloud: 'metal' })).components, []);
  });
});
