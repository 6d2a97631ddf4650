/**
 * One-time use of a signed proof across every controller replica. A proof's digest is claimed by
 * creating a ConfigMap named after it in the apiserver: creation is atomic, so of two replicas (or two
 * requests) presenting the same signature exactly one wins and the other gets 409 AlreadyExists.
 * Each marker carries its expiry in a label; `collectGarbage` deletes those expired for longer than
 * {@link replayMarkerMarginMs}, since a proof that old fails the freshness check on every replica
 * whose clock is within that margin of the leader's.
 *
 * A proof is spent on one request: the marker records the SHA-256 of the request body that spent
 * it, and the same request presented again with the same proof is that request's retry, not a
 * replay. This matters because a write the apiserver answered with a 503 or not in time may still
 * have been committed: without the record the node's retry would meet its own marker and be refused
 * for good. Letting the byte-identical request through again gives nothing away — it can only
 * certify the keys named in that body, whose private halves never left the node — while the proof
 * presented with any other body (other keys) is refused as a replay.
 *
 * Any other failure of the apiserver (5xx, 429, no answer within the deadline, even a refusal of
 * our own permissions) is a dependency fault: the node is told to retry, never that it was refused.
 */

import { createHash } from 'node:crypto';
import type { CoreV1Api, KubeConfig, V1ConfigMap } from '@kubernetes/client-node';
import { bounded, withDeadline } from '../deadline.ts';
import { describeError } from '../errors.ts';
import { fromApiException, httpStatusOfApiError } from '../kube/api-errors.ts';
import { abortingWith } from '../kube/call-options.ts';
import { kubeAnswerError, kubeHttps, kubeJson } from '../kube/kube-https.ts';
import { type Logger, silentLogger } from '../log.ts';
import { type Clock, sleep, systemClock } from '../runtime/clock.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { dependencyFault } from './dependency.ts';

/**
 * Records proofs as used. `claim` is true the first time a digest is seen, and again whenever the
 * same request (`request`: the hex SHA-256 of its body) presents it; false when another request
 * already spent it. It throws a dependency fault when it cannot tell.
 */
export interface ReplayGuard {
  claim(digest: string, expiresAt: Date, request: string): Promise<boolean>;
}

/** The label every marker carries (its value: the expiry, seconds since the epoch). */
export const replayExpiresLabel = 'kops-controller.k8s.io/replay-guard-expires';
/** The annotation naming the request that spent the proof: the hex SHA-256 of its body. */
export const replayRequestAnnotation = 'kops-controller.k8s.io/replay-guard-request';
/** Marker names: this prefix and the first 40 hex digits of the digest. */
export const replayMarkerPrefix = 'bootstrap-proof-';
/** How long one apiserver call of `claim` may take before the node is told to retry (default). */
export const defaultReplayGuardTimeoutMs = 5_000;

/**
 * How long past its expiry a marker is kept. Every replica checks a proof's freshness on its own
 * clock, and the leader collects on its clock: a leader running d ahead of a replica would delete a
 * marker up to d before that replica stops accepting its proof, which could then be spent again. So
 * markers are kept this much longer, which covers clocks up to 15 minutes apart (three default
 * freshness windows, far beyond what NTP lets drift) and a leader's clock stepped forward by as much
 * and back. The cost is only that: markers are written for identity tokens and kops metal proofs,
 * and each stays 15 minutes longer.
 */
export const replayMarkerMarginMs = 15 * 60_000;

/** Whether a marker (or record) that expires at `expiresMs` may be forgotten at `nowMs`. */
function outlived(expiresMs: number, nowMs: number): boolean {
  return expiresMs + replayMarkerMarginMs < nowMs;
}

/** Markers listed per page by the collector. */
export const collectPageSize = 500;

/** The deadline of each API call of the collector (a page of the list, one delete). */
export const collectCallTimeoutMs = 30_000;

/** Options of {@link ConfigMapReplayGuard}. */
export interface ConfigMapReplayGuardOptions {
  core: CoreV1Api;
  /**
   * When given, markers are created and read over plain HTTPS with one keep-alive agent
   * (src/kube/kube-https.ts) instead of through `core`: a marker is written for every join whose proof
   * needs one (a GCE identity token, a kops metal record), and through client-node that write cost
   * the server more CPU than the certificate's signature
   * (docs/performance.md). `core` still collects expired markers (leader only, every few minutes).
   */
  kubeConfig?: KubeConfig;
  /** Where markers live (default kube-system, readable only by cluster admins). */
  namespace?: string;
  /** Deadline of each apiserver call of `claim` (default {@link defaultReplayGuardTimeoutMs}). */
  timeoutMs?: number;
}

