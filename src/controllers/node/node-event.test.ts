import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { startApiServer } from '../../sim/apiserver/index.ts';
import { createEvent, eventName, eventSource, nodeEvent } from './node-event.ts';

const sim = await startApiServer();
after(() => sim.close());

/** kubernetes' IsDNS1123Subdomain, which the API server checks names against. */
const dnsSubdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

describe('node events', () => {
  test('an Event about a Node is created in default, naming the Node as kubectl describe node looks for it', async () => {
    const now = new Date('2026-01-02T03:04:05Z');
    const event = nodeEvent({ name: 'n1', uid: 'u1' }, 'Warning', 'IdentityRejected', 'not yours', now);
    assert.match(event.metadata.name ?? '', /^n1\.[0-9a-f]{16}$/);
    await createEvent(sim.kubeConfig().makeApiClient(CoreV1Api), event);
    const [stored] = sim.store.list('events', 'default');
    // The uid is the Node's name, as on the kubelet's Events: `kubectl describe node` selects on it.
    assert.deepEqual(stored?.['involvedObject'], { apiVersion: 'v1', kind: 'Node', name: 'n1', uid: 'n1' });
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

describe('Event names', () => {
  const node = { name: 'ip-10-0-0-1.ec2.internal', uid: 'u-1' };

  test('the same report always has the same name; another report, or the same on a re-created Node, another', () => {
    const name = eventName(node, 'Warning', 'IdentityRejected', 'not yours');
    assert.equal(eventName({ ...node }, 'Warning', 'IdentityRejected', 'not yours'), name);
    assert.match(name, /^ip-10-0-0-1\.ec2\.internal\.[0-9a-f]{16}$/);
    const others = [
      eventName(node, 'Warning', 'IdentityRejected', 'not yours either'),
      eventName(node, 'Warning', 'PodCIDRConflict', 'not yours'),
      eventName(node, 'Normal', 'IdentityRejected', 'not yours'),
      eventName({ ...node, uid: 'u-2' }, 'Warning', 'IdentityRejected', 'not yours'),
    ];
    assert.equal(new Set([name, ...others]).size, 5);
  });

  test('a Node name too long to take the suffix is cut, never ending the cut in a dot or a dash: at most 253 characters, a DNS subdomain', () => {
    for (const name of [
      `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`,
      // Cut where a dot, or a dash, would end it.
      `${'a'.repeat(235)}.bbbbbbbbbbbbbbbbb`,
      `${'a'.repeat(234)}--bbbbbbbbbbbbbbbb`,
      'a'.repeat(253),
    ]) {
      const event = eventName({ name, uid: 'u' }, 'Warning', 'R', 'm');
      assert.ok(event.length <= 253, `${event.length} characters`);
      assert.match(event, dnsSubdomain);
      assert.ok(event.startsWith(name.slice(0, 200)), 'it still starts with the Node name');
    }
  });
});
