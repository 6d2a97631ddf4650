/**
 * The impersonation guard kops added (PRs #15351/#15456): no credentials for a node name whose Node
 * is already registered and Ready, so a pod or escaped workload cannot obtain a running node's
 * identity. kops reads the Node from the API server on every request, and at 5,000 nodes those reads
 * hit its client-side rate limits. Here a watch of Nodes answers the common case, "no such Node",
 * but only while that watch is provably current; every other answer comes from a direct read
 * (docs/security.md, "The impersonation guard").
 */
import type { KubeConfig, V1Node } from '@kubernetes/client-node';
import { ConflictError } from '../errors.ts';
import { type InformerCache, watchIdleTimeoutMs } from '../kube/informer.ts';
import { kubeAnswerError, kubeHttps, kubeJson, maxNodeBytes } from '../kube/kube-https.ts';
import type { SharedInformer } from '../kube/shared-informer.ts';
import type { CircuitBreaker } from './circuit-breaker.ts';
import { type DependencyFaultError, dependencyFault } from './dependency.ts';

/** Reads what the guard needs of a Node. */
export type NodeReader = (name: string) => Promise<Pick<V1Node, 'status'> | undefined>;

/**
 * A {@link NodeReader} over plain HTTPS with one keep-alive agent (src/kube/kube-https.ts): the guard runs on
 * every bootstrap request, and through client-node each read cost more CPU than the rest of an
 * issuance (a new dispatcher per call, and a full exception for every 404 of a node that is not
 * registered yet).
 */
export function httpsNodeReader(
  kubeConfig: KubeConfig,
  options: { timeoutMs?: number; circuit?: CircuitBreaker } = {},
): NodeReader {
  const call = kubeHttps(kubeConfig, { timeoutMs: options.timeoutMs ?? 10_000 });
  return async (name) => {
    const action = `read node ${name}`;
    const path = `/api/v1/nodes/${encodeURIComponent(name)}`;
    const ticket = options.circuit?.admit();
    let answer: Awaited<ReturnType<typeof call>>;
    try {
      answer = await call({ action, method: 'GET', path, maxBodyBytes: maxNodeBytes });
    } catch (err) {
      ticket?.failed();
      throw err;
    }
    // The API server failing (5xx) pauses the reads; any other answer, 429 included (what throttles
    // them is volume anyone can send), shows it is up.
    if (answer.status >= 500) ticket?.failed();
    else ticket?.answered();
    if (answer.status === 404) return undefined;
    if (answer.status !== 200) throw kubeAnswerError(answer, action);
    return kubeJson<Pick<V1Node, 'status'>>(answer, action);
  };
}

/**
 * How long an open watch stream is taken to be current after the API server accepted it or it last
 * delivered an event or bookmark. The API server bookmarks a watch only while its resource changes,
 * so a quiet resource's stream delivers nothing and the informer reopens it after this same silence
 * (src/kube/informer.ts); a stalled stream is trusted no longer than that.
 */
export const maxWatchSilenceMs = watchIdleTimeoutMs;

/** What the guard needs of a Node informer (whose records only mark presence). */
export type NodePresence = Pick<InformerCache<true>, 'hasSynced' | 'get' | 'watchSilenceMs'>;

/** The Node the guard's pause reads as its probe: any answer, 404 included, shows the API server is up. */
export const guardProbeNodeName = 'kops-controller-guard-probe';

/**
 * The guard's pause, asked before a request spends anything (the policy's STS replay, a cloud read):
 * the fault to answer with when the guard could only answer it from the API server (no current
 * watch) and its reads there are paused, because the API server failed every one for a while
 * (circuit-breaker.ts). Else the request would cost its cloud calls and then fail at the guard: in an
 * API-server outage, nodeup's retries every ~10 s would spend the account's STS quota that way.
 * When a probe is due, it is made here, through `direct` (one GET of {@link guardProbeNodeName}),
 * and the request goes on only if it was answered: were the request's own read the probe, every
 * request arriving while it spends its proof would find the probe still due, and the crowd would
 * replay its proofs (measured: 40 replays a second of 300 nodes, bench/sts-outage.ts).
 */
