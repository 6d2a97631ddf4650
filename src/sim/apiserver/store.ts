/**
 * The simulator's storage: every object of every type, one global resourceVersion, a bounded
 * history of changes for watches and consistent paging, and synchronous change notification.
 * Each stored object keeps its JSON text, so lists of 100,000 objects serialize by concatenation.
 */
import { randomUUID } from 'node:crypto';
import {
  cloneJson,
  isRecord,
  jsonEqual,
  type KubeObject,
  normalizeTimes,
  type SimUser,
  timestamp,
} from './objects.ts';
import {
  apiVersionOf,
  type ResourceType,
  resourceTypeByName,
  resourceTypeOfObject,
  resourceTypes,
} from './resources.ts';
import {
  alreadyExists,
  badRequest,
  conflict,
  expired,
  forbidden,
  invalid,
  notFound,
  staleObjectMessage,
} from './status.ts';
import { prepareForCreate, prepareForUpdate, validateObject, type WriteTarget } from './strategies.ts';

/** A stored object version and its serialized form. */
export interface StoredEntry {
  readonly key: string;
  readonly object: KubeObject;
  readonly json: string;
}

/** One change, as watches deliver it. */
export interface ChangeEvent {
  readonly resourceVersion: number;
  readonly type: ResourceType;
  readonly kind: 'ADDED' | 'MODIFIED' | 'DELETED';
  /** The object after the change; for a deletion, the last state with the deletion's resourceVersion. */
  readonly entry: StoredEntry;
  /** The version before the change (absent for ADDED). */
  readonly previous?: StoredEntry;
}

/** How a write is made: which part it addresses, who asks, and whether to store at all. */
export interface WriteOptions {
  /** `raw` (the default for direct store calls) keeps every field as given. */
  target?: WriteTarget;
  /** Stamped into CSRs as `spec.username/groups/uid`. */
  requester?: SimUser;
  /** Validate and answer without storing (`dryRun=All`). */
  dryRun?: boolean;
}

/** Preconditions a delete can carry. */
export interface DeletePreconditions {
  uid?: string;
  resourceVersion?: string;
}

/** Tuning of a store. */
export interface SimStoreOptions {
  /** How many changes are kept for watch resumption and paging (default 10,000). */
  historyLimit?: number;
}

/** Sorted keys and their entries; the view covers `keys[from..to)`. */
export interface SnapshotView {
  readonly keys: readonly string[];
  readonly entries: ReadonlyMap<string, StoredEntry>;
  readonly from: number;
  readonly to: number;
}

/** The first index in `keys[from..to)` whose key is not below `key`. */
export function lowerBound(keys: readonly string[], key: string, from: number, to: number): number {
  let low = from;
  let high = to;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if ((keys[mid] as string) < key) low = mid + 1;
    else high = mid;
  }
  return low;
}

interface Table {
  readonly entries: Map<string, StoredEntry>;
  sortedKeys: string[] | undefined;
  /** The resourceVersion of the last change to any object of this type. */
  lastChange: number;
  /** The resourceVersion of the last etcd progress notification this type's watch cache got. */
  progress: number;
  /** The newest change of this type dropped from the history: a watch from before it is 410 Gone. */
  dropped: number;
  /** The last past state reconstructed for a paged or exact list. */
  past?: { resourceVersion: number; keys: string[]; entries: Map<string, StoredEntry> };
}

const nameAlphabet = 'bcdfghjklmnpqrstvwxz2456789';

function keyOf(namespace: string | undefined, name: string): string {
  return namespace ? `${namespace}/${name}` : name;
}

/** A private copy of a stored object, made from its JSON (cheaper than a structured clone). */
function copyOf(entry: StoredEntry): KubeObject {
  return JSON.parse(entry.json) as KubeObject;
}

function entryOf(key: string, object: KubeObject): StoredEntry {
  return { key, object, json: JSON.stringify(object) };
}

function resolveType(resource: string): ResourceType {
  const type = resourceTypeByName(resource);
  if (!type || type.reviewOnly) {
    throw badRequest(
      `unknown resource "${resource}": use one of ${resourceTypes
        .filter((t) => !t.reviewOnly)
        .map((t) => t.plural)
        .join(', ')}`,
    );
  }
  return type;
}

