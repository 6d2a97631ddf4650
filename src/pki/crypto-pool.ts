/**
 * Signature checks and signatures on worker threads, in batches. A bootstrap server checks one CSR
 * signature and makes one certificate signature per node; done on the event loop they would cap the
 * server at one core, and done one by one on libuv's thread pool each costs a thread hand-off (about
 * 45 µs of CPU per check, about a third of the check itself). Here the jobs that arrive during
 * one turn of the event loop go to the threads together, in messages of up to
 * {@link maxJobsPerMessage} jobs packed into one buffer each (crypto-wire.ts), so the hand-off is
 * paid per message, not per job, and the public key is decoded on the thread too. See
 * docs/performance.md for the figures.
 */
import type { KeyObject } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { InternalError, InvalidInputError, UnavailableError } from '../errors.ts';
import { type CryptoJob, type CryptoResult, decodeResults, encodeJobs, type SignJob } from './crypto-wire.ts';
import type { FromWorker, ToWorker } from './crypto-worker.ts';

export interface CryptoPoolOptions {
  /** Worker threads; default {@link defaultCryptoThreads}. */
  threads?: number;
  /** The worker module (the tests substitute one that fails). */
  workerUrl?: URL;
}

interface PendingJob {
  job: CryptoJob;
  key?: KeyObject;
  resolve(result: CryptoResult): void;
  reject(err: Error): void;
}

interface PoolThread {
  worker: Worker;
  /** Keys this thread has been sent. */
  keyIds: Set<number>;
  /** Batches sent and not yet answered, by id. */
  batches: Map<number, PendingJob[]>;
  outstanding: number;
}

/**
 * The most jobs in one message. A message is answered when all its jobs are done, and with a whole
 * turn's jobs in one message the event loop and the thread took turns instead of overlapping: the
 * loop waited for the last signature of a batch of up to 256 before it could answer the first,
 * and the thread then waited for the loop. Under a light load generator that kept half a core idle;
 * chunks of 16 (about 1.5 ms of crypto each) answered 1.45 times as many keep-alive requests per
 * second at less CPU per certificate than one message per turn, and more than chunks of 4 or 8
 * (docs/performance.md). Fewer jobs still go in one message: each costs a wake-up of its thread.
 */
export const maxJobsPerMessage = 16;

/**
 * The default number of threads: one per core but the event loop's, at least 1 and at most 4
 * (beyond that, the event loop's HTTPS work is the limit). On 2 cores, 1 thread measured as fast as
 * 2 (docs/performance.md), with less contention for the event loop's core.
 */
export function defaultCryptoThreads(): number {
  return Math.max(1, Math.min(4, availableParallelism() - 1));
}

export class CryptoPool {
  readonly #threads: number;
  readonly #workerUrl: URL;
  readonly #live: PoolThread[] = [];
  readonly #keyIds = new WeakMap<KeyObject, number>();
  #nextKeyId = 1;
  #nextBatchId = 1;
  #pending: PendingJob[] = [];
  #scheduled = false;
  #closed = false;

  constructor(options: CryptoPoolOptions = {}) {
    this.#threads = Math.max(1, Math.floor(options.threads ?? defaultCryptoThreads()));
    this.#workerUrl = options.workerUrl ?? new URL('./crypto-worker.ts', import.meta.url);
  }

  /**
   * Checks `signature` over `data` with the DER SubjectPublicKeyInfo `spki`. Resolves whether it
   * verifies; rejects with InvalidInputError when the key cannot be read.
   */
  async verify(hash: string | null, data: Buffer, spki: Buffer, signature: Buffer): Promise<boolean> {
    const result = await this.#submit({ op: 'verify', hash, data, spki, signature });
    if ('valid' in result) return result.valid;
    if ('error' in result && result.stage === 'key') {
      throw new InvalidInputError(result.error);
    }
    throw new InternalError('the crypto thread answered a signature check with something else');
  }

  /** Signs `data` with `key`; rejects with InternalError when the key cannot sign. */
  async sign(hash: string | null, data: Buffer, key: KeyObject): Promise<Buffer> {
    let keyId = this.#keyIds.get(key);
    if (keyId === undefined) {
      keyId = this.#nextKeyId++;
      this.#keyIds.set(key, keyId);
    }
    const result = await this.#submit({ op: 'sign', hash, data, keyId }, key);
    if ('signature' in result) {
      return Buffer.from(result.signature.buffer, result.signature.byteOffset, result.signature.byteLength);
    }
    throw new InternalError(`cannot sign: ${'error' in result ? result.error : 'unexpected answer'}`);
  }