/** How `claim` writes and reads markers; every failure but "it exists" is a typed error. */
interface Markers {
  /** Creates the marker; false when a marker of that name exists (409). */
  create(marker: V1ConfigMap, action: string): Promise<boolean>;
  /** The request annotation of an existing marker. */
  requestOf(name: string, action: string): Promise<string | undefined>;
}

/** Markers through client-node. */
function clientNodeMarkers(core: CoreV1Api, namespace: string, timeoutMs: number): Markers {
  const call = async <T>(action: string, work: () => Promise<T>): Promise<T> => {
    try {
      return await withDeadline(work(), timeoutMs, action);
    } catch (err) {
      throw httpStatusOfApiError(err) === 409 ? err : fromApiException(err, action);
    }
  };
  return {
    async create(body, action) {
      try {
        await call(action, () => core.createNamespacedConfigMap({ namespace, body }));
        return true;
      } catch (err) {
        if (httpStatusOfApiError(err) === 409) return false;
        throw err;
      }
    },
    async requestOf(name, action) {
      const marker = await call(action, () => core.readNamespacedConfigMap({ name, namespace }));
      return marker.metadata?.annotations?.[replayRequestAnnotation];
    },
  };
}

/** Markers over plain HTTPS (src/kube/kube-https.ts): no client-node on the join path. */
function httpsMarkers(kubeConfig: KubeConfig, namespace: string, timeoutMs: number): Markers {
  const call = kubeHttps(kubeConfig, { timeoutMs });
  const collection = `/api/v1/namespaces/${encodeURIComponent(namespace)}/configmaps`;
  return {
    async create(marker, action) {
      const body = JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', ...marker });
      const answer = await call({ action, method: 'POST', path: collection, body, maxBodyBytes: 64 * 1024 });
      if (answer.status === 409) return false;
      if (answer.status !== 201 && answer.status !== 200) throw kubeAnswerError(answer, action);
      return true;
    },
    async requestOf(name, action) {
      const path = `${collection}/${encodeURIComponent(name)}`;
      const answer = await call({ action, method: 'GET', path, maxBodyBytes: 64 * 1024 });
      if (answer.status !== 200) throw kubeAnswerError(answer, action);
      const marker = kubeJson<V1ConfigMap>(answer, action);
      return marker.metadata?.annotations?.[replayRequestAnnotation];
    },
  };
}

/** A {@link ReplayGuard} shared by all replicas through ConfigMaps in the apiserver. */
export class ConfigMapReplayGuard implements ReplayGuard {
  readonly #core: CoreV1Api;
  readonly #namespace: string;
  readonly #markers: Markers;

