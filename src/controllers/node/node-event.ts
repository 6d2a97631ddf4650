/**
 * Kubernetes Events about a Node, so `kubectl describe node` shows why the controller acted or refused.
 * An Event's name is derived from what it says, keyed with a secret the replicas share, so that the
 * same report from another leader, or after a restart, lands on the same object (written by
 * src/controllers/node/node-event-recorder.ts), and no node can compute it.
 */
import { createHash, createHmac, randomBytes } from 'node:crypto';
import type { CoreV1Event } from '@kubernetes/client-node';
import type { NodeRecord } from './node-record.ts';

/** The component name Events carry as their source. */
export const eventSource = 'kops-controller';

/** The longest name an object may have (a DNS subdomain), an Event's included. */
const maxNameLength = 253;

/** Hex digits of the hash that ends an Event's name: 64 bits, so that two reports never share one. */
const hashDigits = 16;

/** What an Event about `node` says, as one string: the report it repeats. */
function reportText(
  node: Pick<NodeRecord, 'name' | 'uid'>,
  type: 'Normal' | 'Warning',
  reason: string,
  message: string,
): string {
  return JSON.stringify([node.name, node.uid, type, reason, message, eventSource]);
}

/** The key of a report in a process's memory of what it wrote (never an Event's name). */
export function reportKey(
  node: Pick<NodeRecord, 'name' | 'uid'>,
  type: 'Normal' | 'Warning',
  reason: string,
  message: string,
): string {
  return createHash('sha256')
    .update(reportText(node, type, reason, message))
    .digest('base64url');
}

/**
 * The key Event names are made with, from the replicas' shared secret (the key that signs the
 * managed-labels annotation, kube-system/kops-controller-labels-key), kept apart from its use there.
 */
export function eventNameKey(labelsKey: Uint8Array): Uint8Array {
  return createHmac('sha256', labelsKey).update('kops-controller node Event names').digest();
}

/**
 * The name of the Event a controller writes about `node`: the Node's name, a dot and a suffix (the
 * apiserver's convention is `<object>.<suffix>`). With `key`, the suffix is an HMAC of what the Event
 * says, so the same report gets the same name whichever replica writes it. Every part of a report
 * is something a node can read or guess, and a kubelet may create and patch Events: an unkeyed hash
 * would let a refused node create its own Event first, with harmless content, and hide the Warning.
 * Without a key (not read yet), the suffix is random, as client-go's are. The HMAC covers the Node's
 * uid: a Node re-created under the name gets Events of its own. A Node's name is a DNS subdomain of
 * up to 253 characters; one too long to take the suffix is cut, and the cut never ends in `.` or
 * `-`, so the name is a DNS subdomain too.
 */
export function eventName(
  node: Pick<NodeRecord, 'name' | 'uid'>,
  type: 'Normal' | 'Warning',
  reason: string,
  message: string,
  key: Uint8Array | undefined,
): string {
  const suffix = key
    ? createHmac('sha256', key)
        .update(reportText(node, type, reason, message))
        .digest('hex')
        .slice(0, hashDigits)
    : randomBytes(hashDigits / 2).toString('hex');
  const room = maxNameLength - hashDigits - 1;
  const prefix = node.name.length <= room ? node.name : node.name.slice(0, room).replace(/[.-]+$/, '');
  return `${prefix}.${suffix}`;
}

/**
 * The Event `name` (see {@link eventName}) that `kubectl describe node` lists for `node`; Node Events
 * live in `default`, as the kubelet's.
 * Its `involvedObject.uid` is the Node's name, as on the kubelet's and Kubernetes' node controllers'
 * Events: `kubectl describe node` selects them by `involvedObject.uid=<node name>`, so an Event
 * naming the Node's real uid would never be shown there.
 */
export function nodeEvent(
  name: string,
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
    metadata: { name, namespace: 'default' },
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

/** How long writing one Event may take: an API server slow to take Events must not hold a worker. */
export const eventTimeoutMs = 30_000;
