/** Kubernetes Events about a Node, so `kubectl describe node` shows why the controller acted or refused. */
import { randomBytes } from 'node:crypto';
import type { ConfigurationOptions, CoreV1Api, CoreV1Event } from '@kubernetes/client-node';
import { bounded } from '../../deadline.ts';
import { fromApiException } from '../../kube/api-errors.ts';
import { abortingWith } from '../../kube/call-options.ts';
import type { NodeRecord } from './node-record.ts';

/** The component name Events carry as their source. */
export const eventSource = 'kops-controller';

/** The Event `kubectl describe node` lists for `node`; Node events live in `default`, as the kubelet's. */
export function nodeEvent(
  node: Pick<NodeRecord, 'name' | 'uid'>,
  type: 'Normal' | 'Warning',
  reason: string,
  message: string,
  now: Date,
): CoreV1Event {
  return {
    metadata: {
      // The apiserver's convention: the object's name, a dot, and a unique suffix.
      name: `${node.name}.${randomBytes(8).toString('hex')}`,
      namespace: 'default',
    },
    involvedObject: { apiVersion: 'v1', kind: 'Node', name: node.name, uid: node.uid },
    type,
    reason,
    message,
    source: { component: eventSource },
    reportingComponent: eventSource,
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
  };
}

/**
 * Creates an Event; failures become typed errors. `options` are client-node's per-call options:
 * `abortingWith(signal)` (src/kube/call-options.ts) cancels the create when the caller stops.
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

/** How long creating one Event may take: an API server slow to take Events must not hold a worker. */
export const eventTimeoutMs = 30_000;

/**
 * Creates an Event within {@link eventTimeoutMs}, cancelled when `signal` aborts (a term ending):
 * how a controller records what it did, whatever the API server is doing.
 */
export function recordEvent(core: CoreV1Api, event: CoreV1Event, signal: AbortSignal): Promise<void> {
  return bounded(
    (cut) => createEvent(core, event, abortingWith(cut)),
    eventTimeoutMs,
    `create event ${event.metadata.name ?? ''}`,
    signal,
  );
}
