/**
 * The leader's export of the ledger: `kops_certificate_expiry_earliest_timestamp_seconds{kind,
 * instance_group}`, the earliest `notAfter` (seconds since the epoch, Prometheus' convention for
 * timestamps) per certificate kind and instance group. Only the leader exports it, as it does the
 * `kops_*` validation gauges, so that a dashboard summing or alerting over replicas sees one series
 * each; it reads the ledger from the API server, so a new leader exports at once what the old one knew.
 * `kops_certificate_expiry_earliest_lifetime_seconds` is the same certificate's whole validity, so
 * that an alert can tell a one-day kubelet certificate waiting for its routine renewal from one whose
 * renewal is late.
 */
import { Gauge, type Registry } from 'prom-client';
import { bounded } from '../deadline.ts';
import { TimeoutError } from '../errors.ts';
import { sharedMetric } from '../kube/metrics.ts';
import { type Logger, RecurringFailureLog, silentLogger } from '../log.ts';
import { type Clock, sleep, systemClock } from '../runtime/clock.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import {
  caKind,
  type EarliestExpiry,
  earliestByKindAndGroup,
  epochSeconds,
  expiringWithin,
  type LedgerEntry,
  servingKind,
} from './ledger.ts';
import type { ConfigMapLedgerStore } from './store.ts';

export const expiryGaugeName = 'kops_certificate_expiry_earliest_timestamp_seconds';
/** The lifetime of that same certificate: the alerts tell a renewal that is due from one that is late. */
export const lifetimeGaugeName = 'kops_certificate_expiry_earliest_lifetime_seconds';

/** How far ahead the certificates of deleted nodes are removed: the warning alert's window. */
const pruneWindowSeconds = 14 * 86_400;
/** Node lookups per read at most; the rest wait for the next read. */
const maxNodeLookups = 200;
/** Node lookups in flight at once. */
const nodeLookupConcurrency = 8;
/** The default deadline of each step of a read (see {@link CertificateExpiryGaugeOptions.readTimeoutMs}). */
const defaultReadTimeoutMs = 30_000;

/** The component each registry's gauge reads from. */
const exporters = new WeakMap<Registry, CertificateExpiryGauge>();

/** Options of {@link CertificateExpiryGauge}. */
export interface CertificateExpiryGaugeOptions {
  store: Pick<ConfigMapLedgerStore, 'list' | 'remove'>;
  /**
   * Whether a Node of that name exists (it throws when it cannot tell). Given, the certificates of
   * deleted nodes that would otherwise enter the alert window are removed from the ledger instead.
   */
  nodeExists?: (name: string) => Promise<boolean>;
  registry: Registry;
  /** Run before each read: the replica's own pending entries are written, so the leader sees its own at once. */
  beforeRead?: () => Promise<void>;
  /** How often the ledger is read (default 60 s; the alert windows are days). */
  intervalMs?: number;
  /**
   * The deadline of each step of a read (default 30 s): the flush before it, the ledger's list, the
   * Node lookups together (8 at a time; a Node not looked up in time counts as existing), the removal.
   */
  readTimeoutMs?: number;
  clock?: Clock;
  logger?: Logger;
}

/** The leader component keeping the expiry gauge. */
export class CertificateExpiryGauge implements LeaderComponent {
  readonly name = 'certificate-expiry-gauge';
  readonly #options: CertificateExpiryGaugeOptions;
  #earliest: EarliestExpiry[] | undefined;

  constructor(options: CertificateExpiryGaugeOptions) {
    this.#options = options;
    // One gauge per registry; it exports what the registry's newest component read.
    exporters.set(options.registry, this);
    const exported = (name: string, help: string, value: (e: EarliestExpiry) => number) =>
      sharedMetric(
        options.registry,
        name,
        () =>
          new Gauge({
            name,
            help,
            labelNames: ['kind', 'instance_group'],
            registers: [options.registry],
            collect() {
              this.reset();
              for (const e of exporters.get(options.registry)?.earliest() ?? []) {
                this.set({ kind: e.kind, instance_group: e.instanceGroup }, value(e));
              }
            },
          }),
      );
    exported(
      expiryGaugeName,
      'Earliest expiry (notAfter, seconds since the epoch) of the certificates kops-controller issued or holds, per kind and instance group.',
      (e) => e.notAfter,
    );
    exported(
      lifetimeGaugeName,
      'Whole validity (notAfter - notBefore, seconds) of the certificate that expires first, per kind and instance group.',
      (e) => e.lifetime,
    );
  }

