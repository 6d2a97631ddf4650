/** Opens a state store by URL: the scheme picks the backend. */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError } from '../errors.ts';
import { FileVfs } from './file-vfs.ts';
import { GcsVfs, type GcsVfsOptions } from './gcs-vfs.ts';
import { MemfsVfs } from './memfs-vfs.ts';
import { S3Vfs, type S3VfsOptions } from './s3-vfs.ts';
import type { Vfs } from './types.ts';

/** Backend-specific options; each backend reads only its own. */
export interface VfsOptions {
  s3?: S3VfsOptions;
  gcs?: GcsVfsOptions;
  /** Environment read for defaults (see `vfsOptionsFromEnv`); default `process.env`. */
  env?: NodeJS.ProcessEnv;
}

/**
 * Defaults from the environment variables kops itself honours for S3-compatible stores
 * (`S3_ENDPOINT`, `S3_REGION`, `S3_ACCESS_KEY_ID`, `S3_SECRET_ACCESS_KEY`) and the standard GCS
 * emulator variable `STORAGE_EMULATOR_HOST`.
 */
export function vfsOptionsFromEnv(env: NodeJS.ProcessEnv): { s3: S3VfsOptions; gcs: GcsVfsOptions } {
  const s3: S3VfsOptions = {};
  if (env['S3_ENDPOINT']) s3.endpoint = env['S3_ENDPOINT'];
  if (env['S3_REGION']) s3.region = env['S3_REGION'];
  if (env['S3_ACCESS_KEY_ID'] && env['S3_SECRET_ACCESS_KEY']) {
    s3.credentials = { accessKeyId: env['S3_ACCESS_KEY_ID'], secretAccessKey: env['S3_SECRET_ACCESS_KEY'] };
  }
  const gcs: GcsVfsOptions = {};
  const emulator = env['STORAGE_EMULATOR_HOST'];
  if (emulator) gcs.endpoint = /^https?:\/\//.test(emulator) ? emulator : `http://${emulator}`;
  return { s3, gcs };
}

/** The URL schemes `openVfs` understands. */
export const supportedSchemes = ['file', 's3', 'gs', 'memfs'] as const;

const bucketName = /^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$/;

function parseUrl(url: string): URL {
  try {
    return new URL(url);
  } catch (err) {
    throw new ConfigError(`invalid state store URL "${url}": use e.g. s3://bucket/cluster.example.com`, {
      cause: err,
    });
  }
}

function requireBucket(url: URL, raw: string): void {
  if (!bucketName.test(url.host)) {
    throw new ConfigError(
      `invalid state store URL "${raw}": "${url.host}" is not a bucket name; use ${url.protocol}//BUCKET/PATH`,
    );
  }
}

/**
 * Opens the state store at `url`: `s3://bucket/prefix`, `gs://bucket/prefix`, `file:///dir`, a plain
 * directory path, or `memfs://name/prefix` (in-process, for tests and `dev`). Explicit options win over
 * the environment defaults of `vfsOptionsFromEnv`.
 */
export function openVfs(url: string, options: VfsOptions = {}): Vfs {
  if (url.trim() === '') throw new ConfigError('the state store URL is empty: set configBase (or --state)');
  // A plain path is a directory; a Windows-style drive letter is not a scheme either.
  if (!/^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(url)) return new FileVfs(resolve(url));
  const parsed = parseUrl(url);
  if (parsed.search || parsed.hash) {
    throw new ConfigError(`invalid state store URL "${url}": query strings and fragments are not allowed`);
  }
  switch (parsed.protocol) {
    case 'file:':
      if (parsed.host !== '' && parsed.host !== 'localhost') {
        throw new ConfigError(`invalid state store URL "${url}": use file:///absolute/path (three slashes)`);
      }
      return new FileVfs(fileURLToPath(parsed));
    case 'memfs:':
      if (parsed.host === '') {
        throw new ConfigError(`invalid state store URL "${url}": use memfs://NAME/PATH`);
      }
      return new MemfsVfs(parsed);
    case 's3:': {
      requireBucket(parsed, url);
      return new S3Vfs(parsed, { ...vfsOptionsFromEnv(options.env ?? process.env).s3, ...options.s3 });
    }
    case 'gs:':
      requireBucket(parsed, url);
      return new GcsVfs(parsed, { ...vfsOptionsFromEnv(options.env ?? process.env).gcs, ...options.gcs });
    default:
      throw new ConfigError(
        `unsupported state store URL "${url}": the scheme must be one of ${supportedSchemes
          .map((s) => `${s}://`)
          .join(', ')}`,
      );
  }
}