export function guardPause(
  circuit: CircuitBreaker,
  presence: PresenceQuestion | undefined,
  direct: NodeReader,
): () => Promise<DependencyFaultError | undefined> {
  return async () => {
    if (circuit.state === 'closed') return undefined;
    // Whether the watch is current does not depend on the name asked.
    if (presence && (await presence('')).current) return undefined;
    if (circuit.pausing) return dependencyFault('kubernetes-api', circuit.paused());
    try {
      await direct(guardProbeNodeName);
      return undefined;
    } catch (err) {
      return dependencyFault('kubernetes-api', err);
    }
  };
}

/** What a Node watch says of one name: whether the watch is current, and whether it holds that Node. */
export interface WatchedPresence {
  current: boolean;
  known: boolean;
}

/**
 * Asks a Node watch about one name: in this process (see {@link presenceOf}), or, in a serving
 * worker, the primary's watch over the workers' channel (src/bootstrap/workers.ts).
 */
export type PresenceQuestion = (name: string) => WatchedPresence | Promise<WatchedPresence>;

/** Where an answer of the guard came from, for the metrics. */
export type GuardReadSource = 'watch' | 'api';

/**
 * A {@link NodeReader} that answers "not registered" from a Node watch when that watch is current:
 * synced, with an open stream accepted or heard from within {@link maxWatchSilenceMs}.
 * A Node can only become Ready after its creation was written, and a current watch has delivered
 * that creation, so the cache cannot miss a Ready Node by more than the watch's delivery delay.
 * Otherwise (not synced, reconnecting, silent too long), and whenever the watch knows the Node,
 * `direct` reads it: the 409 itself always rests on the API server's answer.
 */
export function watchedNodeReader(
  presence: PresenceQuestion,
  direct: NodeReader,
  options: { onRead?: (source: GuardReadSource) => void } = {},
): NodeReader {
  return async (name) => {
    const { current, known } = await presence(name);
    if (current && !known) {
      options.onRead?.('watch');
      return undefined;
    }
    options.onRead?.('api');
    return direct(name);
  };
}

/** What `nodes` says of one name, as {@link watchedNodeReader} asks it. */
export function presenceOf(
  nodes: NodePresence,
  maxSilenceMs = maxWatchSilenceMs,
): (name: string) => WatchedPresence {
  return (name) => ({ current: watchIsCurrent(nodes, maxSilenceMs), known: nodes.get(name) !== undefined });
}

/** Whether a Node watch is current enough to answer "not registered" (see {@link watchedNodeReader}). */
export function watchIsCurrent(nodes: NodePresence, maxSilenceMs = maxWatchSilenceMs): boolean {
  const silence = nodes.watchSilenceMs();
  return nodes.hasSynced() && silence !== undefined && silence <= maxSilenceMs;
}

/** The guard's view of the process's Node watch: presence only, what {@link watchedNodeReader} reads. */
export function nodePresenceView(nodes: SharedInformer<V1Node>): InformerCache<true> {
  return nodes.view('guard', () => true);
}

/** Whether a Node's Ready condition is True. */
export function isNodeReady(node: Pick<V1Node, 'status'>): boolean {
  return (node.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/**
 * Throws a ConflictError (reason `node-already-registered`) when the Node exists and is Ready, and a
 * dependency fault when the Node cannot be read — whatever the API server answered (403 included: a
 * permission the controller lacks says nothing about the node), so that it is retried, never taken
 * for "not registered" and never for a refusal.
 */
export async function assertNodeNotRegistered(
  readNode: NodeReader,
  name: string,
  options: { anyState?: boolean } = {},
): Promise<void> {
  const node = await readNode(name).catch((err: unknown) => {
    throw dependencyFault('kubernetes-api', err);
  });
  if (node && options.anyState) {
    throw new ConflictError(
      `node ${name} is already registered; this proof admits a node's first join only (remove the Node to replace the machine)`,
      { details: { reason: 'node-already-registered' } },
    );
  }
  if (node && isNodeReady(node)) {
    throw new ConflictError(
      `node ${name} is already registered and Ready; a running node renews its certificates through the CSR API, and a replaced machine gets a new name`,
      { details: { reason: 'node-already-registered' } },
    );
  }
}
