/**
 * One list+watch of a resource for several consumers, each keeping its own slim record of every object,
 * as client-go's shared informers serve every controller of a process from one watch. At 50,000 Nodes
 * a watch per consumer meant the same 50,000 objects listed, sent and decoded once per consumer (three
 * or four times in one process); here each object is decoded once and every view's transform takes
 * what its consumer needs from it.
 *
 * The cache holds, per object, a slot for each view's record. Views are registered before the first
 * start: the raw objects are dropped after the transforms, so a view added later could not be filled
 * without listing again.
 *
 * Holding: every consumer starts its view while it works and stops it when done, and the process may
 * hold the whole informer for its lifetime (`run` does, so a standby replica keeps its Node cache warm
 * and a new leader needs no re-list). The watch runs while anyone holds it.
 */
import type {
  KubeConfig,
  KubernetesObject,
  V1CertificateSigningRequest,
  V1Node,
} from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { describeError, InternalError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { csrCollectionPath } from './csr.ts';
import {
  Informer,
  type InformerCache,
  type InformerHandlers,
  type InformerOptions,
  kubeList,
  kubeWatch,
  objectKey,
  type SubscribeOptions,
  shortKey,
} from './informer.ts';

/** A record per view; a slot is undefined where that view's transform failed for the object. */
type Slots = readonly unknown[];

/** The shared list+watch; make the views with {@link SharedInformer.view}, then start. */
export class SharedInformer<T extends KubernetesObject> {
  readonly #informer: Informer<T, Slots>;
  readonly #transforms: { name: string; transform: (object: T) => unknown }[] = [];
  readonly #logger: Logger;
  #holders = 0;
  #started = false;
  #selfHeld = false;

  constructor(options: Omit<InformerOptions<T, Slots>, 'transform'>) {
    this.#logger = (options.logger ?? silentLogger).child({ informer: options.name });
    this.#informer = new Informer<T, Slots>({ ...options, transform: (object) => this.#slots(object) });
  }

  /** The informer's name, its `resource` label in the informer metrics. */
  get name(): string {
    return this.#informer.name;
  }

  /** Adds a consumer with its own record of each object; only before the first start. */
  view<R>(name: string, transform: (object: T) => R): InformerCache<R> {
    if (this.#started) {
      throw new InternalError(`view ${name} of informer ${this.name} added after it started`);
    }
    const slot = this.#transforms.length;
    this.#transforms.push({ name, transform });
    return new View<R>(`${this.name}/${name}`, this.#informer, slot, {
      hold: () => this.#hold(),
      release: () => this.#release(),
    });
  }

  /** Whether the first list has completed; with no view there is nothing to list, so true. */
  hasSynced(): boolean {
    return this.#transforms.length === 0 || this.#informer.hasSynced();
  }

  /** Holds the watch for the process (idempotent), besides whatever views hold it; without views, nothing. */
  start(): void {
    if (this.#selfHeld || this.#transforms.length === 0) return;
    this.#selfHeld = true;
    this.#hold();
  }

  /** Releases the process's hold; the watch stops once no view holds it either. */
  async stop(): Promise<void> {
    if (!this.#selfHeld) return;
    this.#selfHeld = false;
    await this.#release();
  }

  /**
   * Stops the watch whoever still holds it: the process is shutting down, or failed to start after
   * a consumer (the bootstrap server's guard) had taken its hold. Later releases do nothing.
   */
  async close(): Promise<void> {
    this.#selfHeld = false;
    this.#holders = 0;
    await this.#informer.stop();
  }

  #hold(): void {
    this.#started = true;
    if (this.#holders++ === 0) this.#informer.start();
  }

  async #release(): Promise<void> {
    if (this.#holders > 0 && --this.#holders === 0) await this.#informer.stop();
  }

  #slots(object: T): Slots {
    return this.#transforms.map(({ name, transform }) => {
      try {
        return transform(object);
      } catch (err) {
        this.#logger.warn(
          { view: name, object: shortKey(objectKey(object)), err: describeError(err) },
          'cannot transform object; skipped',
        );
        return undefined;
      }
    });
  }
}

