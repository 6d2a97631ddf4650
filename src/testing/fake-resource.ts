/**
 * An in-memory resource speaking the informer's list/watch contract (src/kube/informer.ts), for the
 * informer's own tests and those of what is built on it.
 */
import assert from 'node:assert/strict';
import type { KubernetesListObject, V1Pod } from '@kubernetes/client-node';
import type { ListOptions, WatchEventType, WatchFn } from '../kube/informer.ts';
import { settle } from './fake-clock.ts';

export interface Watcher {
  onEvent: (type: WatchEventType, object: unknown) => void;
  onDone: (err?: unknown) => void;
  closed?: boolean;
}

/**
 * An in-memory resource with the apiserver's list/watch contract: resourceVersions, paged lists,
 * watches that replay history after a resourceVersion, 410 Gone once history is compacted, and
 * hooks to fail lists, refuse watches and drop streams.
 */
export class FakeResource {
  objects = new Map<string, V1Pod>();
  history: { rv: number; type: WatchEventType; object: V1Pod }[] = [];
  rv = 100;
  compactedRv = 0;
  watchers = new Set<Watcher>();
  listCalls: ListOptions[] = [];
  watchParams: Record<string, unknown>[] = [];
  failLists = 0;
  failWatchConnects = 0;

  put(name: string, phase: string, labels: Record<string, string> = {}): void {
    const existed = this.objects.has(`default/${name}`);
    const pod: V1Pod = {
      metadata: { namespace: 'default', name, resourceVersion: String(++this.rv), labels },
      spec: { nodeName: 'node-1', containers: [{ name: 'c', image: 'big-image-name:latest' }] },
      status: { phase },
    };
    this.objects.set(`default/${name}`, pod);
    this.#emit(existed ? 'MODIFIED' : 'ADDED', pod);
  }

  remove(name: string): void {
    const pod = this.objects.get(`default/${name}`)!;
    this.objects.delete(`default/${name}`);
    this.#emit('DELETED', { ...pod, metadata: { ...pod.metadata, resourceVersion: String(++this.rv) } });
  }

  #emit(type: WatchEventType, object: V1Pod): void {
    this.history.push({ rv: this.rv, type, object });
    for (const w of this.watchers) w.onEvent(type, structuredClone(object));
  }

  bookmark(): void {
    for (const w of this.watchers) w.onEvent('BOOKMARK', { metadata: { resourceVersion: String(this.rv) } });
  }

  /** Ends every open stream, as an apiserver restart or a proxy timeout does. */
  dropWatches(): void {
    for (const w of [...this.watchers]) this.close(w);
  }

  /** Forgets the history so far, as etcd compaction does: older resourceVersions get 410 Gone. */
  compact(): void {
    this.compactedRv = this.rv;
  }

  /** Stops delivering to the open streams without closing them, so the informer misses what follows. */
  detach(): Watcher[] {
    const detached = [...this.watchers];
    this.watchers.clear();
    return detached;
  }

  close(w: Watcher, err?: unknown): void {
    this.watchers.delete(w);
    if (!w.closed) {
      w.closed = true;
      w.onDone(err);
    }
  }

  list = async (options: ListOptions): Promise<KubernetesListObject<V1Pod>> => {
    this.listCalls.push(options);
    await settle();
    if (this.failLists > 0) {
      this.failLists--;
      throw new TypeError('fetch failed');
    }
    const all = [...this.objects.values()];
    const start = Number(options._continue ?? 0);
    const end = options.limit ? start + options.limit : all.length;
    return {
      metadata: { resourceVersion: String(this.rv), _continue: end < all.length ? String(end) : undefined },
      items: structuredClone(all.slice(start, end)),
    };
  };

  watch: WatchFn = async (_path, params, onEvent, onDone, onOpen) => {
    this.watchParams.push(params);
    await settle();
    if (this.failWatchConnects > 0) {
      this.failWatchConnects--;
      onDone(Object.assign(new Error('Internal Server Error'), { statusCode: 500 }));
      return { abort() {} };
    }
    const from = Number(params['resourceVersion']);
    if (from < this.compactedRv) {
      onDone(Object.assign(new Error('Gone'), { statusCode: 410 }));
      return { abort() {} };
    }
    const watcher: Watcher = { onEvent, onDone };
    this.watchers.add(watcher);
    onOpen?.();
    for (const h of this.history) if (h.rv > from) onEvent(h.type, structuredClone(h.object));
    return {
      abort: () => queueMicrotask(() => this.close(watcher, new DOMException('aborted', 'AbortError'))),
    };
  };
}

/** Lets the event loop turn until `condition` holds (bounded, so a bug fails instead of hanging). */
export async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !condition(); i++) await settle();
  assert.ok(condition(), 'condition never became true');
}