  /** The earliest expiries last read; undefined while not leading or before the first read. */
  earliest(): readonly EarliestExpiry[] | undefined {
    return this.#earliest;
  }

  /**
   * Reads the ledger once, without the certificates of deleted nodes; on failure the last values stay.
   * Each step has a deadline (`readTimeoutMs`), and the read gives up as soon as `signal` aborts
   * (leadership ended), rejecting with its reason: it then publishes nothing and starts no removal
   * (one already under way goes on to its end, each shard written whole or not at all).
   */
  async refresh(signal: AbortSignal = new AbortController().signal): Promise<void> {
    const { beforeRead, store } = this.#options;
    const clock = this.#options.clock ?? systemClock;
    const ms = this.#options.readTimeoutMs ?? defaultReadTimeoutMs;
    if (beforeRead) await bounded(() => beforeRead(), ms, 'write the pending ledger entries', signal);
    const now = epochSeconds(new Date(clock.now()));
    let entries = await bounded(() => store.list(), ms, 'list the certificate ledger', signal);
    const stale = await this.#ofDeletedNodes(entries, now, ms, signal);
    if (stale.length > 0) {
      await bounded(() => store.remove(stale), ms, 'remove the certificates of deleted nodes', signal);
      const removed = new Set(stale);
      entries = entries.filter((entry) => !removed.has(entry));
    }
    signal.throwIfAborted();
    this.#earliest = earliestByKindAndGroup(entries, now);
  }

  /**
   * The node certificates that would alert (within the window, renewal late) whose Node no longer
   * exists: a deleted node's certificate expiring is no outage. Only those are looked up, a bounded
   * number per read, a few at a time, all within `ms`; a lookup that fails or has not answered by
   * then counts as "exists", so a flaky or slow API server never hides a real expiry. Rejects with
   * `signal`'s reason as soon as it aborts.
   */
  async #ofDeletedNodes(
    entries: readonly LedgerEntry[],
    now: number,
    ms: number,
    signal: AbortSignal,
  ): Promise<LedgerEntry[]> {
    const { nodeExists } = this.#options;
    if (!nodeExists) return [];
    const candidates = expiringWithin(entries, now, pruneWindowSeconds).filter(
      (entry) => entry.kind !== caKind && entry.kind !== servingKind,
    );
    const names = [...new Set(candidates.map((entry) => entry.instance))].slice(0, maxNodeLookups);
    const deleted = new Set<string>();
    await bounded(
      async (cut) => {
        let next = 0;
        const lookUp = async () => {
          while (next < names.length && !cut.aborted) {
            const name = names[next++] as string;
            if (!(await nodeExists(name).catch(() => true)) && !cut.aborted) deleted.add(name);
          }
        };
        await Promise.all(Array.from({ length: Math.min(nodeLookupConcurrency, names.length) }, lookUp));
      },
      ms,
      'look up the nodes of expiring certificates',
      signal,
    ).catch((err: unknown) => {
      // Past the deadline the nodes not looked up yet count as existing; an abort ends the read.
      signal.throwIfAborted();
      if (!(err instanceof TimeoutError)) throw err;
    });
    return candidates.filter((entry) => deleted.has(entry.instance));
  }

  async start(signal: AbortSignal): Promise<void> {
    const clock = this.#options.clock ?? systemClock;
    const logger = (this.#options.logger ?? silentLogger).child({ component: this.name });
    const failures = new RecurringFailureLog(logger, {
      message: 'could not read the certificate ledger; the gauge keeps its last values',
      now: () => clock.monotonic(),
    });
    try {
      while (!signal.aborted) {
        try {
          await this.refresh(signal);
          failures.succeeded();
        } catch (err) {
          if (signal.aborted) break;
          failures.failed(err);
        }
        await sleep(clock, this.#options.intervalMs ?? 60_000, signal);
      }
    } finally {
      // A replica that no longer leads exports nothing, so only the leader's series exist.
      this.#earliest = undefined;
    }
  }
}
