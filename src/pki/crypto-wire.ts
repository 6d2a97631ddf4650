/**
 * The crypto pool's messages between the event loop and its threads, packed into one buffer per
 * batch and moved, not copied. Posted as objects, every job costs a structured clone and a transfer
 * per byte array (three per signature check): about 10 µs of event-loop time per job, against 1 to
 * 2 µs packed (docs/performance.md). Pure functions; both sides use them.
 *
 * Layout (lengths big-endian): a job is its op (0 check, 1 sign), the hash name (u8 length, ASCII,
 * 0 for none), then for a check the data, SPKI and signature, for a signature the key id (u32) and
 * the data; each byte string is a u32 length and the bytes. A result is a tag (`resultTags`) and,
 * but for a verdict, a u32 length and the signature or the UTF-8 error message.
 */

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

const resultTags = { invalid: 0, valid: 1, signature: 2, keyError: 3, signError: 4 } as const;

/** A packed message that is cut short or malformed: a bug on the other side, never a caller's input. */
export class WireError extends Error {}

class Writer {
  readonly bytes: Uint8Array<ArrayBuffer>;
  readonly #view: DataView;
  #at = 0;

  constructor(size: number) {
    // Memory of its own, so that transferring it moves exactly this message.
    this.bytes = new Uint8Array(new ArrayBuffer(size));
    this.#view = new DataView(this.bytes.buffer);
  }

  u8(value: number): void {
    this.#view.setUint8(this.#at++, value);
  }

  u32(value: number): void {
    this.#view.setUint32(this.#at, value);
    this.#at += 4;
  }

  block(value: Uint8Array): void {
    this.u32(value.byteLength);
    this.bytes.set(value, this.#at);
    this.#at += value.byteLength;
  }

  hash(name: string | null): void {
    if ((name?.length ?? 0) > 255) throw new WireError('hash name longer than 255 characters');
    this.u8(name?.length ?? 0);
    for (let i = 0; i < (name?.length ?? 0); i++) this.u8((name as string).charCodeAt(i) & 0x7f);
  }
}

class Reader {
  readonly #bytes: Uint8Array;
  readonly #view: DataView;
  #at = 0;

  constructor(bytes: Uint8Array) {
    this.#bytes = bytes;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  get done(): boolean {
    return this.#at >= this.#bytes.byteLength;
  }

  #need(count: number): void {
    if (this.#at + count > this.#bytes.byteLength) throw new WireError('crypto message cut short');
  }

  u8(): number {
    this.#need(1);
    return this.#view.getUint8(this.#at++);
  }

  u32(): number {
    this.#need(4);
    const value = this.#view.getUint32(this.#at);
    this.#at += 4;
    return value;
  }

  /** A view into the message, not a copy. */
  block(): Uint8Array {
    const length = this.u32();
    this.#need(length);
    const value = this.#bytes.subarray(this.#at, this.#at + length);
    this.#at += length;
    return value;
  }

  hash(): string | null {
    const length = this.u8();
    if (length === 0) return null;
    this.#need(length);
    const name = String.fromCharCode(...this.#bytes.subarray(this.#at, this.#at + length));
    this.#at += length;
    return name;
  }
}

export function encodeJobs(jobs: readonly CryptoJob[]): Uint8Array<ArrayBuffer> {
  let size = 0;
  for (const job of jobs) {
    size += 2 + (job.hash?.length ?? 0) + 4 + job.data.byteLength;
    size += job.op === 'verify' ? 8 + job.spki.byteLength + job.signature.byteLength : 4;
  }
  const out = new Writer(size);
  for (const job of jobs) {
    out.u8(job.op === 'verify' ? 0 : 1);
    out.hash(job.hash);
    if (job.op === 'verify') {
      out.block(job.data);
      out.block(job.spki);
      out.block(job.signature);
    } else {
      out.u32(job.keyId);
      out.block(job.data);
    }
  }
  return out.bytes;
}

/** The jobs of a packed batch; their byte strings are views into `bytes`. */
export function decodeJobs(bytes: Uint8Array): CryptoJob[] {
  const input = new Reader(bytes);
  const jobs: CryptoJob[] = [];
  while (!input.done) {
    const op = input.u8();
    const hash = input.hash();
    if (op === 0) {
      jobs.push({ op: 'verify', hash, data: input.block(), spki: input.block(), signature: input.block() });
    } else if (op === 1) {
      const keyId = input.u32();
      jobs.push({ op: 'sign', hash, keyId, data: input.block() });
    } else {
      throw new WireError(`unknown crypto job ${op}`);
    }
  }
  return jobs;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function payloadOf(result: CryptoResult): Uint8Array | undefined {
  if ('valid' in result) return undefined;
  return 'signature' in result ? result.signature : encoder.encode(result.error);
}

function tagOf(result: CryptoResult): number {
  if ('valid' in result) return result.valid ? resultTags.valid : resultTags.invalid;
  if ('signature' in result) return resultTags.signature;
  return result.stage === 'key' ? resultTags.keyError : resultTags.signError;
}

export function encodeResults(results: readonly CryptoResult[]): Uint8Array<ArrayBuffer> {
  const payloads = results.map(payloadOf);
  const size = payloads.reduce((sum, payload) => sum + 1 + (payload ? 4 + payload.byteLength : 0), 0);
  const out = new Writer(size);
  results.forEach((result, i) => {
    out.u8(tagOf(result));
    const payload = payloads[i];
    if (payload) out.block(payload);
  });
  return out.bytes;
}

/** The results of a packed answer; signatures are views into `bytes`. */
export function decodeResults(bytes: Uint8Array): CryptoResult[] {
  const input = new Reader(bytes);
  const results: CryptoResult[] = [];
  while (!input.done) {
    const tag = input.u8();
    if (tag === resultTags.invalid || tag === resultTags.valid) {
      results.push({ valid: tag === resultTags.valid });
    } else if (tag === resultTags.signature) {
      results.push({ signature: input.block() });
    } else if (tag === resultTags.keyError || tag === resultTags.signError) {
      const stage = tag === resultTags.keyError ? 'key' : 'sign';
      results.push({ error: decoder.decode(input.block()), stage });
    } else {
      throw new WireError(`unknown crypto result ${tag}`);
    }
  }
  return results;
}