  constructor(options: ConfigMapReplayGuardOptions) {
    this.#core = options.core;
    this.#namespace = options.namespace ?? 'kube-system';
    const timeoutMs = options.timeoutMs ?? defaultReplayGuardTimeoutMs;
    this.#markers = options.kubeConfig
      ? httpsMarkers(options.kubeConfig, this.#namespace, timeoutMs)
      : clientNodeMarkers(this.#core, this.#namespace, timeoutMs);
  }

  /** Creates the marker of `digest` (hex) for `request`; when it exists, whether it is `request`'s. */
  async claim(digest: string, expiresAt: Date, request: string): Promise<boolean> {
    const name = markerName(digest);
    const marker: V1ConfigMap = {
      metadata: {
        name,
        labels: { [replayExpiresLabel]: String(Math.ceil(expiresAt.getTime() / 1000)) },
        annotations: { [replayRequestAnnotation]: request },
      },
    };
    let created: boolean;
    try {
      created = await this.#markers.create(marker, 'record a bootstrap proof as used');
    } catch (err) {
      throw dependencyFault('kubernetes-api', err);
    }
    if (created) return true;
    try {
      return (await this.#markers.requestOf(name, `read ${name}`)) === request;
    } catch (err) {
      // Also a 404: the marker was collected in between, so ask again (the proof has expired by then).
      throw dependencyFault('kubernetes-api', err);
    }
  }

  /**
   * Deletes the markers that expired more than {@link replayMarkerMarginMs} before `now`; returns how
   * many. The list is read in pages of {@link collectPageSize} and every call is bounded
   * ({@link collectCallTimeoutMs}) and given up when `signal` aborts (leadership lost): the sweep then
   * rejects with the signal's reason, or stops between deletes, so that an API server slow as the
   * lease is lost cannot hold the collector's stop.
   */
  async collectGarbage(now: Date, signal?: AbortSignal): Promise<number> {
    const namespace = this.#namespace;
    let deleted = 0;
    let cont: string | undefined;
    do {
      const page = await bounded(
        (cut) =>
          this.#core.listNamespacedConfigMap(
            {
              namespace,
              labelSelector: replayExpiresLabel,
              limit: collectPageSize,
              ...(cont ? { _continue: cont } : {}),
            },
            abortingWith(cut),
          ),
        collectCallTimeoutMs,
        'listing used bootstrap proofs',
        signal,
      ).catch((err: unknown) => {
        if (signal?.aborted) throw err;
        throw fromApiException(err, 'listing used bootstrap proofs');
      });
      for (const item of page.items) {
        if (signal?.aborted) return deleted;
        const expires = Number(item.metadata?.labels?.[replayExpiresLabel]);
        const name = item.metadata?.name;
        if (!name || !outlived(expires * 1000, now.getTime())) continue;
        try {
          await bounded(
            (cut) => this.#core.deleteNamespacedConfigMap({ name, namespace }, abortingWith(cut)),
            collectCallTimeoutMs,
            `deleting ${name}`,
            signal,
          );
          deleted++;
        } catch (err) {
          if (signal?.aborted) return deleted;
          if (httpStatusOfApiError(err) !== 404) throw fromApiException(err, `deleting ${name}`);
        }
      }
      cont = page.metadata?._continue || undefined;
    } while (cont && !signal?.aborted);
    return deleted;
  }
}

/** Options of a {@link ReplayMarkerCollector}. */
export interface ReplayMarkerCollectorOptions {
  guard: Pick<ConfigMapReplayGuard, 'collectGarbage'>;
  /** How often to sweep (default 10 minutes; markers live their freshness window and the margin). */
  intervalMs?: number;
  clock?: Clock;
  logger?: Logger;
}

/** Deletes expired replay markers periodically (leader only); a failed sweep is retried next time. */
export class ReplayMarkerCollector implements LeaderComponent {
  readonly name = 'bootstrap-replay-marker-collector';
  readonly #options: ReplayMarkerCollectorOptions;

  constructor(options: ReplayMarkerCollectorOptions) {
    this.#options = options;
  }

  async start(signal: AbortSignal): Promise<void> {
    const clock = this.#options.clock ?? systemClock;
    const logger = (this.#options.logger ?? silentLogger).child({ component: this.name });
    while (!signal.aborted) {
      try {
        const deleted = await this.#options.guard.collectGarbage(new Date(clock.now()), signal);
        if (deleted > 0) logger.debug({ deleted }, 'deleted expired bootstrap proof markers');
      } catch (err) {
        // Given up as the term ended: no failure.
        if (signal.aborted) break;
        logger.warn({ err: describeError(err) }, 'could not delete expired bootstrap proof markers');
      }
      await sleep(clock, this.#options.intervalMs ?? 10 * 60_000, signal);
    }
  }
}

/**
 * A {@link ReplayGuard} for one process (tests, `explain`, a single replica without an apiserver).
 * A record is kept {@link replayMarkerMarginMs} past its expiry, as markers are, so that a clock
 * stepped forward and back again cannot make a spent proof fresh and forgotten.
 */
export class MemoryReplayGuard implements ReplayGuard {
  readonly #used = new Map<string, { expiry: number; request: string }>();
  readonly #now: () => number;
  readonly #monotonic: () => number;
  #sweptAt = Number.NEGATIVE_INFINITY;

  /** `now`: the wall clock expiries are compared with; `monotonic`: the clock of the sweep's interval. */
  constructor(now: () => number = Date.now, monotonic: () => number = () => performance.now()) {
    this.#now = now;
    this.#monotonic = monotonic;
  }

  /** Records `digest` for `request`; false when another request recorded it and it is not yet forgotten. */
  async claim(digest: string, expiresAt: Date, request: string): Promise<boolean> {
    const now = this.#now();
    // Forgotten records are dropped at most once a second: walking them all on every claim made a
    // storm of n claims cost n² steps.
    const sweep = this.#monotonic();
    if (sweep - this.#sweptAt >= 1000) {
      for (const [d, use] of this.#used) if (outlived(use.expiry, now)) this.#used.delete(d);
      this.#sweptAt = sweep;
    }
    const used = this.#used.get(digest);
    if (used && !outlived(used.expiry, now)) return used.request === request;
    this.#used.set(digest, { expiry: expiresAt.getTime(), request });
    return true;
  }
}

/** What a marker records of the request that spent a proof: the hex SHA-256 of its exact body. */
export function requestDigest(body: Uint8Array): string {
  return createHash('sha256').update(body).digest('hex');
}

/** The ConfigMap name of a digest: a valid DNS label, 56 characters. */
export function markerName(digest: string): string {
  return (
    replayMarkerPrefix +
    digest
      .toLowerCase()
      .replace(/[^0-9a-f]/g, '')
      .slice(0, 40)
  );
}
