/**
 * `s3://bucket/prefix`: the state store kops uses most, through the AWS SDK v3. An endpoint override
 * with path-style addressing serves S3-compatible stores (MinIO, Ceph, the simulator).
 *
 * Every call has a deadline ({@link defaultS3TimeoutMs}, the SDK's retries and the read of the
 * answer's body included): an endpoint that accepts the connection and never answers is a
 * TimeoutError, and the request is aborted, its connection closed. Each attempt has half of it (for
 * the connection, for the answer to begin, and for the connection to stay silent), so that the SDK
 * can retry once within it. The bootstrap server reads the state store on a node's request (kops'
 * `includeNodeConfig`, the metal inventory), so a silent store must cost the node a 503, not a hang.
 */
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { bounded } from '../deadline.ts';
import {
  ForbiddenError,
  KopsError,
  NotFoundError,
  TimeoutError,
  TooLargeError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { egressAgent } from '../net/egress-proxy.ts';
import { bucketLocation, checkObjectPath, joinKey, ListingPages, listScope } from './paths.ts';
import { maxObjectBytes, type StoredObject, type Vfs } from './types.ts';

/** How to reach S3; everything is optional and falls back to the SDK's defaults. */
export interface S3VfsOptions {
  /** Region of the bucket; default `AWS_REGION`, then `us-east-1` (requests follow region redirects). */
  region?: string;
  /** Endpoint of an S3-compatible store, e.g. `http://127.0.0.1:9000`. */
  endpoint?: string;
  /** Path-style addressing (`endpoint/bucket/key`); defaults to true when `endpoint` is set. */
  forcePathStyle?: boolean;
  /** Static credentials; default is the SDK chain (environment, web identity, instance profile). */
  credentials?: S3ClientConfig['credentials'];
  /** Deadline of each call, retries and body included (default {@link defaultS3TimeoutMs}). */
  timeoutMs?: number;
  /**
   * Which checksums the SDK adds and checks: `when-required` (default: only where S3 requires them,
   * as several S3-compatible stores reject the newer default ones) or `sdk-default` (the SDK's own
   * default, `WHEN_SUPPORTED`, or `AWS_REQUEST_CHECKSUM_CALCULATION` /
   * `AWS_RESPONSE_CHECKSUM_VALIDATION`), which is what kops' Go SDK uses for `do://`, `hos://` and
   * `scw://`.
   */
  checksums?: 'when-required' | 'sdk-default';
  /**
   * What to tell the operator when the store refuses the credentials (default: AWS credentials);
   * the S3-compatible schemes name `S3_ACCESS_KEY_ID` / `S3_SECRET_ACCESS_KEY`.
   */
  credentialsHint?: string;
}

/**
 * How long one call to the store may take, the SDK's retries included (default): kops' state files
 * are kilobytes, so a store slower than this is down; the cloud lookups of the bootstrap policies have
 * the same 10 s.
 */
export const defaultS3TimeoutMs = 10_000;

/** The longest an attempt waits for its connection to open (at most half the call's deadline). */
const maxConnectionTimeoutMs = 5_000;

interface S3ErrorShape {
  name?: string;
  Code?: string;
  $metadata?: { httpStatusCode?: number };
}

/**
 * An object's version: its ETag, or, from an S3-compatible store that sends none, its Last-Modified
 * and length, so that an edit is still seen (with no version at all every poll would look unchanged).
 */
function s3Version(out: { ETag?: string; LastModified?: Date; ContentLength?: number }): string {
  if (out.ETag) return out.ETag;
  return out.LastModified ? `modified ${out.LastModified.getTime()} length ${out.ContentLength ?? ''}` : '';
}

/** A VFS over one bucket and key prefix. */
export class S3Vfs implements Vfs {
  readonly url: string;
  readonly #bucket: string;
  readonly #root: string;
  readonly #client: S3Client;
  readonly #timeoutMs: number;
  readonly #credentialsHint: string;

  /** `url` is `s3://…`, or one of the S3-compatible schemes (`do://`, `hos://`, …), kept in messages. */
  constructor(url: URL, options: S3VfsOptions = {}) {
    const scheme = url.protocol.replace(/:$/, '');
    ({ bucket: this.#bucket, root: this.#root, url: this.url } = bucketLocation(url, scheme));
    this.#timeoutMs = options.timeoutMs ?? defaultS3TimeoutMs;
    this.#credentialsHint = options.credentialsHint ?? 'no valid AWS credentials';
    const attemptMs = Math.max(1, Math.ceil(this.#timeoutMs / 2));
    this.#client = new S3Client({
      region: options.region ?? process.env['AWS_REGION'] ?? process.env['AWS_DEFAULT_REGION'] ?? 'us-east-1',
      endpoint: options.endpoint,
      forcePathStyle: options.forcePathStyle ?? options.endpoint !== undefined,
      credentials: options.credentials,
      followRegionRedirects: true,
      // The newer default checksums are not understood by every S3-compatible store.
      ...(options.checksums === 'sdk-default'
        ? {}
        : { requestChecksumCalculation: 'WHEN_REQUIRED', responseChecksumValidation: 'WHEN_REQUIRED' }),
      // The SDK's default handler waits forever for a connection, an answer and each byte of it.
      requestHandler: {
        connectionTimeout: Math.min(maxConnectionTimeoutMs, attemptMs),
        requestTimeout: attemptMs,
        throwOnRequestTimeout: true,
        socketTimeout: attemptMs,
        // The SDK's own agents' settings, honouring the egress proxy (src/net/egress-proxy.ts).
        httpAgent: egressAgent('http:', { keepAlive: true, maxSockets: 50 }),
        httpsAgent: egressAgent('https:', { keepAlive: true, maxSockets: 50 }),
      },
    });
  }

  /**
   * `work` (one SDK call, and the read of its answer) within the call's deadline: past it, a
   * TimeoutError, and the call is aborted so that its connection is closed, not left waiting.
   */
  #bounded<T>(action: string, path: string, work: (abortSignal: AbortSignal) => Promise<T>): Promise<T> {
    return bounded(work, this.#timeoutMs, `cannot ${action} ${this.url}/${path}`);
  }

  #key(path: string): string {
    return joinKey(this.#root, checkObjectPath(path));
  }

  #failure(action: string, path: string, err: unknown): KopsError {
    const e = err as S3ErrorShape;
    const code = e.name ?? e.Code ?? '';
    const status = e.$metadata?.httpStatusCode;
    const where = `${this.url}/${path}`;
    // HEAD responses have no body, so their errors carry only the HTTP status.
    const reason =
      code === '' || code === 'Unknown' ? `HTTP ${status ?? 'error'}` : `${code}: ${(err as Error).message}`;
    if (code === 'TimeoutError' || code === 'AbortError') {
      return new TimeoutError(`cannot ${action} ${where}: no answer in time (${reason})`, { cause: err });
    }
    if (code === 'NoSuchKey' || code === 'NotFound' || (status === 404 && code !== 'NoSuchBucket')) {
      return new NotFoundError(`${where} does not exist`, { cause: err });
    }
    if (code === 'NoSuchBucket') {
      return new NotFoundError(`cannot ${action} ${where}: bucket ${this.#bucket} does not exist`, {
        cause: err,
      });
    }
    if (
      code === 'CredentialsProviderError' ||
      code === 'InvalidAccessKeyId' ||
      code === 'SignatureDoesNotMatch'
    ) {
      return new UnauthenticatedError(`cannot ${action} ${where}: ${this.#credentialsHint} (${reason})`, {
        cause: err,
      });
    }
    if (status === 403 || code === 'AccessDenied') {
      return new ForbiddenError(
        `cannot ${action} ${where}: access denied (${reason}); grant the controller's role s3:GetObject and ` +
          's3:ListBucket on the state store (see docs/state-store.md)',
        { cause: err },
      );
    }
    return new UnavailableError(`cannot ${action} ${where}: ${reason}`, { cause: err });
  }

  async read(path: string): Promise<StoredObject> {
    try {
      return await this.#bounded('read', path, async (abortSignal) => {
        const out = await this.#client.send(
          new GetObjectCommand({ Bucket: this.#bucket, Key: this.#key(path) }),
          { abortSignal },
        );
        const data = await this.#body(out.Body, out.ContentLength, path);
        return {
          data,
          version: s3Version(out),
          ...(out.LastModified ? { modifiedMs: out.LastModified.getTime() } : {}),
        };
      });
    } catch (err) {
      if (err instanceof KopsError) throw err;
      throw this.#failure('read', path, err);
    }
  }

  /**
   * The object's bytes, at most {@link maxObjectBytes}: a larger object (announced, or as it comes) is
   * refused and its connection closed, never held whole (a multi-GB object, a proxy that never ends).
   */
  async #body(body: unknown, announced: number | undefined, path: string): Promise<Buffer> {
    const stream = body as (AsyncIterable<Uint8Array> & { destroy?(): void }) | undefined;
    const tooLarge = () => {
      stream?.destroy?.();
      return new TooLargeError(
        `cannot read ${this.url}/${path}: the object is larger than ${maxObjectBytes} bytes, which no kops object is`,
      );
    };
    if (!stream) return Buffer.alloc(0);
    if (announced !== undefined && announced > maxObjectBytes) throw tooLarge();
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of stream) {
      size += chunk.length;
      if (size > maxObjectBytes) throw tooLarge();
      chunks.push(Buffer.from(chunk));
    }
    return Buffer.concat(chunks, size);
  }

  async stat(path: string): Promise<string | undefined> {
    try {
      const out = await this.#bounded('stat', path, (abortSignal) =>
        this.#client.send(new HeadObjectCommand({ Bucket: this.#bucket, Key: this.#key(path) }), {
          abortSignal,
        }),
      );
      return s3Version(out);
    } catch (err) {
      if (err instanceof KopsError) throw err;
      const failure = this.#failure('stat', path, err);
      if (failure instanceof NotFoundError) return undefined;
      throw failure;
    }
  }

  async write(path: string, data: Buffer | string): Promise<void> {
    try {
      await this.#bounded('write', path, (abortSignal) =>
        this.#client.send(
          new PutObjectCommand({ Bucket: this.#bucket, Key: this.#key(path), Body: Buffer.from(data) }),
          { abortSignal },
        ),
      );
    } catch (err) {
      if (err instanceof KopsError) throw err;
      throw this.#failure('write', path, err);
    }
  }

  async list(prefix: string): Promise<string[]> {
    const scope = listScope(this.#root, prefix);
    const where = `${this.url}/${prefix}`;
    const pages = new ListingPages(where, scope);
    let token: string | undefined;
    try {
      do {
        pages.beginPage();
        // Each page has the call's deadline: a long listing is many calls.
        const out = await this.#bounded('list', prefix, (abortSignal) =>
          this.#client.send(
            new ListObjectsV2Command({ Bucket: this.#bucket, Prefix: scope.full, ContinuationToken: token }),
            { abortSignal },
          ),
        );
        pages.add((out.Contents ?? []).flatMap((object) => (object.Key ? [object.Key] : [])));
        if (out.IsTruncated && !out.NextContinuationToken) {
          // Stopping here would pass a part of the listing off as all of it.
          throw new UnavailableError(
            `cannot list ${where}: the store says the listing is truncated but gives no continuation token`,
          );
        }
        token = pages.next(out.IsTruncated ? out.NextContinuationToken : undefined);
      } while (token);
    } catch (err) {
      if (err instanceof KopsError) throw err;
      throw this.#failure('list', prefix, err);
    }
    return pages.keys();
  }

  async delete(path: string): Promise<void> {
    try {
      await this.#bounded('delete', path, (abortSignal) =>
        this.#client.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: this.#key(path) }), {
          abortSignal,
        }),
      );
    } catch (err) {
      if (err instanceof KopsError) throw err;
      throw this.#failure('delete', path, err);
    }
  }
}