  /** Stops the threads; jobs not yet answered are rejected. The pool refuses new jobs. */
  async close(): Promise<void> {
    this.#closed = true;
    const stopped = new UnavailableError('the crypto pool was closed');
    for (const job of this.#pending.splice(0)) job.reject(stopped);
    await Promise.all(this.#live.splice(0).map((thread) => this.#stop(thread, stopped)));
  }

  #submit(job: CryptoJob, key?: KeyObject): Promise<CryptoResult> {
    if (this.#closed) return Promise.reject(new UnavailableError('the crypto pool was closed'));
    return new Promise((resolve, reject) => {
      this.#pending.push({ job, ...(key ? { key } : {}), resolve, reject });
      if (!this.#scheduled) {
        this.#scheduled = true;
        // Everything that arrives during this turn of the event loop goes in one batch.
        setImmediate(() => this.#flush());
      }
    });
  }

  #flush(): void {
    this.#scheduled = false;
    const jobs = this.#pending.splice(0);
    if (jobs.length === 0) return;
    try {
      while (this.#live.length < this.#threads) this.#live.push(this.#spawn());
    } catch (err) {
      // A thread that cannot even start (no memory, a bad module): the jobs fail, the process lives.
      if (this.#live.length === 0) {
        const failed = new UnavailableError(`cannot start a crypto thread: ${(err as Error).message}`, {
          cause: err,
        });
        for (const job of jobs) job.reject(failed);
        return;
      }
    }
    // Each chunk to the thread with the least work outstanding, counting the chunks sent before it.
    for (let start = 0; start < jobs.length; start += maxJobsPerMessage) {
      const thread = this.#live.reduce((least, t) => (t.outstanding < least.outstanding ? t : least));
      this.#send(thread, jobs.slice(start, start + maxJobsPerMessage));
    }
  }

  #send(thread: PoolThread, jobs: PendingJob[]): void {
    let packed: Uint8Array<ArrayBuffer>;
    try {
      packed = encodeJobs(jobs.map((j) => j.job));
    } catch (err) {
      // Only a bug can get here (a job this module cannot describe); its batch fails, the process lives.
      const broken = new InternalError(`cannot pack crypto jobs: ${(err as Error).message}`);
      for (const job of jobs) job.reject(broken);
      return;
    }
    for (const { job, key } of jobs) {
      const keyId = (job as SignJob).keyId;
      if (key && !thread.keyIds.has(keyId)) {
        thread.worker.postMessage({ type: 'key', keyId, key } satisfies ToWorker);
        thread.keyIds.add(keyId);
      }
    }
    const batchId = this.#nextBatchId++;
    thread.batches.set(batchId, jobs);
    if (thread.outstanding === 0) thread.worker.ref();
    thread.outstanding += jobs.length;
    thread.worker.postMessage({ type: 'batch', batchId, jobs: packed } satisfies ToWorker, [packed.buffer]);
  }

  #spawn(): PoolThread {
    // No inherited flags: the parent's (a test runner's, --input-type, an inspector port) can stop a
    // thread from starting, and the worker needs none.
    const worker = new Worker(this.#workerUrl, { execArgv: [] });
    const thread: PoolThread = { worker, keyIds: new Set(), batches: new Map(), outstanding: 0 };
    worker.on('message', (message: FromWorker) => {
      const jobs = thread.batches.get(message.batchId);
      if (!jobs) return;
      thread.batches.delete(message.batchId);
      thread.outstanding -= jobs.length;
      if (thread.outstanding === 0) worker.unref();
      let results: CryptoResult[];
      try {
        results = decodeResults(message.results);
      } catch (err) {
        const broken = new InternalError(
          `the crypto thread's answer is unreadable: ${(err as Error).message}`,
        );
        for (const job of jobs) job.reject(broken);
        return;
      }
      jobs.forEach((job, i) => {
        const result = results[i];
        if (result) job.resolve(result);
        else job.reject(new InternalError('the crypto thread answered fewer jobs than it was sent'));
      });
    });
    const lost = (reason: string) => {
      const index = this.#live.indexOf(thread);
      if (index >= 0) this.#live.splice(index, 1);
      // Its jobs fail (the caller answers 503 and the node retries); the next batch starts a new thread.
      this.#failAll(thread, new UnavailableError(`a crypto thread stopped: ${reason}`));
    };
    worker.on('error', (err) => lost(err.message));
    worker.on('exit', (code) => lost(`exit code ${code}`));
    // An idle pool must not keep the process alive; a busy one must (see #send). After the
    // listeners: adding one starts the thread's port, which holds the process again.
    worker.unref();
    return thread;
  }

  #failAll(thread: PoolThread, err: Error): void {
    for (const jobs of thread.batches.values()) for (const job of jobs) job.reject(err);
    thread.batches.clear();
    thread.outstanding = 0;
  }

  async #stop(thread: PoolThread, err: Error): Promise<void> {
    this.#failAll(thread, err);
    await thread.worker.terminate();
  }
}

let shared: CryptoPool | undefined;

/** The process-wide pool, started on first use. */
export function sharedCryptoPool(): CryptoPool {
  shared ??= new CryptoPool();
  return shared;
}
