import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { startApiServer } from '../../sim/apiserver/index.ts';
import { outcomeWithin, silentApiServer } from '../../testing/silent-server.ts';
import { createEvent, eventSource, nodeEvent, recordEvent } from './node-event.ts';

const sim = await startApiServer();
after(() => sim.close());

describe('node events', () => {
  test('an Event about a Node is created in default, where kubectl describe node finds it', async () => {
    const now = new Date('2026-01-02T03:04:05Z');
    const event = nodeEvent({ name: 'n1', uid: 'u1' }, 'Warning', 'IdentityRejected', 'not yours', now);
    assert.match(event.metadata.name ?? '', /^n1\.[0-9a-f]{16}$/);
    await createEvent(sim.kubeConfig().makeApiClient(CoreV1Api), event);
    const [stored] = sim.store.list('events', 'default');
    assert.deepEqual(stored?.['involvedObject'], { apiVersion: 'v1', kind: 'Node', name: 'n1', uid: 'u1' });
    assert.equal(stored?.['reason'], 'IdentityRejected');
    assert.equal(stored?.['type'], 'Warning');
    assert.equal(stored?.['lastTimestamp'], '2026-01-02T03:04:05Z');
    assert.deepEqual(stored?.['source'], { component: eventSource });
  });

  test('a refused create is a typed error', async () => {
    const event = nodeEvent({ name: 'n2', uid: 'u2' }, 'Normal', 'X', 'y', new Date());
    const reader = sim.kubeConfig({ name: 'nobody', groups: [] }).makeApiClient(CoreV1Api);
    await assert.rejects(createEvent(reader, event), { kind: 'forbidden' });
  });
});

test('recordEvent on an API server that never answers: a stop ends it at once and closes its connection', async () => {
  const silent = await silentApiServer();
  try {
    const stop = new AbortController();
    const event = nodeEvent(
      { name: 'n1', uid: 'u1' },
      'Warning',
      'IdentityRejected',
      'not yours',
      new Date(),
    );
    const recording = recordEvent(silent.kubeConfig.makeApiClient(CoreV1Api), event, stop.signal);
    await waitUntil(() => silent.accepted() > 0);
    stop.abort(new Error('leadership lost'));
    const outcome = await outcomeWithin(recording, 1_000);
    assert.equal(outcome.pending, false, 'the create did not outlive the stop');
    await waitUntil(() => silent.open() === 0);
  } finally {
    silent.close();
  }
});

async function waitUntil(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.ok(condition(), 'the condition never held within 2 s');
}
