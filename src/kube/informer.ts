/**
 * A list+watch cache for one resource, built on a plain streaming watch (`kubeWatch`) rather than client-node's
 * `ListWatch`, because ListWatch stops for good on the first failed list or non-410 error (and its
 * `start()` even resolves when the list failed), never asks for bookmarks, and keeps whole objects.
 * This informer:
 * - retries every failure (list, watch connect, stream error, network) with capped, jittered backoff,
 *   waiting at least what an answer's `Retry-After` asks (up to the backoff's cap);
 * - ends a watch stream on a damaged or oversized line and resumes from the last applied event;
 * - re-lists on 410 Gone (on connect or in-stream) and turns the difference into add/update/delete,
 *   and on a watch refused (400) for its resourceVersion;
 * - treats the answers as untrusted: a list item without a usable name or of another kind is skipped
 *   (logged), a list that is not one or whose continue token comes back is a failed list, such an
 *   event ends the stream as a damaged line does, a bookmark without a string resourceVersion is
 *   ignored ({@link objectProblem});
 * - requests bookmarks, so its resourceVersion stays fresh and a reconnect rarely needs a re-list;
 * - lists in pages and transforms each object into a slim record before caching, so large clusters
 *   fit in little memory (the raw page is dropped as soon as it is transformed);
 * - reports lists, watch restarts, events and cache size as metrics;
 * - on stop, gives up the list page or watch connect in flight at once, so that an API server that
 *   does not answer cannot hold a shutdown.
 * Pair it with {@link kubeList} and {@link kubeWatch}: both hand over objects in their JSON wire shape.
 */

