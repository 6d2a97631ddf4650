import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { startApiServer } from '../sim/apiserver/index.ts';
import { reuseConnections } from './connection-reuse.ts';

const sim = await startApiServer();
after(() => sim.close());

describe('reuseConnections', () => {
  test('API calls share one dispatcher per cluster and user, and still succeed', async () => {
    const kubeConfig = sim.kubeConfig();
    assert.equal(reuseConnections(kubeConfig), kubeConfig);
    assert.equal(reuseConnections(kubeConfig), kubeConfig, 'idempotent');
    const dispatchers = new Set<unknown>();
    const core = kubeConfig.makeApiClient(CoreV1Api);
    for (let i = 0; i < 3; i++) {
      const context = { setDispatcher: (d: unknown) => dispatchers.add(d), setHeaderParam: () => undefined };
      await kubeConfig.applySecurityAuthentication(context as never);
      await core.listNode();
    }
    assert.equal(dispatchers.size, 1);
  });

  test('without it, client-node builds a dispatcher per request', async () => {
    const kubeConfig = sim.kubeConfig();
    const dispatchers = new Set<unknown>();
    for (let i = 0; i < 2; i++) {
      const context = { setDispatcher: (d: unknown) => dispatchers.add(d), setHeaderParam: () => undefined };
      await kubeConfig.applySecurityAuthentication(context as never);
    }
    assert.equal(dispatchers.size, 2);
  });
});
