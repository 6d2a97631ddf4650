/**
 * Records issued certificates into the ledger without slowing issuance down or writing once per
 * join: issuance only adds to a pending set (newest per kind and instance), and a timer writes the
 * set every couple of seconds, one write per shard touched — a 5,000-node join storm costs a few
 * writes per flush, not 5,000. A failed write keeps its entries pending for the next flush; a
 * ledger that cannot be written never fails a join. Certificates the process holds (the CAs, its
 * serving certificate) are re-recorded periodically, so the ledger forgets them once nobody does.
 *
 * A flush reads and rewrites every shard it touches whole, and in a storm it touches all of them: its
 * cost follows the ledger's size, not the joins since the last one. At 50,000 nodes (about 10 MB of
 * shards) a flush every 2 s rewrote 5 MB a second through the API server (and etcd), a quarter of the
 * bootstrap server's CPU in the join storm and the API server's 503s (docs/performance.md). So the
 * writes keep to a byte budget: after writing B bytes the next flush waits B / `writeBytesPerSecond`
 * if that is longer than the interval. A small cluster's ledger still flushes every 2 s; the largest
 * (16 shards of at most 900 kB) every 14 s at the default 1 MiB/s.
 *
 * A failed write waits longer before the next, 2 s doubling to a minute: a ledger the API server
 * refuses for good (RBAC without the shards' rules, as kops' own manifest) costs a request a minute
 * and a log line every ten, not a request and a line every flush.
 */
import { X509Certificate } from 'node:crypto';
import { type Logger, RecurringFailureLog, silentLogger } from '../log.ts';
import type { IssuedCertificate } from '../pki/profiles.ts';
import { Backoff } from '../runtime/backoff.ts';
import { entryKey, epochSeconds, type LedgerEntry } from './ledger.ts';
import type { ConfigMapLedgerStore } from './store.ts';

/** Options of {@link LedgerRecorder}. */
export interface LedgerRecorderOptions {
  store: Pick<ConfigMapLedgerStore, 'add'>;
  /** How often pending entries are written (default 2 s), when the byte budget allows. */
  flushIntervalMs?: number;
  /** The shard bytes a second the flushes may write, averaged over each flush and the wait after it (default 1 MiB). */
  writeBytesPerSecond?: number;
  /** How often held certificates are recorded again (default 1 h); they are kept for three intervals. */
  holdIntervalMs?: number;
  /** Entries waiting at most; beyond it new ones are dropped and logged once per ten minutes (default 50,000). */
  maxPending?: number;
  /** Wall-clock time: dates the holds, which other replicas read (default `new Date()`). */
  now?: () => Date;
  /** Monotonic milliseconds: the waits between writes, which a step of the wall clock must not stretch (default `performance.now`). */
  monotonic?: () => number;
  logger?: Logger;
}

/** A certificate a running process holds, before the recorder dates its hold. */
export type HeldCertificate = Omit<LedgerEntry, 'heldUntil'>;

/** The entries of certificates just issued for a node. */
export function entriesOfIssued(
  issued: readonly IssuedCertificate[],
  node: { nodeName: string; instanceGroup?: string | undefined },
): LedgerEntry[] {
  return issued.map((cert) => ({
    kind: cert.profile,
    instanceGroup: node.instanceGroup ?? '',
    instance: node.nodeName,
    serial: cert.serialHex,
    notBefore: epochSeconds(cert.notBefore),
    notAfter: epochSeconds(cert.notAfter),
  }));
}

/** The entry of a certificate in PEM (the first of a chain), e.g. a CA or the serving certificate. */
export function entryOfPem(kind: string, instance: string, pem: string): HeldCertificate {
  const cert = new X509Certificate(pem);
  return {
    kind,
    instanceGroup: '',
    instance,
    // Spelled as issued certificates' serials are: lower-case hex without leading zero bytes.
    serial: cert.serialNumber.toLowerCase().replace(/^(00)+(?=.)/, ''),
    notBefore: epochSeconds(new Date(cert.validFrom)),
    notAfter: epochSeconds(new Date(cert.validTo)),
  };
}

/** Batches entries into the ledger store. */
export class LedgerRecorder {
  readonly #options: LedgerRecorderOptions;
  readonly #logger: Logger;
  readonly #now: () => Date;
  readonly #monotonic: () => number;
  readonly #holdIntervalMs: number;
  #pending = new Map<string, LedgerEntry>();
  #held: HeldCertificate[] = [];
  #flushing: Promise<void> | undefined;
  #timers: NodeJS.Timeout[] = [];
  /** No timed flush before this (monotonic ms): the wait the last write's bytes, or its failure, earned. */
  #quietUntilMs = 0;
  readonly #failureBackoff = new Backoff({ initialMs: 2_000, maxMs: 60_000 });
  readonly #failureLog: RecurringFailureLog;
  /**
   * Dropping is logged when it starts and then once per ten minutes, not at every issuance: past the
   * cap it lasts as long as the ledger cannot be written, and every join of a storm would add a line.
   */
  readonly #dropLog: RecurringFailureLog;
  /** Entries dropped since the ledger was last written, the count each of those lines carries. */
  #dropped = 0;

