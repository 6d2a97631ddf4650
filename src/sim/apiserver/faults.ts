/**
 * Fault injection for reliability tests: added latency, failed requests (500, 503 or 429 with
 * Retry-After) at a rate or for the next N requests — before or after the write is committed —,
 * forced 410 Gone on lists and watches, and dropping open watches. Rates draw from a seeded generator, so a run repeats exactly.
 */
import { InvalidInputError, type KopsError } from '../../errors.ts';
import { injectedFailure } from './status.ts';

/** Which requests a fault applies to; absent fields match everything. */
export interface FaultScope {
  /** Plural resource name (`nodes`, `certificatesigningrequests`). */
  resource?: string;
  /** API verbs: get, list, watch, create, update, patch, delete, deletecollection. */
  verbs?: string[];
  /** The namespace the request addresses (namespaced resources only). */
  namespace?: string;
}

/** Failed responses to inject. */
export interface ErrorFault extends FaultScope {
  /** HTTP status to answer (default 503). */
  status?: 500 | 503 | 429;
  /** Fraction of matching requests to fail, 0..1 (drawn from the seeded generator). */
  rate?: number;
  /** Fail exactly the next `count` matching requests instead of a rate. */
  count?: number;
  /** The Retry-After sent with 503 and 429 (default 1). */
  retryAfterSeconds?: number;
  /**
   * Carry the write out first and then answer the error instead of its result: a create or update
   * that was committed though the client saw it fail (etcd committed, the answer was lost).
   */
  afterCommit?: boolean;
}

/** What happens to one request. */
export interface FaultPlan {
  latencyMs: number;
  error?: KopsError;
  retryAfterSeconds?: number;
  /** The request is carried out before `error` is answered (writes only). */
  afterCommit?: boolean;
  /** Answer the list or watch with 410 Gone. */
  expire: boolean;
}

interface ActiveError {
  fault: ErrorFault;
  remaining: number | undefined;
}

function matches(scope: FaultScope, resource: string, verb: string, namespace?: string): boolean {
  return (
    (!scope.resource || scope.resource === resource) &&
    (!scope.verbs || scope.verbs.includes(verb)) &&
    (!scope.namespace || scope.namespace === namespace)
  );
}

/** A small seeded PRNG (mulberry32): good enough for failure sampling and fully repeatable. */
function generator(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The fault controls of a simulated API server. */
export class FaultInjector {
  #latencies: { ms: number; scope: FaultScope }[] = [];
  #errors: ActiveError[] = [];
  #expirations: { remaining: number; scope: FaultScope }[] = [];
  #random = generator(1);
  readonly #watches = new Set<{ resource: string; close: () => void }>();

  /** Adds `ms` of latency to every matching request (0 removes latency for that scope). */
  latency(ms: number, scope: FaultScope = {}): void {
    this.#latencies = this.#latencies.filter((l) => !sameScope(l.scope, scope));
    if (ms > 0) this.#latencies.push({ ms, scope });
  }

  /** Fails matching requests at a rate, or exactly the next `count` of them. */
  errors(fault: ErrorFault): void {
    if (fault.rate === undefined && fault.count === undefined)
      throw new InvalidInputError('errors() needs a rate or a count');
    if (fault.rate !== undefined && (fault.rate < 0 || fault.rate > 1))
      throw new InvalidInputError('errors() rate must be between 0 and 1');
    this.#errors.push({ fault, remaining: fault.count });
  }

  /** Answers the next `count` matching lists or watches with 410 Gone (watches: an in-stream ERROR event). */
  expireNext(count = 1, scope: FaultScope = {}): void {
    this.#expirations.push({ remaining: count, scope });
  }

  /** Ends every open watch (of one resource, if given) now, as a restarting apiserver would; returns how many. */
  dropWatches(scope: { resource?: string } = {}): number {
    let dropped = 0;
    for (const watch of [...this.#watches]) {
      if (scope.resource && watch.resource !== scope.resource) continue;
      watch.close();
      dropped++;
    }
    return dropped;
  }

  /** Restarts the random generator, so a rate-based run repeats. */
  seed(seed: number): void {
    this.#random = generator(seed);
  }

  /** Removes every fault (open watches stay open). */
  reset(): void {
    this.#latencies = [];
    this.#errors = [];
    this.#expirations = [];
  }

  /** How many watches are open right now. */
  get openWatches(): number {
    return this.#watches.size;
  }

  /** Decides the faults for one request (called by the server). */
  plan(resource: string, verb: string, namespace?: string): FaultPlan {
    const plan: FaultPlan = { latencyMs: 0, expire: false };
    for (const l of this.#latencies)
      if (matches(l.scope, resource, verb, namespace)) plan.latencyMs = Math.max(plan.latencyMs, l.ms);
    for (const active of this.#errors) {
      if (!matches(active.fault, resource, verb, namespace)) continue;
      const hit =
        active.remaining !== undefined ? active.remaining > 0 : this.#random() < (active.fault.rate ?? 0);
      if (!hit) continue;
      if (active.remaining !== undefined) active.remaining--;
      const retryAfterSeconds = active.fault.retryAfterSeconds ?? 1;
      plan.error = injectedFailure(active.fault.status ?? 503, retryAfterSeconds);
      if (active.fault.status !== 500) plan.retryAfterSeconds = retryAfterSeconds;
      if (active.fault.afterCommit) plan.afterCommit = true;
      break;
    }
    this.#errors = this.#errors.filter((e) => e.remaining === undefined || e.remaining > 0);
    if (!plan.error && (verb === 'list' || verb === 'watch')) {
      const expiration = this.#expirations.find((e) => matches(e.scope, resource, verb));
      if (expiration) {
        expiration.remaining--;
        plan.expire = true;
        this.#expirations = this.#expirations.filter((e) => e.remaining > 0);
      }
    }
    return plan;
  }

  /** Registers an open watch so that `dropWatches` can end it; returns the function that unregisters it. */
  trackWatch(resource: string, close: () => void): () => void {
    const handle = { resource, close };
    this.#watches.add(handle);
    return () => this.#watches.delete(handle);
  }
}

function sameScope(a: FaultScope, b: FaultScope): boolean {
  return a.resource === b.resource && JSON.stringify(a.verbs ?? null) === JSON.stringify(b.verbs ?? null);
}
