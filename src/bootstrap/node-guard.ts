/**
 * The impersonation guard kops added (PRs #15351/#15456): no credentials for a node name whose Node
 * is already registered and Ready, so a pod or escaped workload cannot obtain a running node's
 * identity. The Node is read from the API server directly, never from a cache that may lag.
 */
import type { CoreV1Api, V1Node } from '@kubernetes/client-node';
import { ConflictError } from '../errors.ts';
import { fromApiException } from '../kube/api-errors.ts';

/** Reads what the guard needs of a Node. */
export type NodeReader = (name: string) => Promise<Pick<V1Node, 'status'> | undefined>;

/** A {@link NodeReader} over the core API: undefined when the Node does not exist. */
export function apiNodeReader(core: CoreV1Api): NodeReader {
  return async (name) => {
    try {
      return await core.readNode({ name });
    } catch (err) {
      const error = fromApiException(err, `read node ${name}`);
      if (error.kind === 'not-found') return undefined;
      throw error;
    }
  };
}

/** Whether a Node's Ready condition is True. */
export function isNodeReady(node: Pick<V1Node, 'status'>): boolean {
  return (node.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/** Throws a ConflictError (reason `node-already-registered`) when the Node exists and is Ready. */
export async function assertNodeNotRegistered(readNode: NodeReader, name: string): Promise<void> {
  const node = await readNode(name);
  if (node && isNodeReady(node)) {
    throw new ConflictError(
      `node ${name} is already registered and Ready; a running node renews its certificates through the CSR API, and a replaced machine gets a new name`,
      { details: { reason: 'node-already-registered' } },
    );
  }
}
