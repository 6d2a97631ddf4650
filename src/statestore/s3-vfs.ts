/**
 * `s3://bucket/prefix`: the state store kops uses most, through the AWS SDK v3. An endpoint override
 * with path-style addressing serves S3-compatible stores (MinIO, Ceph, the simulator).
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
import {
  ForbiddenError,
  KopsError,
  NotFoundError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { bucketLocation, checkObjectPath, joinKey, listScope } from './paths.ts';
import type { StoredObject, Vfs } from './types.ts';

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
}

interface S3ErrorShape {
  name?: string;
  Code?: string;
  $metadata?: { httpStatusCode?: number };
}

/** A VFS over one bucket and key prefix. */
export class S3Vfs implements Vfs {
  readonly url: string;
  readonly #bucket: string;
  readonly #root: string;
  readonly #client: S3Client;

  constructor(url: URL, options: S3VfsOptions = {}) {
    ({ bucket: this.#bucket, root: this.#root, url: this.url } = bucketLocation(url, 's3'));
    this.#client = new S3Client({
      region: options.region ?? process.env['AWS_REGION'] ?? process.env['AWS_DEFAULT_REGION'] ?? 'us-east-1',
      endpoint: options.endpoint,
      forcePathStyle: options.forcePathStyle ?? options.endpoint !== undefined,
      credentials: options.credentials,
      followRegionRedirects: true,
      // The newer default checksums are not understood by every S3-compatible store.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    });
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
      return new UnauthenticatedError(`cannot ${action} ${where}: no valid AWS credentials (${reason})`, {
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
      const out = await this.#client.send(
        new GetObjectCommand({ Bucket: this.#bucket, Key: this.#key(path) }),
      );
      const data = Buffer.from((await out.Body?.transformToByteArray()) ?? new Uint8Array());
      return { data, version: out.ETag ?? '' };
    } catch (err) {
      if (err instanceof KopsError) throw err;
      throw this.#failure('read', path, err);
    }
  }

  async stat(path: string): Promise<string | undefined> {
    try {
      const out = await this.#client.send(
        new HeadObjectCommand({ Bucket: this.#bucket, Key: this.#key(path) }),
      );
      return out.ETag ?? '';
    } catch (err) {
      if (err instanceof KopsError) throw err;
      const failure = this.#failure('stat', path, err);
      if (failure instanceof NotFoundError) return undefined;
      throw failure;
    }
  }

  async write(path: string, data: Buffer | string): Promise<void> {
    try {
      await this.#client.send(
        new PutObjectCommand({ Bucket: this.#bucket, Key: this.#key(path), Body: Buffer.from(data) }),
      );
    } catch (err) {
      if (err instanceof KopsError) throw err;
      throw this.#failure('write', path, err);
    }
  }

  async list(prefix: string): Promise<string[]> {
    const { full, strip } = listScope(this.#root, prefix);
    const keys: string[] = [];
    let token: string | undefined;
    try {
      do {
        const out = await this.#client.send(
          new ListObjectsV2Command({ Bucket: this.#bucket, Prefix: full, ContinuationToken: token }),
        );
        for (const object of out.Contents ?? []) if (object.Key) keys.push(object.Key.slice(strip));
        token = out.IsTruncated ? out.NextContinuationToken : undefined;
      } while (token);
    } catch (err) {
      throw this.#failure('list', prefix, err);
    }
    return keys.sort();
  }

  async delete(path: string): Promise<void> {
    try {
      await this.#client.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: this.#key(path) }));
    } catch (err) {
      if (err instanceof KopsError) throw err;
      throw this.#failure('delete', path, err);
    }
  }
}