/** One consumer's view: the shared cache, seen through its slot. */
class View<R> implements InformerCache<R> {
  readonly name: string;
  readonly #informer: InformerCache<Slots>;
  readonly #slot: number;
  readonly #holding: { hold(): void; release(): Promise<void> };
  #held = false;

  constructor(
    name: string,
    informer: InformerCache<Slots>,
    slot: number,
    holding: { hold(): void; release(): Promise<void> },
  ) {
    this.name = name;
    this.#informer = informer;
    this.#slot = slot;
    this.#holding = holding;
  }

  /** Holds the shared watch (idempotent). */
  start(): void {
    if (this.#held) return;
    this.#held = true;
    this.#holding.hold();
  }

  /** Releases this view's hold; the cache stays readable. */
  async stop(): Promise<void> {
    if (!this.#held) return;
    this.#held = false;
    await this.#holding.release();
  }

  /**
   * Subscribes to changes of this view's records. An object whose record appears (its transform
   * failed before and succeeds now) is an add, one whose record disappears a delete.
   */
  addHandlers(handlers: InformerHandlers<R>, options?: SubscribeOptions): () => void {
    const of = (slots: Slots) => slots[this.#slot] as R | undefined;
    return this.#informer.addHandlers(
      {
        add: (slots) => {
          const record = of(slots);
          if (record !== undefined) handlers.add?.(record);
        },
        update: (beforeSlots, afterSlots) => {
          const before = of(beforeSlots);
          const after = of(afterSlots);
          if (before !== undefined && after !== undefined) handlers.update?.(before, after);
          else if (after !== undefined) handlers.add?.(after);
          else if (before !== undefined) handlers.delete?.(before);
        },
        delete: (slots) => {
          const record = of(slots);
          if (record !== undefined) handlers.delete?.(record);
        },
      },
      options,
    );
  }

  hasSynced(): boolean {
    return this.#informer.hasSynced();
  }

  waitForSync(signal?: AbortSignal): Promise<boolean> {
    return this.#informer.waitForSync(signal);
  }

  get(key: string): R | undefined {
    return this.#informer.get(key)?.[this.#slot] as R | undefined;
  }

  list(): R[] {
    const records: R[] = [];
    for (const slots of this.#informer.list()) {
      const record = slots[this.#slot];
      if (record !== undefined) records.push(record as R);
    }
    return records;
  }

  /** Objects in the shared cache (a view whose transform failed for some has fewer records). */
  get size(): number {
    return this.#informer.size;
  }

  watchSilenceMs(): number | undefined {
    return this.#informer.watchSilenceMs();
  }

  staleMs(): number | undefined {
    return this.#informer.staleMs();
  }
}

/** What a process's shared watch of a whole resource is built from. */
type SharedWatchOptions = { registry?: Registry; logger?: Logger };

function sharedWatch<T extends KubernetesObject>(
  kubeConfig: KubeConfig,
  name: string,
  path: string,
  kind: string,
  options: SharedWatchOptions,
): SharedInformer<T> {
  return new SharedInformer<T>({
    name,
    path,
    kind,
    list: kubeList<T>(kubeConfig, path),
    watch: kubeWatch(kubeConfig),
    ...options,
  });
}

/**
 * The one watch of Nodes a process keeps, shared by its consumers: named `nodes` in the metrics, or
 * `name` for a watch that is not the process's (a serving worker's guard, whose metrics the primary
 * sums with its own).
 */
export function nodeInformer(
  kubeConfig: KubeConfig,
  options: SharedWatchOptions & { name?: string } = {},
): SharedInformer<V1Node> {
  const { name = 'nodes', ...rest } = options;
  return sharedWatch<V1Node>(kubeConfig, name, '/api/v1/nodes', 'Node', rest);
}

/**
 * The one watch of every CertificateSigningRequest a process keeps, shared by the kubelet CSR approver
 * and the expiry ledger's renewal recorder (named `certificatesigningrequests`). The bootstrap
 * queue's watch is another: it asks the API server for its own signer's requests only.
 */
export function csrInformer(
  kubeConfig: KubeConfig,
  options: SharedWatchOptions = {},
): SharedInformer<V1CertificateSigningRequest> {
  return sharedWatch<V1CertificateSigningRequest>(
    kubeConfig,
    'certificatesigningrequests',
    csrCollectionPath,
    'CertificateSigningRequest',
    options,
  );
}
