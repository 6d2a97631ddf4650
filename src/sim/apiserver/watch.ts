/**
 * WATCH streams: chunked JSON lines of ADDED/MODIFIED/DELETED events from a resourceVersion (or the
 * current state first), selector-aware transitions, BOOKMARKs, `timeoutSeconds`, and the in-stream
 * 410 ERROR a too-old resourceVersion gets.
 */
import type { ServerResponse } from 'node:http';
import { KopsError } from '../../errors.ts';
import type { FaultInjector } from './faults.ts';
import { expiredResourceVersion, matchesFilter, type ObjectFilter, parseResourceVersion } from './lists.ts';
import { apiVersionOf, type ResourceType } from './resources.ts';
import { statusOf } from './status.ts';
import type { ChangeEvent, SimStore, StoredEntry } from './store.ts';

/** The parameters of a WATCH request. */
export interface WatchParams {
  resourceVersion: string;
  allowWatchBookmarks: boolean;
  sendInitialEvents: boolean;
  /** Seconds until the server ends the stream; the apiserver's 30–60 minutes when absent. */
  timeoutSeconds?: number;
  /** Answer with the in-stream 410 (fault injection). */
  forceExpired: boolean;
}

/** Everything a watch stream needs. */
export interface WatchContext {
  store: SimStore;
  faults: FaultInjector;
  type: ResourceType;
  namespace: string | undefined;
  filter: ObjectFilter;
  params: WatchParams;
  bookmarkIntervalMs: number;
  /** Serializes an object for the stream (plain JSON, or a Table row for kubectl). */
  render: (entry: StoredEntry) => string;
}

function line(type: string, objectJson: string): string {
  return `{"type":"${type}","object":${objectJson}}\n`;
}

function inScope(ctx: WatchContext, entry: StoredEntry): boolean {
  if (ctx.namespace && entry.object.metadata.namespace !== ctx.namespace) return false;
  return matchesFilter(ctx.filter, entry.object);
}

/** The line for one change, or undefined when the watcher does not see it (selector transitions included). */
function eventLine(ctx: WatchContext, event: ChangeEvent): string | undefined {
  if (event.type !== ctx.type) return undefined;
  const now = inScope(ctx, event.entry);
  if (event.kind === 'ADDED') return now ? line('ADDED', ctx.render(event.entry)) : undefined;
  if (event.kind === 'DELETED') return now ? line('DELETED', ctx.render(event.entry)) : undefined;
  const before = event.previous ? inScope(ctx, event.previous) : false;
  if (now && before) return line('MODIFIED', ctx.render(event.entry));
  if (now) return line('ADDED', ctx.render(event.entry));
  // Leaving the selection is a deletion for this watcher, carrying the new resourceVersion.
  if (before) return line('DELETED', ctx.render(event.entry));
  return undefined;
}

function bookmarkLine(type: ResourceType, rv: number, initialEventsEnd: boolean): string {
  const metadata: Record<string, unknown> = { resourceVersion: String(rv) };
  if (initialEventsEnd) metadata['annotations'] = { 'k8s.io/initial-events-end': 'true' };
  return line('BOOKMARK', JSON.stringify({ kind: type.kind, apiVersion: apiVersionOf(type), metadata }));
}

/** Streams a watch on `res` until the timeout, the client leaving, or `dropWatches`. */
export function serveWatch(ctx: WatchContext, res: ServerResponse): void {
  res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private' });
  res.flushHeaders();
  const { store, params } = ctx;
  const writeError = (err: KopsError) => {
    res.end(line('ERROR', JSON.stringify(statusOf(err))));
  };
  if (params.forceExpired) {
    writeError(
      expiredResourceVersion(
        params.resourceVersion ? Number(params.resourceVersion) : store.resourceVersion,
        store.resourceVersion,
      ),
    );
    return;
  }
  const chunks: string[] = [];
  const fromScratch =
    params.sendInitialEvents || params.resourceVersion === '' || params.resourceVersion === '0';
  /** The version the watch starts after: a bookmark is only sent once the watch cache is past it. */
  let startedAt: number;
  try {
    if (fromScratch) {
      // A watch list without a resourceVersion is a consistent read: the cache catches up first.
      if (params.sendInitialEvents && params.resourceVersion === '') store.notifyProgress(ctx.type.plural);
      startedAt = store.watchCacheVersion(ctx.type);
      for (const entry of store.snapshot(ctx.type, ctx.namespace)) {
        if (inScope(ctx, entry)) chunks.push(line('ADDED', ctx.render(entry)));
      }
      if (params.sendInitialEvents) chunks.push(bookmarkLine(ctx.type, startedAt, true));
    } else {
      startedAt = parseResourceVersion(params.resourceVersion);
      for (const event of store.changesSince(startedAt, ctx.type)) {
        const text = eventLine(ctx, event);
        if (text) chunks.push(text);
      }
    }
  } catch (err) {
    if (err instanceof KopsError) {
      writeError(err);
      return;
    }
    throw err;
  }
  // Writes are batched so that a large initial state goes out in few chunks.
  for (let i = 0; i < chunks.length; i += 500) res.write(chunks.slice(i, i + 500).join(''));
  const unsubscribe = store.subscribe((event) => {
    const text = eventLine(ctx, event);
    if (text) res.write(text);
  }, ctx.type.plural);
  const timeoutMs = (params.timeoutSeconds ?? 1800 + Math.random() * 1800) * 1000;
  const timeout = setTimeout(() => finish(), timeoutMs).unref();
  // As the API server's cacher: a bookmark about every interval and 2 s before the timeout, carrying
  // the version its watch cache of this type has reached, and only once that is past the watch's
  // start. A quiet resource's watch therefore gets none until it changes or etcd reports progress.
  const bookmark = () => {
    const version = store.watchCacheVersion(ctx.type);
    if (version > startedAt) res.write(bookmarkLine(ctx.type, version, false));
  };
  const bookmarks = params.allowWatchBookmarks
    ? [
        setInterval(bookmark, ctx.bookmarkIntervalMs).unref(),
        ...(timeoutMs > 2000 ? [setTimeout(bookmark, timeoutMs - 2000).unref()] : []),
      ]
    : [];
  const untrack = ctx.faults.trackWatch(ctx.type.plural, () => finish());
  let finished = false;
  // Stops feeding the stream at once (a dropped watch gets no further events), then ends it.
  const finish = () => {
    if (finished) return;
    finished = true;
    unsubscribe();
    untrack();
    clearTimeout(timeout);
    for (const timer of bookmarks) clearTimeout(timer);
    res.end();
  };
  res.once('close', finish);
}
