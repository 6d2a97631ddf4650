/**
 * Closing a provider (the controller stops) ends its cloud calls in flight: a call waiting on a silent
 * endpoint must not hold the process open until its deadline, nor be retried on a new connection.
 * One case per cloud whose client is this project's own (AWS, GCE and Azure have theirs beside their
 * clients' tests).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { eventually } from '../net/testing.ts';
import { outcomeWithin, type SilentServer, silentServer } from '../testing/silent-server.ts';
import { createDigitalOceanProvider } from './digitalocean/provider.ts';
import { createHetznerProvider } from './hetzner/provider.ts';
import { createLinodeProvider } from './linode/provider.ts';
import { createOpenStackProvider } from './openstack/provider.ts';
import { createScalewayProvider } from './scaleway/provider.ts';
import type { CloudGroups } from './types.ts';

/** Long enough that only the close can end the call within the test's bounds. */
const api = { timeoutMs: 60_000, retries: 3, retryDelayMs: 10, maxRetryWaitMs: 60_000 };

const clouds: Record<string, (endpoint: string) => Promise<{ cloudGroups: CloudGroups; close(): void }>> = {
  hetzner: async (endpoint) => createHetznerProvider({ clusterName: 'c', token: 't', endpoint, api }),
  digitalocean: async (endpoint) =>
    createDigitalOceanProvider({ clusterName: 'c', token: 't', endpoint, api }),
  linode: async (origin) => createLinodeProvider({ clusterName: 'c', token: 't', origin, api }),
  openstack: async (authUrl) =>
    createOpenStackProvider({
      clusterName: 'c',
      auth: {
        authUrl,
        region: 'r',
        endpointInterface: 'public',
        credentials: { method: 'application-credential', id: 'id', secret: 's' },
      },
    }),
  scaleway: async (apiUrl) =>
    createScalewayProvider({
      clusterName: 'c',
      credentials: {
        accessKey: `SCW${randomUUID().replace(/-/g, '').slice(0, 17).toUpperCase()}`,
        secretKey: randomUUID(),
        projectId: randomUUID(),
        zone: 'fr-par-1',
        apiUrl,
      },
    }),
};

for (const [cloud, connect] of Object.entries(clouds)) {
  test(`${cloud}: closing the provider ends a call waiting on a silent API at once, and the next makes no request`, async () => {
    let silent: SilentServer | undefined;
    try {
      silent = await silentServer();
      const server = silent;
      const provider = await connect(silent.endpoint);
      const waiting = outcomeWithin(provider.cloudGroups.list('c'), 5_000);
      assert.ok(
        (await eventually(() => server.accepted() > 0, true)) === true,
        'the call never reached the API',
      );
      const closed = Date.now();
      provider.close();
      const outcome = await waiting;
      assert.ok(!outcome.pending, 'still pending 5 s after the provider was closed');
      assert.ok(Date.now() - closed < 1_000, `ended ${Date.now() - closed} ms after close`);
      assert.ok(outcome.error instanceof Error, 'the call did not fail');
      assert.equal(await eventually(() => server.open(), 0), 0, 'the ended call still holds its connection');
      const accepted = server.accepted();
      await assert.rejects(provider.cloudGroups.list('c'));
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.equal(server.accepted(), accepted, 'a call after close reached the API (or one was retried)');
    } finally {
      silent?.close();
    }
  });
}
