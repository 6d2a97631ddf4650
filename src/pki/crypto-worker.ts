/**
 * The thread side of the crypto pool (crypto-pool.ts): answers batches of signature checks and
 * signatures, synchronously, one batch per message. Signing keys are sent once and kept by id.
 * Never throws out of a batch: each job gets its own result, so one bad key cannot fail its batch.
 * (A batch that cannot be unpacked is a bug; the thread then dies and the pool fails its jobs.)
 */
import { type KeyObject, sign } from 'node:crypto';
import { parentPort } from 'node:worker_threads';
import { type CryptoJob, type CryptoResult, decodeJobs, encodeResults } from './crypto-wire.ts';
import { verifyWithSpki } from './keys.ts';

export type ToWorker =
  | { type: 'key'; keyId: number; key: KeyObject }
  /** `jobs`: packed by `encodeJobs`. */
  | { type: 'batch'; batchId: number; jobs: Uint8Array };

export interface FromWorker {
  batchId: number;
  /** Packed by `encodeResults`, in the order of the batch's jobs. */
  results: Uint8Array;
}

/** Runs one job; exported for the tests, which call it without a thread. */
export function runJob(job: CryptoJob, keys: ReadonlyMap<number, KeyObject>): CryptoResult {
  if (job.op === 'verify') {
    const spki = Buffer.from(job.spki.buffer, job.spki.byteOffset, job.spki.byteLength);
    try {
      return { valid: verifyWithSpki(job.hash, job.data, spki, job.signature) };
    } catch (err) {
      return { error: (err as Error).message, stage: 'key' };
    }
  }
  const key = keys.get(job.keyId);
  if (!key) return { error: `signing key ${job.keyId} was never registered`, stage: 'sign' };
  try {
    return { signature: sign(job.hash, job.data, key) };
  } catch (err) {
    return { error: (err as Error).message, stage: 'sign' };
  }
}

if (parentPort) {
  const port = parentPort;
  const keys = new Map<number, KeyObject>();
  port.on('message', (message: ToWorker) => {
    if (message.type === 'key') {
      keys.set(message.keyId, message.key);
      return;
    }
    // One packed answer, moved rather than copied (crypto-wire.ts).
    const results = encodeResults(decodeJobs(message.jobs).map((job) => runJob(job, keys)));
    port.postMessage({ batchId: message.batchId, results } satisfies FromWorker, [results.buffer]);
  });
}
