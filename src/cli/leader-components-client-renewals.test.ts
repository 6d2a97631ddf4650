import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { configSchema } from '../config/schema.ts';
import { CsrApprover } from '../controllers/csr-approver/csr-approver.ts';
import { csrInformer, nodeInformer } from '../kube/shared-informer.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { buildLeaderComponents } from './leader-components.ts';

const kubeConfig = new KubeConfig();
kubeConfig.loadFromOptions({
  clusters: [{ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: false }],
  users: [{ name: 'u', token: 't' }],
  contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
  currentContext: 'x',
});

async function approverOf(csrApprover: Record<string, unknown>) {
  const { logger, lines } = capturedLogger();
  const built = await buildLeaderComponents({
    config: configSchema.parse({
      clusterName: 'c.example.com',
      cloud: 'metal',
      configBase: 'memfs://leader-renewals/c.example.com',
      csrApprover,
    }),
    kubeConfig,
    nodes: nodeInformer(kubeConfig),
    csrs: csrInformer(kubeConfig),
    vfsOptions: { env: {} },
    registry: new Registry(),
    logger,
  });
  built.close();
  const approver = built.components.find((c) => c instanceof CsrApprover);
  assert.ok(approver instanceof CsrApprover);
  const said = lines
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .find((line) => 'clientRenewals' in line);
  return { approver, said };
}

describe('the CSR approver is given csrApprover.clientRenewals', () => {
  test('unset on metal (host names outlive their machines): leave, and the start-up line says it is the default', async () => {
    const { approver, said } = await approverOf({});
    assert.equal(approver.clientRenewals, 'leave');
    assert.equal(said?.['clientRenewals'], 'leave');
    assert.equal(said?.['setBy'], 'the default for cloud metal');
  });

  test('set, the setting', async () => {
    for (const mode of ['approve', 'leave']) {
      const { approver, said } = await approverOf({ clientRenewals: mode });
      assert.equal(approver.clientRenewals, mode);
      assert.equal(said?.['setBy'], 'csrApprover.clientRenewals');
    }
  });
});
