/**
 * Kubernetes Events about a Node, so `kubectl describe node` shows why the controller acted or refused.
 * An Event's name is derived from what it says, so that the same report from another leader, or
 * after a restart, lands on the same object (written by src/controllers/node/node-event-recorder.ts).
 */
import { createHash } from 'node:crypto';
import type { ConfigurationOptions, CoreV1Api, CoreV1Event } from '@kubernetes/client-node';
import { fromApiException } from '../../kube/api-errors.ts';
import type { NodeRecord } from './node-record.ts';

/** The component name Events carry as their source. */
export const eventSource = 'kops-controller';

/** The longest name an object may have (a DNS subdomain), an Event's included. */
const maxNameLength = 253;

/** Hex digits of the hash that ends an Event's name: 64 bits, so that two reports never share one. */
const hashDigits = 16;

/**
 * The name of the Event a controller writes about `node`: the Node's name, a dot and a hash of what
 * the Event says (the apiserver's convention is `<object>.<suffix>`), so the same report always gets
 * the same name, whoever writes it. The hash covers the Node's uid: a Node re-created under the name
 * gets Events of its own. A Node's name is a DNS subdomain of up to 253 characters; one too long to
 * take the suffix is cut, and the cut never ends in `.` or `-`, so the name is a DNS subdomain too.
 */
export function eventName(
  node: Pick<NodeRecord, 'name' | 'uid'>,
  type: 'Normal' | 'Warning',
  reason: string,
  message: string,
): string {
  const hash = createHash('sha256')
    .update(JSON.stringify([node.name, node.uid, type, reason, message, eventSource]))
    .digest('hex')
    .slice(0, hashDigits);
  const room = maxNameLength - hashDigits - 1;
  const prefix = node.name.length <= room ? node.name : node.name.slice(0, room).replace(/[.-]+$/, '');
  return `${prefix}.${hash}`;
}

/**
 * The Event `kubectl describe node` lists for `node`; Node Events live in `default`, as the kubelet's.
 * Its `involvedObject.uid` is the Node's name, as on the kubelet's and Kubernetes' node controllers'
 * Events: `kubectl describe node` selects them by `involvedObject.uid=<node name>`, so an Event
 * naming the Node's real uid would never be shown there.
 */
export function nodeEvent(
  node: Pick<NodeRecord, 'name' | 'uid'>,
  type: 'Normal' | 'Warning',
  reason: string,
  message: string,
  now: Date,
  count = 1,
): CoreV1Event {
  return {
    apiVersion: 'v1',
    kind: 'Event',
    metadata: { name: eventName(node, type, reason, message), namespace: 'default' },
    involvedObject: { apiVersion: 'v1', kind: 'Node', name: node.name, uid: node.name },
    type,
    reason,
    message,
    source: { component: eventSource },
    reportingComponent: eventSource,
    firstTimestamp: now,
    lastTimestamp: now,
    count,
  };
}

/**
 * Creates an Event through client-node; failures become typed errors. `options` are client-node's
 * per-call options: `abortingWith(signal)` (src/kube/call-options.ts) cancels the create.
 */
export async function createEvent(
  core: CoreV1Api,
  event: CoreV1Event,
  options?: ConfigurationOptions,
): Promise<void> {
  try {
    await core.createNamespacedEvent({ namespace: 'default', body: event }, options);
  } catch (err) {
    throw fromApiException(err, `create event ${event.metadata.name ?? ''}`);
  }
}

/** How long writing one Event may take: an API server slow to take Events must not hold a worker. */
export const eventTimeoutMs = 30_000;