import { request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import type { KubeConfig, KubernetesListObject, KubernetesObject } from '@kubernetes/client-node';
import { Counter, Gauge, type Registry } from 'prom-client';
import { ConfigError, describeError, TimeoutError, TooLargeError, UnavailableError } from '../errors.ts';
import { isJsonObject } from '../json-object.ts';
import { type Logger, RecurringFailureLog, silentLogger } from '../log.ts';
import { Backoff } from '../runtime/backoff.ts';
import { type Clock, sleep, systemClock } from '../runtime/clock.ts';
import { httpStatusOfApiError } from './api-errors.ts';
import { kubeAnswerError, kubeHttps, kubeJson, kubeProxyAgent, maxNodeBytes } from './kube-https.ts';
import { liveMembers, sharedMetric } from './metrics.ts';

/** The list parameters the informer sends; a client-node `list*` request object accepts them. */
export interface ListOptions {
  labelSelector?: string;
  fieldSelector?: string;
  limit?: number;
  _continue?: string;
  /** Gives up on the page when it aborts (the informer stopping): its request is closed, the list rejects. */
  signal?: AbortSignal;
}

/** Lists one page of a resource, e.g. `(o) => core.listNode(o)`. */
export type ListFn<T extends KubernetesObject> = (options: ListOptions) => Promise<KubernetesListObject<T>>;

/** The event types of a watch stream. */
export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

/**
 * Opens a watch on `path`: `onOpen` is called when the server has accepted it (`200`: it will stream
 * from the given resourceVersion), `onEvent` gets each event, `onDone` is called once when the stream
 * ends (no error for a normal close). Resolves with a handle that closes the stream.
 */
export type WatchFn = (
  path: string,
  params: Record<string, string | number | boolean | undefined>,
  onEvent: (type: WatchEventType, object: unknown) => void,
  onDone: (err?: unknown) => void,
  onOpen?: () => void,
) => Promise<{ abort(): void }>;

/**
 * The longest watch line read: one event is one object (a Node at most {@link maxNodeBytes}) in a
 * small envelope. A longer line is a runaway or hostile answer: the stream ends with a TooLargeError
 * and the informer resumes from its last resourceVersion, instead of buffering towards V8's string
 * limit (about 512 MiB), where the line reader throws outside any catch and ends the process.
 */
export const maxWatchLineBytes = maxNodeBytes + 64 * 1024;

/** The most of a refused watch's answer read for its Status message. */
const maxRefusalBytes = 64 * 1024;

/**
 * How long a watch may wait for its answer, and then for its next byte. The API server sends a watch
 * that asks for them a bookmark about once a minute while its resource changes (its watch cache
 * bookmarks the last change it saw, and only one newer than the watcher's), so a busy stream is never
 * silent this long, while a quiet one may get nothing and is reconnected after this silence.
 * client-node's `Watch` cut streams at 30 s, before the first bookmark of a busy one.
 */
export const watchIdleTimeoutMs = 90_000;

/** How long past its `timeoutSeconds` a watch stream may stay open before the client ends it. */
const watchStreamSlackMs = 60_000;

const watchEventTypes = new Set<string>(['ADDED', 'MODIFIED', 'DELETED', 'BOOKMARK', 'ERROR']);

/**
 * One watch line as an event, or the reason it is damaged. A line that does not parse, has an unknown
 * type, or carries an ADDED/MODIFIED/DELETED/BOOKMARK object without `metadata` is damaged: skipping it
 * would lose its change for good, since the next event moves the resourceVersion past it.
 */
function watchEventOf(line: string): { type: WatchEventType; object: unknown } | { damaged: string } {
  let event: unknown;
  try {
    event = JSON.parse(line);
  } catch {
    return { damaged: 'a line that is not JSON' };
  }
  const { type, object } = (event ?? {}) as { type?: unknown; object?: unknown };
  if (typeof type !== 'string' || !watchEventTypes.has(type)) {
    return { damaged: `an event of unknown type ${JSON.stringify(type)?.slice(0, 64)}` };
  }
  const metadata = (object as { metadata?: unknown } | null | undefined)?.metadata;
  if (type !== 'ERROR' && !isJsonObject(metadata)) {
    return { damaged: `a ${type} event whose object has no metadata` };
  }
  return { type: type as WatchEventType, object };
}

/**
 * The {@link WatchFn} of a kubeconfig: a streaming GET with client-node's credentials and agent
 * (`applyToHTTPSOptions`: its proxy, its TLS material, a fresh token per watch; through an HTTP(S)
 * proxy, the tunnel of src/net/egress-proxy.ts instead, which an abort ends), waiting at most
 * `idleTimeoutMs` (default 90 s) for the answer and then for each byte (a `TimeoutError`). It splits the
 * lines itself rather than through client-node's `Watch`, which dropped a line that did not parse and
 * buffered a line without bound: a line longer than `maxLineBytes` (default
 * {@link maxWatchLineBytes}) or a damaged event ends the stream with an error, so the informer
 * resumes from the last event it applied. A refused watch ends with the typed error of its answer
 * (src/kube/kube-https.ts `kubeAnswerError`): the API server's Status message, the status as
 * `upstreamStatus` and the answer's `Retry-After` as `retryAfterSeconds`.
 */
export function kubeWatch(
  kubeConfig: KubeConfig,
  options: { maxLineBytes?: number; idleTimeoutMs?: number; maxStreamMs?: number } = {},
): WatchFn {
  const maxLineBytes = options.maxLineBytes ?? maxWatchLineBytes;
  const idleTimeoutMs = options.idleTimeoutMs ?? watchIdleTimeoutMs;
  return async (path, params, onEvent, onDone, onOpen) => {
    // The API server ends a stream at its `timeoutSeconds`; one still open well past it (a server
    // that ignores it and trickles a byte at a time, which the idle timer cannot see, since no line
    // ever ends) is ended here, as a timeout, and reopened.
    const timeoutSeconds = params['timeoutSeconds'];
    const maxStreamMs =
      options.maxStreamMs ??
      (typeof timeoutSeconds === 'number' ? timeoutSeconds * 1000 + watchStreamSlackMs : undefined);
    const cluster = kubeConfig.getCurrentCluster();
    if (!cluster) throw new ConfigError('the kubeconfig has no current cluster; set current-context');
    const url = new URL(`${cluster.server.replace(/\/+$/, '')}${path}`);
    url.searchParams.set('watch', 'true');
    for (const [key, value] of Object.entries(params)) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    const headers: OutgoingHttpHeaders = { accept: 'application/json', 'user-agent': 'kops-controller' };
    const opts: RequestOptions = { method: 'GET', headers };
    await kubeConfig.applyToHTTPSOptions(opts);
    let ended = false;
    let timer: NodeJS.Timeout | undefined;
    let lifetime: NodeJS.Timeout | undefined;
    let response: IncomingMessage | undefined;
    const send = url.protocol === 'http:' ? httpRequest : httpsRequest;
    const req = send(url, {
      method: 'GET',
      headers: opts.headers as OutgoingHttpHeaders,
      agent: kubeProxyAgent(kubeConfig, opts) ?? opts.agent,
      ...(opts.auth ? { auth: opts.auth } : {}),
    });
    const finish = (err?: unknown) => {
      if (ended) return;
      ended = true;
      clearTimeout(timer);
      clearTimeout(lifetime);
      response?.destroy();
      req.destroy();
      onDone(err);
    };
    const resetTimer = () => {
      clearTimeout(timer);
      timer = setTimeout(
        () => finish(new TimeoutError(`watch ${path}: nothing received for ${idleTimeoutMs} ms`)),
        idleTimeoutMs,
      );
      timer.unref();
    };
    resetTimer();
    req.on('error', (err) => finish(err));
    req.on('response', (res) => {
      response = res;
      if (res.statusCode !== 200) {
        // The refusal with the API server's own words ("pods is forbidden: User … cannot watch …"),
        // as every other call reports it; the body read is capped, and the idle timer still runs.
        const status = res.statusCode ?? 0;
        const chunks: Buffer[] = [];
        let bytes = 0;
        res.on('data', (chunk: Buffer) => {
          if (bytes < maxRefusalBytes) chunks.push(chunk.subarray(0, maxRefusalBytes - bytes));
          bytes += chunk.length;
        });
        res.on('end', () =>
          finish(
            kubeAnswerError({ status, headers: res.headers, body: Buffer.concat(chunks) }, `watch ${path}`),
          ),
        );
        res.on('error', (err) => finish(err));
        return;
      }
      resetTimer();
      if (maxStreamMs !== undefined) {
        lifetime = setTimeout(
          () =>
            finish(
              new TimeoutError(
                `watch ${path}: still open ${maxStreamMs} ms after it was accepted; reopening`,
              ),
            ),
          maxStreamMs,
        );
        lifetime.unref();
      }
      onOpen?.();
      let pending: Buffer[] = [];
      let pendingBytes = 0;
      const line = (bytes: Buffer) => {
        const text = bytes.toString('utf8').trim();
        if (text === '') return;
        const event = watchEventOf(text);
        if ('damaged' in event) {
          finish(new UnavailableError(`watch ${path}: the API server sent ${event.damaged}; resuming`));
          return;
        }
        try {
          onEvent(event.type, event.object);
        } catch (err) {
          finish(err);
        }
      };
      res.on('data', (chunk: Buffer) => {
        if (ended) return;
        resetTimer();
        let start = 0;
        for (let nl = chunk.indexOf(10); nl !== -1 && !ended; nl = chunk.indexOf(10, start)) {
          const tail = chunk.subarray(start, nl);
          if (pendingBytes + tail.length > maxLineBytes) break;
          const bytes = pending.length === 0 ? tail : Buffer.concat([...pending, tail]);
          pending = [];
          pendingBytes = 0;
          start = nl + 1;
          line(bytes);
        }
        if (ended) return;
        const rest = chunk.subarray(start);
        if (pendingBytes + rest.length > maxLineBytes) {
          finish(new TooLargeError(`watch ${path}: an event line over ${maxLineBytes} bytes; resuming`));
          return;
        }
        if (rest.length > 0) {
          pending.push(rest);
          pendingBytes += rest.length;
        }
      });
      // A stream cut inside a line: the partial event is dropped, and the informer resumes from the
      // last event it applied, which gets it again.
      res.on('end', () => finish());
      res.on('error', (err) => finish(err));
      res.on('close', () => finish());
    });
    req.end();
    return { abort: () => finish() };
  };
}

/** How long one page of a list may take (a page is at most 500 objects by default). */
const listPageTimeoutMs = 60_000;

/** The longest page read: 500 Nodes are about 5 MB; the limit only stops a runaway answer. */
const maxListPageBytes = 256 * 1024 * 1024;

/**
 * The {@link ListFn} of a kubeconfig for `path` (e.g. `/api/v1/pods`), over the pooled API-server
 * client (src/kube/kube-https.ts), as the other calls of the process: keep-alive connections whatever
 * the KubeConfig object (client-node's fetch opens a TLS connection per page unless
 * src/kube/connection-reuse.ts patched that object), a deadline per page (client-node's list had none,
 * so an API server that accepted the request and never answered held the informer's first sync
 * forever), and the body decoded from one buffer instead of web streams and a TextDecoder. It decodes
 * the JSON itself, so objects come in their wire shape (timestamps as strings), the same shape the
 * watch events of client-node's `Watch` have: a transform sees one format whatever delivered the
 * object. A failed page is the typed error of its status (`upstreamStatus` 410 when a continue token
 * has expired).
 */
export function kubeList<T extends KubernetesObject>(
  kubeConfig: KubeConfig,
  path: string,
  options: { timeoutMs?: number } = {},
): ListFn<T> {
  const call = kubeHttps(kubeConfig, { timeoutMs: options.timeoutMs ?? listPageTimeoutMs });
  return async ({ labelSelector, fieldSelector, limit, _continue, signal }) => {
    if (!kubeConfig.getCurrentCluster()) {
      throw new ConfigError('the kubeconfig has no current cluster; set current-context');
    }
    const query = new URLSearchParams();
    const params = { labelSelector, fieldSelector, limit, continue: _continue };
    for (const [key, value] of Object.entries(params)) {
      if (value !== undefined && value !== '') query.set(key, String(value));
    }
    const action = `list ${path}`;
    const search = query.size > 0 ? `?${query}` : '';
    const answer = await call({
      action,
      method: 'GET',
      path: `${path}${search}`,
      maxBodyBytes: maxListPageBytes,
      ...(signal ? { signal } : {}),
    });
    if (answer.status !== 200) throw kubeAnswerError(answer, action);
    const list = kubeJson<KubernetesListObject<T> & { metadata?: { continue?: string } }>(answer, action);
    // Decoded JSON of any shape: `null`, a number or an array is not a list (and would end in a
    // TypeError below), but an answer to refuse like any other that is not one.
    if (!isJsonObject(list)) {
      throw new UnavailableError(`${action}: HTTP ${answer.status} with a body that is not a list`);
    }
    const metadata = (isJsonObject(list.metadata) ? list.metadata : {}) as { continue?: string };
    return { ...list, metadata: { ...metadata, _continue: metadata.continue } };
  };
}

/** A value of an answer, shown in a log line or an error: JSON, cut short. */
function shown(value: unknown): string {
  return (JSON.stringify(value) ?? String(value)).slice(0, 64);
}

/**
 * Why an object the API server sent (a list item, a watch event's object) cannot be cached, or
 * undefined when it can: it must be an object with `metadata`, a non-empty string `metadata.name`,
 * and a string `namespace` and `resourceVersion` when it has them; with `kind` known, an object that
 * names another kind (a Pod answered on a Node watch) is refused as client-go's reflector refuses it.
 * The API server never sends anything else; what does is a broken or hostile answer, and caching it
 * would hand consumers records keyed by `undefined`, a number or an object, or a Pod as a Node.
 */
function objectProblem(object: unknown, kind?: string): string | undefined {
  if (!isJsonObject(object)) return `an item that is not an object (${shown(object)})`;
  if (kind !== undefined && object['kind'] !== undefined && object['kind'] !== kind) {
    return `an object of kind ${shown(object['kind'])}, not ${kind}`;
  }
  const metadata = object['metadata'];
  if (!isJsonObject(metadata)) return 'an object without metadata';
  const { name, namespace, resourceVersion } = metadata;
  if (typeof name !== 'string' || name === '') return `an object whose name is ${shown(name)}`;
  if (namespace !== undefined && typeof namespace !== 'string') {
    return `object ${shown(name)} with namespace ${shown(namespace)}`;
  }
  if (resourceVersion !== undefined && typeof resourceVersion !== 'string') {
    return `object ${shown(name)} with resourceVersion ${shown(resourceVersion)}`;
  }
  return undefined;
}

/**
 * The most pages one list reads: 10 million objects at the default page size. An API server that
 * hands out a new continue token with every page for ever is not followed for ever.
 */
const maxListPages = 20_000;

/** The cache key of an object: `namespace/name`, or `name` for cluster-scoped objects. */
export function objectKey(object: KubernetesObject): string {
  const { namespace, name } = object.metadata ?? {};
  return namespace ? `${namespace}/${name ?? ''}` : (name ?? '');
}

/** An object's key as logged: cut short, so that a name of megabytes is not logged whole. */
export function shortKey(key: string): string {
  return key.length > 256 ? `${key.slice(0, 256)}…` : key;
}

/** Callbacks for cache changes; they receive the transformed records. */
export interface InformerHandlers<R> {
  add?: (record: R) => void;
  update?: (oldRecord: R, newRecord: R) => void;
  delete?: (record: R) => void;
}

/** How handlers subscribe. */
export interface SubscribeOptions {
  /**
   * Deliver every record already cached as an `add` first, as client-go does for a handler joining a
   * running shared informer: a consumer that subscribes to a synced cache sees the same adds as one
   * that was there for the first list. Off by default.
   */
  replay?: boolean;
}

/**
 * What a consumer reads of a cache and how it follows it: an {@link Informer}, or a view of a
 * {@link SharedInformer} (src/kube/shared-informer.ts). `start` and `stop` hold and release it.
 */
export interface InformerCache<R> {
  readonly name: string;
  addHandlers(handlers: InformerHandlers<R>, options?: SubscribeOptions): () => void;
  start(): void;
  stop(): Promise<void>;
  hasSynced(): boolean;
  waitForSync(signal?: AbortSignal): Promise<boolean>;
  get(key: string): R | undefined;
  list(): R[];
  /** Objects cached; for a view, those of the shared cache, including any its transform skipped. */
  readonly size: number;
  watchSilenceMs(): number | undefined;
  /**
   * Milliseconds since the cache was last known to be current (its last list, a watch the API server
   * accepted, an event or bookmark), whether or not a stream is open now; undefined until synced and
   * while stopped.
   */
  staleMs(): number | undefined;
}

/** Options of an {@link Informer}. */
export interface InformerOptions<T extends KubernetesObject, R> {
  /** The resource, for metrics and logs ("nodes", "pods"). */
  name: string;
  /** The watch path matching `list`, e.g. `/api/v1/nodes`. */
  path: string;
  /**
   * The resource's kind (`Node`): a list of another kind (`PodList`) is refused, and an object that
   * names another kind is skipped in a list and ends a watch stream as a damaged line.
   */
  kind?: string;
  list: ListFn<T>;
  watch: WatchFn;
  /** Turns an object into the record to cache; defaults to keeping the object. */
  transform?: (object: T) => R;
  labelSelector?: string;
  fieldSelector?: string;
  /** Objects per list page; defaults to 500. */
  pageSize?: number;
  /**
   * Retry delays after failures, in ms; default 1 s doubling to 30 s. A failure whose answer had a
   * `Retry-After` waits at least that long, up to `maxMs`.
   */
  backoff?: { initialMs: number; maxMs: number };
  clock?: Clock;
  logger?: Logger;
  registry?: Registry;
  random?: () => number;
}

interface Entry<R> {
  resourceVersion: string;
  record: R;
}

interface InformerMetrics {
  lists: Counter;
  restarts: Counter;
  events: Counter;
  skipped: Counter;
  cached: Gauge;
  synced: Gauge;
  live: Set<LiveInformer>;
}

function informerMetrics(registry: Registry): InformerMetrics {
  const registers = [registry];
  const counter = (name: string, help: string, labelNames: string[]) =>
    sharedMetric(registry, name, () => new Counter({ name, help, labelNames, registers }));
  // With serving workers the main process sums their registries (src/bootstrap/workers.ts); these
  // gauges describe one cache per process, so they are combined as the most (or least) of them.
  const gauge = (name: string, help: string, aggregator: 'max' | 'min') =>
    sharedMetric(
      registry,
      name,
      () => new Gauge({ name, help, labelNames: ['resource'], registers, aggregator }),
    );
  return {
    lists: counter('informer_lists_total', 'Full lists of a resource, by result.', ['resource', 'result']),
    restarts: counter('informer_watch_restarts_total', 'Watch streams re-opened, by reason.', [
      'resource',
      'reason',
    ]),
    events: counter('informer_events_total', 'Watch events received, by type.', ['resource', 'type']),
    skipped: counter(
      'informer_skipped_objects_total',
      'Objects the API server listed that were not cached: malformed, of another kind, or not transformable.',
      ['resource'],
    ),
    cached: gauge('informer_cached_objects', 'Objects in the informer cache.', 'max'),
    synced: gauge('informer_synced', '1 once the informer has completed its first list.', 'min'),
    live: liveInformers(registry),
  };
}

/** What the last-current gauge reads of a running informer. */
interface LiveInformer {
  readonly name: string;
  currentSinceEpochMs(): number | undefined;
}

/**
 * The running informers of a registry, whose `informer_last_current_timestamp_seconds` a scrape
 * reads. A stopped informer (a leader-only watch on a replica that no longer leads) has no sample, so
 * no stale time lingers there.
 */
function liveInformers(registry: Registry): Set<LiveInformer> {
  const name = 'informer_last_current_timestamp_seconds';
  return liveMembers<LiveInformer>(registry, name, (informers) => {
    new Gauge({
      name,
      help: 'When the cache was last known current: its last list, accepted watch, event or bookmark (seconds since the epoch).',
      labelNames: ['resource'],
      registers: [registry],
      // Summed over serving workers, the oldest of their caches.
      aggregator: 'min',
      collect() {
        this.reset();
        for (const informer of informers) {
          const at = informer.currentSinceEpochMs();
          if (at !== undefined) this.set({ resource: informer.name }, at / 1000);
        }
      },
    });
  });
}

/** Why a watch stream ended. */
type WatchEnd = 'closed' | 'timeout' | 'gone' | 'reset';

/** A connection cut (reset, socket hang-up, aborted answer), not an answer or a damaged line. */
function isTransportReset(err: unknown): boolean {
  const { code } = (err ?? {}) as { code?: unknown };
  return code === 'ECONNRESET' || code === 'EPIPE' || code === 'ECONNABORTED';
}

/** A watch that delivered events, or stayed open this long, was healthy: reconnect without backoff. */
const healthyWatchMs = 1000;

/**
 * A cache of one resource kept current by list+watch. Call {@link Informer.start}, then read or
 * subscribe. It may be stopped and started again: the cache stays, and the watch resumes from the last
 * resourceVersion (or re-lists, which turns what changed meanwhile into events).
 */
export class Informer<T extends KubernetesObject, R = T> implements InformerCache<R> {
  readonly name: string;
  readonly #options: InformerOptions<T, R>;
  readonly #transform: (object: T) => R;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #metrics: InformerMetrics | undefined;
  readonly #backoff: Backoff;
  readonly #failureLog: RecurringFailureLog;
  /** The longest backoff delay, which also caps a `Retry-After` wait. */
  readonly #backoffMaxMs: number;
  readonly #handlers = new Set<InformerHandlers<R>>();
  #cache = new Map<string, Entry<R>>();
  #resourceVersion: string | undefined;
  #synced = false;
  /** Callers of waitForSync still waiting; one that gives up (its signal aborts) is removed at once. */
  #syncWaiters = new Set<(synced: boolean) => void>();
  #stop = new AbortController();
  /** When the open watch stream was accepted or last delivered an event or bookmark; undefined while none is open. */
  #watchHeardAt: number | undefined;
  /** When the cache was last known current (monotonic), and the wall time of it (for the gauge). */
  #currentAt: number | undefined;
  #currentAtEpochMs = 0;
  /** Runs list+watch rounds while wanted; undefined when not running. */
  #loop: Promise<void> | undefined;
  /** The round in progress (one run until the stop signal aborts), which stop awaits. */
  #round: Promise<void> | undefined;
  #wanted = false;

  constructor(options: InformerOptions<T, R>) {
    this.name = options.name;
    this.#options = options;
    this.#transform = options.transform ?? ((object) => object as unknown as R);
    this.#clock = options.clock ?? systemClock;
    this.#logger = (options.logger ?? silentLogger).child({ informer: options.name });
    this.#metrics = options.registry ? informerMetrics(options.registry) : undefined;
    this.#backoffMaxMs = options.backoff?.maxMs ?? 30_000;
    this.#backoff = new Backoff({
      ...(options.backoff ?? { initialMs: 1000, maxMs: 30_000 }),
      random: options.random ?? Math.random,
    });
    this.#failureLog = new RecurringFailureLog(this.#logger, {
      message: 'list/watch failed; retrying',
      recoveredMessage: 'list/watch works again',
      now: () => this.#clock.monotonic(),
    });
  }

  /** Subscribes to changes; returns the unsubscribe function. */
  addHandlers(handlers: InformerHandlers<R>, options: SubscribeOptions = {}): () => void {
    // Synchronous, so no event can fall between the replay and the subscription.
    if (options.replay && handlers.add) {
      for (const entry of this.#cache.values()) this.#deliver(handlers, 'add', entry.record);
    }
    this.#handlers.add(handlers);
    return () => this.#handlers.delete(handlers);
  }

  /** Starts listing and watching in the background; failures are retried until {@link Informer.stop}. */
  start(): void {
    // Set here, not at construction: an informer built but never started (a serving worker's
    // leader-only parts) is no watch, and must not read as one that has not synced.
    if (!this.#synced) this.#metrics?.synced.set({ resource: this.name }, 0);
    this.#wanted = true;
    this.#metrics?.live.add(this);
    this.#loop ??= this.#supervise();
  }

  /** A start that comes while a stop is still ending is honoured once that round has ended. */
  async #supervise(): Promise<void> {
    while (this.#wanted) {
      if (this.#stop.signal.aborted) this.#stop = new AbortController();
      this.#round = this.#run();
      await this.#round;
    }
    this.#loop = undefined;
  }

  /** Whether the first list has completed (stays true across later re-lists, as in client-go). */
  hasSynced(): boolean {
    return this.#synced;
  }

  /** Resolves true once synced, or false if the informer or `signal` stops first. */
  waitForSync(signal?: AbortSignal): Promise<boolean> {
    if (this.#synced) return Promise.resolve(true);
    // Stopped for good (not started again while its last round ends), or the caller gave up.
    if ((this.#stop.signal.aborted && !this.#wanted) || signal?.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      // A caller that gives up must not stay behind: IPAM's lookups wait with a deadline each, and a
      // list that keeps failing would otherwise keep every one of them until it succeeds.
      const onAbort = () => {
        this.#syncWaiters.delete(waiter);
        resolve(false);
      };
      const waiter = (synced: boolean) => {
        signal?.removeEventListener('abort', onAbort);
        resolve(synced);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#syncWaiters.add(waiter);
    });
  }

  /** The cached record with `key` (`namespace/name` or `name`). */
  get(key: string): R | undefined {
    return this.#cache.get(key)?.record;
  }

  /** Every cached record. */
  list(): R[] {
    return Array.from(this.#cache.values(), (entry) => entry.record);
  }

  /** Every cached key. */
  keys(): string[] {
    return [...this.#cache.keys()];
  }

  /** How many records are cached. */
  get size(): number {
    return this.#cache.size;
  }

  /**
   * Milliseconds since the open watch stream was accepted by the API server or last delivered an event
   * or a bookmark, or undefined when no stream is open (connecting, listing, backing off, stopped) or
   * the open one was accepted less than a second ago and has delivered nothing yet. A reader that acts
   * on the absence of an object uses it to tell a current cache from one that may lag. The accept
   * counts because the API server bookmarks a watch only while its resource changes (or etcd reports
   * progress, every 10 minutes by default): a quiet resource's stream delivers nothing, and is reopened
   * after {@link watchIdleTimeoutMs} of silence. It counts only after the stream stayed open a second
   * without an error (a too-old resourceVersion is accepted, then refused in the stream), dated at
   * the accept: the changes since our resourceVersion follow it at once. What may still be missed is a
   * stream that stalls, until the idle timeout.
   */
  watchSilenceMs(): number | undefined {
    return this.#watchHeardAt === undefined ? undefined : this.#clock.monotonic() - this.#watchHeardAt;
  }

  /**
   * Milliseconds since the cache was last known current: its last list, the last watch the API server
   * accepted from its resourceVersion, or the last event or bookmark. On a healthy watch this stays
   * under the idle timeout (a quiet stream is reopened, and accepted, every 90 s); it grows without
   * bound while the watch is refused or cannot connect. A stream that is accepted and then fed
   * nothing cannot be told from a quiet one. Undefined until synced and while stopped.
   */
  staleMs(): number | undefined {
    if (!this.#synced || !this.#wanted || this.#currentAt === undefined) return undefined;
    return this.#clock.monotonic() - this.#currentAt;
  }

  /** The wall time of {@link Informer.staleMs}'s reference, for the gauge. */
  currentSinceEpochMs(): number | undefined {
    return this.#synced && this.#wanted && this.#currentAt !== undefined ? this.#currentAtEpochMs : undefined;
  }

  /** The cache was current at `at` (monotonic; now by default), unless known current later already. */
  #markCurrent(at = this.#clock.monotonic(), atEpochMs = this.#clock.now()): void {
    // Two numbers, no object: this runs for every event of every watch.
    if (this.#currentAt !== undefined && this.#currentAt > at) return;
    this.#currentAt = at;
    this.#currentAtEpochMs = atEpochMs;
  }

  /** The resourceVersion the next watch resumes from, if any. */
  get resourceVersion(): string | undefined {
    return this.#resourceVersion;
  }

  /** Stops watching and retrying; resolves when the background loop has ended. The cache stays readable. */
  async stop(): Promise<void> {
    this.#wanted = false;
    this.#metrics?.live.delete(this);
    // Also closes the watch stream, or gives up its connect (#watchOnce).
    this.#stop.abort();
    this.#resolveSync(false);
    await this.#round;
  }

  async #run(): Promise<void> {
    const stop = this.#stop.signal;
    while (!stop.aborted) {
      try {
        if (this.#resourceVersion === undefined) await this.#relist();
        if (stop.aborted) break;
        const { end, served: healthy } = await this.#watchOnce();
        this.#metrics?.restarts.inc({ resource: this.name, reason: end });
        if (end === 'gone') {
          this.#logger.info('resourceVersion expired (410 Gone); re-listing');
          this.#resourceVersion = undefined;
          // After a watch that served, at once; after one that was gone as it opened, with backoff,
          // so that a server answering 410 to every watch is not listed in a loop.
          if (healthy) this.#backoff.reset();
          else await sleep(this.#clock, this.#backoff.next(), stop);
          continue;
        }
        if (healthy) this.#failureLog.succeeded();
        if (healthy || end === 'timeout') {
          this.#backoff.reset();
          continue;
        }
        await sleep(this.#clock, this.#backoff.next(), stop);
      } catch (err) {
        if (stop.aborted) break;
        const status = httpStatusOfApiError(err);
        const gone = status === 410;
        // 410: the resourceVersion was compacted away. 400: the API server refuses it as a value
        // (`invalid resource version`, one a broken server listed with, or a bookmark gave): resumed
        // from again, it would be refused for ever and the cache never current again. Both re-list
        // (after the backoff), which gives a resourceVersion of the server's own.
        if (gone || status === 400) this.#resourceVersion = undefined;
        this.#metrics?.restarts.inc({ resource: this.name, reason: gone ? 'gone' : 'error' });
        const delay = Math.max(this.#backoff.next(), this.#retryAfterMs(err));
        this.#failureLog.failed(err, { retryInMs: Math.round(delay) });
        await sleep(this.#clock, delay, stop);
      }
    }
  }

  /**
   * The wait an answer's `Retry-After` asks for (429 or 503 from API Priority and Fairness), as
   * client-go honours it; capped at the backoff's longest delay, so that a hostile or mistaken value
   * cannot stall the cache for hours. 0 when the failure carries none.
   */
  #retryAfterMs(err: unknown): number {
    const seconds = (err as { retryAfterSeconds?: unknown } | null)?.retryAfterSeconds;
    if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds <= 0) return 0;
    return Math.min(seconds * 1000, this.#backoffMaxMs);
  }

  async #relist(): Promise<void> {
    const { list, labelSelector, fieldSelector, pageSize = 500 } = this.#options;
    const fresh = new Map<string, Entry<R>>();
    let resourceVersion: string | undefined;
    let cont: string | undefined;
    // A stop aborts the page in flight: an API server that does not answer must not hold a shutdown
    // for the page's deadline (60 s, longer than a pod's termination grace).
    const signal = this.#stop.signal;
    const { kind, path } = this.#options;
    // Continue tokens seen in this list: a token sent again is a paging loop, not progress.
    const tokens = new Set<string>();
    let skipped = 0;
    let example: string | undefined;
    try {
      do {
        const page = await list({ labelSelector, fieldSelector, limit: pageSize, _continue: cont, signal });
        const items: unknown = (page as { items?: unknown } | null)?.items;
        if (!Array.isArray(items)) {
          throw new UnavailableError(
            `list ${path}: the API server answered a list whose items is not an array`,
          );
        }
        const pageKind: unknown = (page as { kind?: unknown }).kind;
        if (kind !== undefined && pageKind !== undefined && pageKind !== `${kind}List`) {
          throw new UnavailableError(
            `list ${path}: the API server answered a ${shown(pageKind)}, not a ${kind}List`,
          );
        }
        for (const object of items) {
          const problem = objectProblem(object, kind);
          if (problem !== undefined) {
            skipped++;
            example ??= problem;
            continue;
          }
          const entry = this.#entryOf(object as T);
          if (entry) fresh.set(objectKey(object as T), entry);
        }
        const metadata: unknown = page.metadata;
        const next = isJsonObject(metadata) ? metadata['_continue'] : undefined;
        const version = isJsonObject(metadata) ? metadata['resourceVersion'] : undefined;
        if (next !== undefined && next !== null && typeof next !== 'string') {
          throw new UnavailableError(`list ${path}: the API server sent the continue token ${shown(next)}`);
        }
        cont = next || undefined;
        resourceVersion = typeof version === 'string' ? version : undefined;
        if (cont !== undefined) {
          if (tokens.has(cont)) {
            throw new UnavailableError(
              `list ${path}: the API server sent the continue token ${shown(cont)} a second time; a paging loop`,
            );
          }
          if (tokens.size >= maxListPages) {
            throw new UnavailableError(`list ${path}: more than ${maxListPages} pages; a paging loop`);
          }
          tokens.add(cont);
        }
      } while (cont && !signal.aborted);
    } catch (err) {
      this.#metrics?.lists.inc({ resource: this.name, result: 'error' });
      throw err;
    }
    if (signal.aborted) return;
    if (skipped > 0) {
      this.#metrics?.skipped.inc({ resource: this.name }, skipped);
      this.#logger.warn({ skipped, example }, 'the list held malformed objects; skipped');
    }
    this.#metrics?.lists.inc({ resource: this.name, result: 'success' });
    const old = this.#cache;
    this.#cache = fresh;
    this.#resourceVersion = resourceVersion ?? '';
    for (const [key, entry] of old) if (!fresh.has(key)) this.#notify('delete', entry.record);
    for (const [key, entry] of fresh) {
      const before = old.get(key);
      if (!before) this.#notify('add', entry.record);
      else if (before.resourceVersion !== entry.resourceVersion)
        this.#notify('update', entry.record, before.record);
    }
    this.#metrics?.cached.set({ resource: this.name }, fresh.size);
    this.#logger.debug({ objects: fresh.size, resourceVersion }, 'listed');
    this.#markCurrent();
    this.#failureLog.succeeded();
    if (!this.#synced) {
      this.#synced = true;
      this.#metrics?.synced.set({ resource: this.name }, 1);
      this.#resolveSync(true);
    }
  }

  /** Runs one watch stream to its end; throws on failures other than 410 and the inactivity timeout. */
  #watchOnce(): Promise<{ end: WatchEnd; served: boolean }> {
    const { path, watch, labelSelector, fieldSelector } = this.#options;
    const stop = this.#stop.signal;
    let events = 0;
    /** When the server accepted the watch (its 200); undefined until it has. */
    let openedAt: number | undefined;
    // Served: accepted, and then delivered an event or stayed open a while (not cut as it opened).
    const served = () =>
      openedAt !== undefined && (events > 0 || this.#clock.monotonic() - openedAt >= healthyWatchMs);
    return new Promise((resolve, reject) => {
      let failure: unknown;
      let gone = false;
      let ended = false;
      let handle: { abort(): void } | undefined;
      let unconfirm = (): void => undefined;
      const onOpen = () => {
        if (ended) return;
        const at = this.#clock.monotonic();
        const atEpochMs = this.#clock.now();
        openedAt = at;
        // Accepted from our resourceVersion: the server streams every change after it, so the cache
        // was current as of the accept (a quiet resource may get no bookmark for many minutes). But
        // the answer comes before the stream's first line, which may still be an error (a too-old
        // resourceVersion is a 200, then a 410 ERROR) or the backlog: the accept counts once the
        // stream has stayed open a moment without failing, dated when it came.
        unconfirm = this.#clock.setTimer(() => {
          if (ended || failure !== undefined || gone) return;
          this.#watchHeardAt = Math.max(this.#watchHeardAt ?? at, at);
          this.#markCurrent(at, atEpochMs);
        }, healthyWatchMs);
      };
      const onEvent = (type: WatchEventType, object: unknown) => {
        if (ended || failure !== undefined || gone) return;
        if (type === 'ERROR') {
          const status = object as { code?: number; message?: string } | undefined;
          if (status?.code === 410) gone = true;
          else
            failure = Object.assign(new Error(`watch error: ${status?.message ?? 'unknown'}`), {
              statusCode: status?.code,
            });
          handle?.abort();
          return;
        }
        // A damaged object ends the stream as a damaged line does: the informer resumes from the last
        // event it applied (skipping it would move the resourceVersion past a change it never saw).
        const problem = type === 'BOOKMARK' ? undefined : objectProblem(object, this.#options.kind);
        if (problem !== undefined) {
          failure = new UnavailableError(
            `watch ${path}: the API server sent a ${type} event with ${problem}; resuming`,
          );
          handle?.abort();
          return;
        }
        events++;
        this.#watchHeardAt = this.#clock.monotonic();
        this.#markCurrent();
        this.#apply(type, object as T);
      };
      const onDone = (err?: unknown) => {
        if (ended) return;
        ended = true;
        unconfirm();
        stop.removeEventListener('abort', onStop);
        this.#watchHeardAt = undefined;
        if (gone || httpStatusOfApiError(err) === 410) resolve({ end: 'gone', served: served() });
        else if (failure !== undefined) reject(failure);
        else if (!err || stop.aborted) resolve({ end: 'closed', served: served() });
        // Silence on an accepted stream is a quiet resource or a stalled stream: reopened at once. No
        // answer at all (or a refusal whose body never ends) is a failure, logged and backed off.
        else if ((err as { name?: string }).name === 'TimeoutError' && openedAt !== undefined)
          resolve({ end: 'timeout', served: served() });
        // A connection reset under a stream that had served (a network blip, a load balancer or API
        // server going away) is a dropped watch, reconnected at once as a clean end is; a refusal, a
        // damaged line, a connect that fails or a reset before the server accepted stay errors.
        else if (isTransportReset(err) && served()) resolve({ end: 'reset', served: true });
        else reject(err);
      };
      const params = {
        allowWatchBookmarks: true,
        resourceVersion: this.#resourceVersion,
        // As client-go: a random 5-10 minute server-side timeout spreads reconnects of many watchers.
        timeoutSeconds: Math.floor(300 + (this.#options.random ?? Math.random)() * 300),
        labelSelector,
        fieldSelector,
      };
      // client-node's Watch takes no signal and hands over its handle only once the server has
      // answered (within its idle timeout): a stop while it connects ends the stream here at
      // once, and the handle is aborted as soon as it comes.
      const onStop = () => {
        handle?.abort();
        onDone();
      };
      stop.addEventListener('abort', onStop, { once: true });
      watch(path, params, onEvent, onDone, onOpen).then(
        (opened) => {
          if (ended || failure !== undefined || gone) return opened.abort();
          handle = opened;
        },
        (err) => onDone(err ?? new Error('watch failed')),
      );
    });
  }

  #apply(type: WatchEventType, object: T): void {
    const resourceVersion = object.metadata?.resourceVersion;
    this.#metrics?.events.inc({ resource: this.name, type: type.toLowerCase() });
    if (type === 'BOOKMARK') {
      // Only a resourceVersion the API server could have sent: a watch resumed from `[object Object]`
      // would be refused (400), and cost a re-list.
      if (typeof resourceVersion === 'string' && resourceVersion !== '')
        this.#resourceVersion = resourceVersion;
      else
        this.#logger.debug(
          { resourceVersion: shown(resourceVersion) },
          'bookmark without a resourceVersion; ignored',
        );
      return;
    }
    const key = objectKey(object);
    const before = this.#cache.get(key);
    if (type === 'DELETED') {
      this.#cache.delete(key);
      if (before) this.#notify('delete', before.record);
    } else {
      const entry = this.#entryOf(object);
      if (entry) {
        this.#cache.set(key, entry);
        if (before) this.#notify('update', entry.record, before.record);
        else this.#notify('add', entry.record);
      }
    }
    if (resourceVersion) this.#resourceVersion = resourceVersion;
    this.#metrics?.cached.set({ resource: this.name }, this.#cache.size);
  }

  #entryOf(object: T): Entry<R> | undefined {
    try {
      return { resourceVersion: object.metadata?.resourceVersion ?? '', record: this.#transform(object) };
    } catch (err) {
      this.#metrics?.skipped.inc({ resource: this.name });
      this.#logger.warn(
        { object: shortKey(objectKey(object)), err: describeError(err) },
        'cannot transform object; skipped',
      );
      return undefined;
    }
  }

  #notify(kind: 'add' | 'update' | 'delete', record: R, oldRecord?: R): void {
    for (const handlers of this.#handlers) this.#deliver(handlers, kind, record, oldRecord);
  }

  #deliver(handlers: InformerHandlers<R>, kind: 'add' | 'update' | 'delete', record: R, oldRecord?: R): void {
    try {
      if (kind === 'add') handlers.add?.(record);
      else if (kind === 'update') handlers.update?.(oldRecord as R, record);
      else handlers.delete?.(record);
    } catch (err) {
      this.#logger.error({ err: describeError(err), event: kind }, 'informer handler failed');
    }
  }

  #resolveSync(synced: boolean): void {
    const waiters = this.#syncWaiters;
    this.#syncWaiters = new Set();
    for (const resolve of waiters) resolve(synced);
  }
}