  constructor(options: LedgerRecorderOptions) {
    this.#options = options;
    this.#logger = options.logger ?? silentLogger;
    this.#now = options.now ?? (() => new Date());
    this.#monotonic = options.monotonic ?? (() => performance.now());
    this.#holdIntervalMs = options.holdIntervalMs ?? 3_600_000;
    this.#failureLog = new RecurringFailureLog(this.#logger, {
      message: 'certificate ledger not written; retrying',
      recoveredMessage: 'certificate ledger written again',
      now: this.#monotonic,
    });
    this.#dropLog = new RecurringFailureLog(this.#logger, {
      message: 'certificate ledger: too many entries waiting to be written; some dropped',
      now: this.#monotonic,
    });
  }

  /** Queues entries for the next flush; never throws, never waits. */
  record(entries: readonly LedgerEntry[]): void {
    const max = this.#options.maxPending ?? 50_000;
    let dropped = 0;
    for (const entry of entries) {
      const key = entryKey(entry);
      if (!this.#pending.has(key) && this.#pending.size >= max) {
        dropped++;
        continue;
      }
      this.#pending.set(key, entry);
    }
    if (dropped > 0) {
      this.#dropped += dropped;
      this.#dropLog.failed(`more than ${max} entries waiting`, { dropped: this.#dropped, pending: max });
    }
  }

  /** The certificates this process holds, recorded now and again every hold interval while it runs. */
  hold(certificates: readonly HeldCertificate[]): void {
    this.#held = [...certificates];
    this.#recordHeld();
  }

  #recordHeld(): void {
    const heldUntil = epochSeconds(this.#now()) + Math.ceil((3 * this.#holdIntervalMs) / 1000);
    this.record(this.#held.map((entry) => ({ ...entry, heldUntil })));
  }

  /** Starts the timers (unref'd: they never keep the process alive). */
  start(): void {
    const flush = setInterval(() => void this.flushDue(), this.#options.flushIntervalMs ?? 2_000);
    const hold = setInterval(() => this.#recordHeld(), this.#holdIntervalMs);
    for (const timer of [flush, hold]) timer.unref();
    this.#timers.push(flush, hold);
  }

  /**
   * Writes what is pending unless the last write's bytes or its failure still ask to wait: what the
   * timer and a reader of the ledger (the expiry gauge, before it reads) call.
   */
  flushDue(): Promise<void> {
    return this.#monotonic() >= this.#quietUntilMs ? this.flush() : Promise.resolve();
  }

  /** Writes what is pending; at most one write runs at a time. */
  flush(): Promise<void> {
    this.#flushing ??= this.#write().finally(() => {
      this.#flushing = undefined;
    });
    return this.#flushing;
  }

  async #write(): Promise<void> {
    if (this.#pending.size === 0) return;
    const batch = this.#pending;
    this.#pending = new Map();
    try {
      const result = await this.#options.store.add([...batch.values()]);
      const perSecond = this.#options.writeBytesPerSecond ?? 1024 * 1024;
      this.#quietUntilMs = this.#monotonic() + (1000 * result.bytes) / perSecond;
      this.#failureBackoff.reset();
      this.#failureLog.succeeded();
      // Room again: a later overflow is a new one, logged at once.
      this.#dropLog.succeeded();
      this.#dropped = 0;
      if (result.droppedOverCap > 0) {
        this.#logger.warn(
          { dropped: result.droppedOverCap },
          'certificate ledger: a shard is full; the certificates expiring last were dropped',
        );
      }
    } catch (err) {
      // Kept for the next flush, unless something newer for the same certificate arrived meanwhile.
      for (const [key, entry] of batch) if (!this.#pending.has(key)) this.#pending.set(key, entry);
      const waitMs = this.#failureBackoff.next();
      this.#quietUntilMs = this.#monotonic() + waitMs;
      this.#failureLog.failed(err, { pending: this.#pending.size, retryInMs: Math.round(waitMs) });
    }
  }

  /** Stops the timers and writes what is pending one last time. */
  async stop(): Promise<void> {
    for (const timer of this.#timers) clearInterval(timer);
    this.#timers = [];
    await this.flush();
    // A flush that was running when stop was called may have left entries behind it.
    await this.flush();
  }
}
