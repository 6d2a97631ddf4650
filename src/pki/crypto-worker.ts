/**
 * The thread side of the crypto pool (crypto-pool.ts): answers batches of signature checks and
 * signatures, synchronously, one batch per message. Signing keys are sent once and kept by id.
 * Never throws out of a batch: each job gets its own result, so one bad key cannot fail its batch.
 */
import { type KeyObject, sign } from 'node:crypto';
import { parentPort } from 'node:worker_threads';
import { verifyWithSpki } from './keys.ts';

/** A signature check of `data` against a DER SubjectPublicKeyInfo. */
export interface VerifyJob {
  op: 'verify';
  hash: string | null;
  data: Uint8Array;
  spki: Uint8Array;
  signature: Uint8Array;
}

/** A signature over `data` with a key registered under `keyId`. */
export interface SignJob {
  op: 'sign';
  hash: string | null;
  data: Uint8Array;
  keyId: number;
}

export type CryptoJob = VerifyJob | SignJob;

export type CryptoResult =
  | { valid: boolean }
  | { signature: Uint8Array }
  /** `key`: the public key could not be read; `sign`: the signature could not be made. */
  | { error: string; stage: 'key' | 'sign' };

export type ToWorker =
  | { type: 'key'; keyId: number; key: KeyObject }
  | { type: 'batch'; batchId: number; jobs: CryptoJob[] };

export interface FromWorker {
  batchId: number;
  results: CryptoResult[];
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
    const results = message.jobs.map((job) => runJob(job, keys));
    // Signatures go back in memory of their own, moved rather than copied (see crypto-pool.ts).
    const transfer: ArrayBuffer[] = [];
    for (const result of results) {
      if ('signature' in result) {
        result.signature = new Uint8Array(result.signature);
        transfer.push(result.signature.buffer as ArrayBuffer);
      }
    }
    port.postMessage({ batchId: message.batchId, results } satisfies FromWorker, transfer);
  });
}
