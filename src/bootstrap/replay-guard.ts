/**
 * One-time use of a signed proof across every controller replica. A proof's digest is claimed by
 * creating a ConfigMap named after it in the apiserver: creation is atomic, so of two replicas (or two
 * requests) presenting the same signature exactly one wins and the other gets 409 AlreadyExists,
 * which means "replayed". Each marker carries its expiry in a label; `collectGarbage` deletes the
 * expired ones, since a proof that old fails the freshness check anyway.
 */
import type { CoreV1Api } from '@kubernetes/client-node';
import { describeError } from '../errors.ts';
import { fromApiException, httpStatusOfApiError } from '../kube/api-errors.ts';
import { type Clock, sleep, systemClock } from '../kube/clock.ts';
import { type Logger, silentLogger } from '../log.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';

/** Records proofs as used; `claim` is true the first time a digest is seen and false ever after. */
export interface ReplayGuard {
  claim(digest: string, expiresAt: Date): Promise<boolean>;
}

/** The label every marker carries (its value: the expiry, seconds since the epoch). */
export const replayExpiresLabel = 'kops-controller.k8s.io/replay-guard-expires';
/** Marker names: this prefix and the first 40 hex digits of the digest. */
export const replayMarkerPrefix = 'bootstrap-proof-';

/** Options of {@link ConfigMapReplayGuard}. */
export interface ConfigMapReplayGuardOptions {
  core: CoreV1Api;
  /** Where markers live (default kube-system, readable only by cluster admins). */
  namespace?: string;
}

/** A {@link ReplayGuard} shared by all replicas through ConfigMaps in the apiserver. */
export class ConfigMapReplayGuard implements ReplayGuard {
  readonly #core: CoreV1Api;
  readonly #namespace: string;

  constructor(options: ConfigMapReplayGuardOptions) {
    this.#core = options.core;
    this.#namespace = options.namespace ?? 'kube-system';
  }

  /** Creates the marker of `digest` (hex); false when it already exists (a replay). */
  async claim(digest: string, expiresAt: Date): Promise<boolean> {
    try {
      await this.#core.createNamespacedConfigMap({
        namespace: this.#namespace,
        body: {
          metadata: {
            name: markerName(digest),
            labels: { [replayExpiresLabel]: String(Math.ceil(expiresAt.getTime() / 1000)) },
          },
        },
      });
      return true;
    } catch (err) {
      if (httpStatusOfApiError(err) === 409) return false;
      throw fromApiException(err, 'recording a bootstrap proof as used');
    }
  }

  /** Deletes the markers that expired before `now`; returns how many. */
  async collectGarbage(now: Date): Promise<number> {
    const list = await this.#core
      .listNamespacedConfigMap({ namespace: this.#namespace, labelSelector: replayExpiresLabel })
      .catch((err: unknown) => {
        throw fromApiException(err, 'listing used bootstrap proofs');
      });
    let deleted = 0;
    for (const item of list.items) {
      const expires = Number(item.metadata?.labels?.[replayExpiresLabel]);
      const name = item.metadata?.name;
      if (!name || !(expires * 1000 < now.getTime())) continue;
      try {
        await this.#core.deleteNamespacedConfigMap({ name, namespace: this.#namespace });
        deleted++;
      } catch (err) {
        if (httpStatusOfApiError(err) !== 404) throw fromApiException(err, `deleting ${name}`);
      }
    }
    return deleted;
  }
}

/** Options of a {@link ReplayMarkerCollector}. */
export interface ReplayMarkerCollectorOptions {
  guard: Pick<ConfigMapReplayGuard, 'collectGarbage'>;
  /** How often to sweep (default 10 minutes; markers live about as long as the freshness window). */
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
        const deleted = await this.#options.guard.collectGarbage(new Date(clock.now()));
        if (deleted > 0) logger.debug({ deleted }, 'deleted expired bootstrap proof markers');
      } catch (err) {
        logger.warn({ err: describeError(err) }, 'could not delete expired bootstrap proof markers');
      }
      await sleep(clock, this.#options.intervalMs ?? 10 * 60_000, signal);
    }
  }
}

/** A {@link ReplayGuard} for one process (tests, `explain`, a single replica without an apiserver). */
export class MemoryReplayGuard implements ReplayGuard {
  readonly #used = new Map<string, number>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /** Records `digest`; false when it was recorded before and has not expired. */
  async claim(digest: string, expiresAt: Date): Promise<boolean> {
    const now = this.#now();
    for (const [d, expiry] of this.#used) if (expiry < now) this.#used.delete(d);
    if (this.#used.has(digest)) return false;
    this.#used.set(digest, expiresAt.getTime());
    return true;
  }
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