function typeOfObject(obj: KubeObject): ResourceType {
  if (!isRecord(obj) || !isRecord(obj.metadata))
    throw badRequest('object has no metadata: give apiVersion, kind and metadata');
  const type = resourceTypeOfObject(obj.apiVersion, obj.kind);
  if (!type || type.reviewOnly) {
    throw badRequest(
      `no kind "${String(obj.kind)}" is registered for version "${String(obj.apiVersion)}" in the simulator`,
    );
  }
  return type;
}

/** Direct, synchronous access to the simulated cluster's objects; every write behaves like an API write. */
export class SimStore {
  readonly #tables = new Map<string, Table>();
  /** Listeners by type plural; '' holds those that want every type. */
  readonly #listeners = new Map<string, Set<(event: ChangeEvent) => void>>();
  #history: ChangeEvent[] = [];
  #historyLimit: number;
  /** Watches and pages from this resourceVersion or newer can be served from history. */
  #oldest = 0;
  /** Up to where {@link compact} forgot history. */
  #compacted = 0;
  #rv = 0;

  constructor(options: SimStoreOptions = {}) {
    this.#historyLimit = options.historyLimit ?? 10_000;
    for (const type of resourceTypes) {
      this.#tables.set(type.plural, {
        entries: new Map(),
        sortedKeys: [],
        lastChange: 0,
        progress: 0,
        dropped: 0,
      });
    }
    for (const name of ['default', 'kube-system', 'kube-public', 'kube-node-lease']) {
      this.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
    }
  }

  /** The current (latest) resourceVersion. */
  get resourceVersion(): number {
    return this.#rv;
  }

  /** The oldest resourceVersion a watch or continue token may still start from. */
  get oldestResourceVersion(): number {
    return this.#oldest;
  }

  /** How many changes are kept; lowering it drops the oldest at once. */
  get historyLimit(): number {
    return this.#historyLimit;
  }

  set historyLimit(limit: number) {
    this.#historyLimit = Math.max(0, Math.floor(limit));
    this.#trimHistory(true);
  }

  /**
   * Forgets history up to `resourceVersion` (default: all of it), like an etcd compaction: watches
   * and continue tokens from older versions then get 410 Gone.
   */
  compact(resourceVersion: number = this.#rv): void {
    const rv = Math.min(resourceVersion, this.#rv);
    this.#history = this.#history.filter((e) => e.resourceVersion > rv);
    this.#oldest = Math.max(this.#oldest, rv);
    this.#compacted = Math.max(this.#compacted, rv);
    for (const table of this.#tables.values()) delete table.past;
  }

  /** Creates an object (apiVersion and kind say which type); returns it as stored. */
  create(obj: KubeObject, options: WriteOptions = {}): KubeObject {
    return copyOf(this.createEntry(typeOfObject(obj), obj, options));
  }

  /** Reads one object; cluster-scoped types ignore the namespace. */
  get(resource: string, namespace: string | undefined, name: string): KubeObject | undefined {
    const type = resolveType(resource);
    const entry = this.entry(type, namespace, name);
    return entry ? copyOf(entry) : undefined;
  }

  /** Every object of a type, optionally in one namespace, in key order. */
  list(resource: string, namespace?: string): KubeObject[] {
    const type = resolveType(resource);
    return this.snapshot(type, namespace).map(copyOf);
  }

  /** Replaces an object; a `metadata.resourceVersion` in it must match the stored one. */
  update(obj: KubeObject, options: WriteOptions = {}): KubeObject {
    return copyOf(this.updateEntry(typeOfObject(obj), obj, options));
  }

  /** Reads, changes and writes back an object in one step (no conflict possible). */
  mutate(
    resource: string,
    namespace: string | undefined,
    name: string,
    change: (obj: KubeObject) => void,
  ): KubeObject {
    const type = resolveType(resource);
    const entry = this.entry(type, namespace, name);
    if (!entry) throw notFound(type, name);
    const copy = JSON.parse(entry.json) as KubeObject;
    change(copy);
    return copyOf(this.updateEntry(type, copy, {}));
  }

  /** Deletes an object (objects with finalizers are only marked); returns its last state. */
  delete(resource: string, namespace: string | undefined, name: string): KubeObject {
    return copyOf(this.deleteEntry(resolveType(resource), namespace, name, {}, {}));
  }

  /** Calls `listener` synchronously after every change (of `resource` only, if given); returns the stopper. */
  subscribe(listener: (event: ChangeEvent) => void, resource?: string): () => void {
    // Watches subscribe per type, so a change costs only the watches of its own type.
    const key = resource === undefined ? '' : resolveType(resource).plural;
    let set = this.#listeners.get(key);
    if (!set) {
      set = new Set();
      this.#listeners.set(key, set);
    }
    set.add(listener);
    return () => set.delete(listener);
  }

  /** The stored entry of one object. */
  entry(type: ResourceType, namespace: string | undefined, name: string): StoredEntry | undefined {
    return this.#table(type).entries.get(keyOf(type.namespaced ? namespace : undefined, name));
  }

  /**
   * The objects of a type in key order, as they were at `atResourceVersion` (default: now), as a view
   * that costs O(log n) to make when the type has not changed since; a version older than the kept
   * history is 410 Gone.
   */
  view(type: ResourceType, namespace?: string, atResourceVersion?: number): SnapshotView {
    const table = this.#table(type);
    let keys: string[];
    let entries: ReadonlyMap<string, StoredEntry> = table.entries;
    if (atResourceVersion === undefined || atResourceVersion >= table.lastChange) {
      table.sortedKeys ??= [...table.entries.keys()].sort();
      keys = table.sortedKeys;
    } else {
      if (atResourceVersion < this.#oldest)
        throw expired(`too old resource version: ${atResourceVersion} (${this.#oldest})`);
      // A past state never changes, so the pages of one list share one reconstruction.
      if (table.past?.resourceVersion !== atResourceVersion) {
        const past = new Map(table.entries);
        for (let i = this.#history.length - 1; i >= 0; i--) {
          const event = this.#history[i] as ChangeEvent;
          if (event.resourceVersion <= atResourceVersion) break;
          if (event.type !== type) continue;
          if (event.kind === 'ADDED') past.delete(event.entry.key);
          else past.set(event.entry.key, event.previous as StoredEntry);
        }
        table.past = { resourceVersion: atResourceVersion, keys: [...past.keys()].sort(), entries: past };
      }
      entries = table.past.entries;
      keys = table.past.keys;
    }
    if (!type.namespaced || !namespace) return { keys, entries, from: 0, to: keys.length };
    // Keys sort as `namespace/name`, so one namespace is one contiguous range, ending before `namespace0`
    // ('0' follows '/' in ASCII).
    const prefix = `${namespace}/`;
    return {
      keys,
      entries,
      from: lowerBound(keys, prefix, 0, keys.length),
      to: lowerBound(keys, `${namespace}0`, 0, keys.length),
    };
  }

  /** The objects of a type in key order (see {@link view}), as an array. */
  snapshot(type: ResourceType, namespace?: string, atResourceVersion?: number): StoredEntry[] {
    const { keys, entries, from, to } = this.view(type, namespace, atResourceVersion);
    const out: StoredEntry[] = [];
    for (let i = from; i < to; i++) out.push(entries.get(keys[i] as string) as StoredEntry);
    return out;
  }

  /**
   * The changes after `resourceVersion`, oldest first (of one type, if given); 410 Gone when history no
   * longer reaches back. With a type, only that type's dropped changes count, as the API server's watch
   * cache of each resource keeps its own window: churn of pods does not expire a quiet Node watch.
   */
  changesSince(resourceVersion: number, type?: ResourceType): ChangeEvent[] {
    const oldest = type ? Math.max(this.#compacted, this.#table(type).dropped) : this.#oldest;
    if (resourceVersion < oldest) throw expired(`too old resource version: ${resourceVersion} (${oldest})`);
    let low = 0;
    let high = this.#history.length;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if ((this.#history[mid] as ChangeEvent).resourceVersion <= resourceVersion) low = mid + 1;
      else high = mid;
    }
    const since = this.#history.slice(low);
    return type ? since.filter((event) => event.type === type) : since;
  }

  /**
   * How far the API server's watch cache of a type has got: its last change, or a later etcd progress
   * notification. Its bookmarks carry this version, and only a watch started before it gets one.
   */
  watchCacheVersion(type: ResourceType): number {
    const table = this.#table(type);
    return Math.max(table.lastChange, table.progress);
  }

  /**
   * An etcd progress notification to the watch caches of one type (or all): they learn the current
   * resourceVersion without a change of their own. etcd sends one every 10 minutes by default; the API
   * server also asks for one before it serves a consistent list from its cache.
   */
  notifyProgress(resource?: string): void {
    const tables = resource === undefined ? this.#tables.values() : [this.#table(resolveType(resource))];
    for (const table of tables) table.progress = this.#rv;
  }

  /** Creates an object of a known type. */
  createEntry(type: ResourceType, input: KubeObject, options: WriteOptions): StoredEntry {
    const target = options.target ?? 'raw';
    const obj = cloneJson(input);
    normalizeTimes(obj);
    obj.apiVersion = apiVersionOf(type);
    obj.kind = type.kind;
    const meta = obj.metadata;
    if (!type.namespaced) delete meta.namespace;
    if (type.namespaced && meta.namespace && !this.entry(namespaceType, undefined, meta.namespace)) {
      throw notFound(namespaceType, meta.namespace);
    }
    if (!meta.name && meta.generateName) meta.name = meta.generateName + randomSuffix();
    prepareForCreate(type, obj, target, options.requester);
    const keepGiven = target === 'raw';
    meta.uid = keepGiven && meta.uid ? meta.uid : randomUUID();
    meta.creationTimestamp = keepGiven && meta.creationTimestamp ? meta.creationTimestamp : timestamp();
    meta.generation = 1;
    delete meta.resourceVersion;
    delete meta.deletionTimestamp;
    delete meta.deletionGracePeriodSeconds;
    const errors = validateObject(type, obj, undefined, target);
    if (errors.length) throw invalid(type, meta.name ?? '', errors);
    const name = meta.name as string;
    if (this.entry(type, meta.namespace, name)) throw alreadyExists(type, name);
    if (options.dryRun) return entryOf(keyOf(meta.namespace, name), obj);
    return this.#commit(type, 'ADDED', obj, undefined);
  }

  /** Updates an object of a known type; `target` decides which fields the write may change. */
  updateEntry(type: ResourceType, input: KubeObject, options: WriteOptions): StoredEntry {
    const target = options.target ?? 'raw';
    const name = input.metadata?.name;
    if (!name)
      throw invalid(type, '', [{ type: 'Required', field: 'metadata.name', detail: 'name is required' }]);
    const old = this.entry(type, input.metadata.namespace, name);
    if (!old) throw notFound(type, name);
    const givenRv = input.metadata.resourceVersion;
    if (givenRv !== undefined && givenRv !== '' && givenRv !== old.object.metadata.resourceVersion) {
      throw conflict(type, name, staleObjectMessage);
    }
    let obj = cloneJson(input);
    normalizeTimes(obj);
    obj.apiVersion = apiVersionOf(type);
    obj.kind = type.kind;
    obj = prepareForUpdate(type, obj, old.object, target);
    const meta = obj.metadata;
    const oldMeta = old.object.metadata;
    meta.uid = oldMeta.uid;
    meta.creationTimestamp = oldMeta.creationTimestamp;
    if (type.namespaced) meta.namespace = oldMeta.namespace;
    else delete meta.namespace;
    if (oldMeta.deletionTimestamp) {
      meta.deletionTimestamp = oldMeta.deletionTimestamp;
      meta.deletionGracePeriodSeconds = oldMeta.deletionGracePeriodSeconds ?? 0;
    } else {
      delete meta.deletionTimestamp;
      delete meta.deletionGracePeriodSeconds;
    }
    meta.generation = (oldMeta.generation ?? 1) + (specChanged(obj, old.object) ? 1 : 0);
    meta.resourceVersion = oldMeta.resourceVersion;
    const errors = validateObject(type, obj, old.object, target);
    if (errors.length) throw invalid(type, name, errors);
    // An update that changes nothing is not written: no new resourceVersion, no watch event.
    if (jsonEqual(obj, old.object)) return old;
    if (options.dryRun) return entryOf(old.key, obj);
    if (meta.deletionTimestamp && !meta.finalizers?.length) {
      this.#commit(type, 'MODIFIED', obj, old);
      return this.#remove(type, this.entry(type, meta.namespace, name) as StoredEntry);
    }
    return this.#commit(type, 'MODIFIED', obj, old);
  }

  /** Deletes an object of a known type, honouring preconditions and finalizers. */
  deleteEntry(
    type: ResourceType,
    namespace: string | undefined,
    name: string,
    preconditions: DeletePreconditions,
    options: { dryRun?: boolean },
  ): StoredEntry {
    const old = this.entry(type, namespace, name);
    if (!old) throw notFound(type, name);
    if (type === namespaceType && protectedNamespaces.includes(name)) {
      throw forbidden(`namespaces "${name}" is forbidden: this namespace may not be deleted`, type, name);
    }
    const meta = old.object.metadata;
    if (preconditions.uid && preconditions.uid !== meta.uid) {
      throw conflict(
        type,
        name,
        `Precondition failed: UID in precondition: ${preconditions.uid}, UID in object meta: ${meta.uid}`,
      );
    }
    if (preconditions.resourceVersion && preconditions.resourceVersion !== meta.resourceVersion) {
      throw conflict(
        type,
        name,
        `Precondition failed: ResourceVersion in precondition: ${preconditions.resourceVersion}, ResourceVersion in object meta: ${meta.resourceVersion}`,
      );
    }
    if (options.dryRun) return old;
    if (meta.finalizers?.length) {
      if (meta.deletionTimestamp) return old;
      const marked = cloneJson(old.object);
      marked.metadata.deletionTimestamp = timestamp();
      marked.metadata.deletionGracePeriodSeconds = 0;
      return this.#commit(type, 'MODIFIED', marked, old);
    }
    if (type === namespaceType) {
      // The namespace controller's work, done at once: everything in the namespace goes first.
      for (const t of resourceTypes) {
        if (!t.namespaced) continue;
        for (const entry of this.snapshot(t, name)) this.#remove(t, entry);
      }
    }
    return this.#remove(type, old);
  }

  #table(type: ResourceType): Table {
    return this.#tables.get(type.plural) as Table;
  }

  #commit(
    type: ResourceType,
    kind: 'ADDED' | 'MODIFIED',
    obj: KubeObject,
    previous: StoredEntry | undefined,
  ): StoredEntry {
    this.#rv++;
    obj.metadata.resourceVersion = String(this.#rv);
    const key = keyOf(type.namespaced ? obj.metadata.namespace : undefined, obj.metadata.name as string);
    const entry = entryOf(key, obj);
    const table = this.#table(type);
    if (!table.entries.has(key)) table.sortedKeys = undefined;
    table.entries.set(key, entry);
    table.lastChange = this.#rv;
    this.#record({ resourceVersion: this.#rv, type, kind, entry, ...(previous ? { previous } : {}) });
    return entry;
  }

  #remove(type: ResourceType, old: StoredEntry): StoredEntry {
    this.#rv++;
    const table = this.#table(type);
    table.entries.delete(old.key);
    table.sortedKeys = undefined;
    table.lastChange = this.#rv;
    const last = cloneJson(old.object);
    last.metadata.resourceVersion = String(this.#rv);
    const entry = entryOf(old.key, last);
    this.#record({ resourceVersion: this.#rv, type, kind: 'DELETED', entry, previous: old });
    return entry;
  }

  #record(event: ChangeEvent): void {
    this.#history.push(event);
    this.#trimHistory(false);
    for (const key of ['', event.type.plural]) {
      const set = this.#listeners.get(key);
      if (set) for (const listener of set) listener(event);
    }
  }

  #trimHistory(exact: boolean): void {
    // Trimming in batches keeps appends amortised O(1).
    const slack = exact ? 0 : Math.ceil(this.#historyLimit / 4);
    if (this.#history.length <= this.#historyLimit + slack) return;
    const drop = this.#history.length - this.#historyLimit;
    const lastDropped = this.#history[drop - 1] as ChangeEvent;
    for (let i = 0; i < drop; i++) {
      const event = this.#history[i] as ChangeEvent;
      this.#table(event.type).dropped = event.resourceVersion;
    }
    this.#history = this.#history.slice(drop);
    this.#oldest = Math.max(this.#oldest, lastDropped.resourceVersion);
  }
}

const namespaceType = resourceTypeByName('namespaces') as ResourceType;
/** The namespaces the NamespaceLifecycle admission plugin never lets go. */
const protectedNamespaces = ['default', 'kube-system', 'kube-public'];

function randomSuffix(): string {
  let out = '';
  for (let i = 0; i < 5; i++) out += nameAlphabet[Math.floor(Math.random() * nameAlphabet.length)];
  return out;
}

/** Whether anything besides metadata and status differs: that is what bumps `metadata.generation`. */
function specChanged(a: KubeObject, b: KubeObject): boolean {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  for (const key of keys) {
    if (key === 'metadata' || key === 'status' || key === 'apiVersion' || key === 'kind') continue;
    if (!jsonEqual(a[key], b[key])) return true;
  }
  return false;
}
