import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { startApiServer } from '../../sim/apiserver/index.ts';
import { eventName, eventNameKey, eventSource, nodeEvent } from './node-event.ts';

const sim = await startApiServer();
after(() => sim.close());

/** kubernetes' IsDNS1123Subdomain, which the API server checks names against. */
/** The replicas' key Event names are made with (the test's). */
const key = eventNameKey(Buffer.alloc(32, 7));

const dnsSubdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

describe('node events', () => {
  test('an Event about a Node is created in default, naming the Node as kubectl describe node looks for it', async () => {
    const now = new Date('2026-01-02T03:04:05Z');
    const node = { name: 'n1', uid: 'u1' };
    const name = eventName(node, 'Warning', 'IdentityRejected', 'not yours', key);
    const event = nodeEvent(name, node, 'Warning', 'IdentityRejected', 'not yours', now);
    assert.match(event.metadata.name ?? '', /^n1\.[0-9a-f]{16}$/);
    await sim
      .kubeConfig()
      .makeApiClient(CoreV1Api)
      .createNamespacedEvent({ namespace: 'default', body: event });
    const [stored] = sim.store.list('events', 'default');
    // The uid is the Node's name, as on the kubelet's Events: `kubectl describe node` selects on it.
    assert.deepEqual(stored?.['involvedObject'], { apiVersion: 'v1', kind: 'Node', name: 'n1', uid: 'n1' });
    assert.equal(stored?.['reason'], 'IdentityRejected');
    assert.equal(stored?.['type'], 'Warning');
    assert.equal(stored?.['lastTimestamp'], '2026-01-02T03:04:05Z');
    assert.deepEqual(stored?.['source'], { component: eventSource });
  });
});

describe('Event names', () => {
  const node = { name: 'ip-10-0-0-1.ec2.internal', uid: 'u-1' };

  test('with the key, the same report always has the same name; another report, the same on a re-created Node, or another key, another', () => {
    const name = eventName(node, 'Warning', 'IdentityRejected', 'not yours', key);
    assert.equal(eventName({ ...node }, 'Warning', 'IdentityRejected', 'not yours', key), name);
    assert.match(name, /^ip-10-0-0-1\.ec2\.internal\.[0-9a-f]{16}$/);
    const others = [
      eventName(node, 'Warning', 'IdentityRejected', 'not yours either', key),
      eventName(node, 'Warning', 'PodCIDRConflict', 'not yours', key),
      eventName(node, 'Normal', 'IdentityRejected', 'not yours', key),
      eventName({ ...node, uid: 'u-2' }, 'Warning', 'IdentityRejected', 'not yours', key),
      eventName(node, 'Warning', 'IdentityRejected', 'not yours', eventNameKey(Buffer.alloc(32, 8))),
      eventName(node, 'Warning', 'IdentityRejected', 'not yours', undefined),
    ];
    assert.equal(new Set([name, ...others]).size, 7);
  });

  test('a Node name too long to take the suffix is cut, never ending the cut in a dot or a dash: at most 253 characters, a DNS subdomain', () => {
    for (const name of [
      `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`,
      // Cut where a dot, or a dash, would end it.
      `${'a'.repeat(235)}.bbbbbbbbbbbbbbbbb`,
      `${'a'.repeat(234)}--bbbbbbbbbbbbbbbb`,
      'a'.repeat(253),
    ]) {
      const event = eventName({ name, uid: 'u' }, 'Warning', 'R', 'm', key);
      assert.ok(event.length <= 253, `${event.length} characters`);
      assert.match(event, dnsSubdomain);
      assert.ok(event.startsWith(name.slice(0, 200)), 'it still starts with the Node name');
    }
  });
});
