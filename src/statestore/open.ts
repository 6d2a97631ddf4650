/** Opens a state store by URL: the scheme picks the backend. */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError } from '../errors.ts';
import { AzureBlobVfs, type AzureBlobVfsOptions, azureBlobLocation } from './azure-blob-vfs.ts';
import { FileVfs } from './file-vfs.ts';
import { GcsVfs, type GcsVfsOptions } from './gcs-vfs.ts';
import { MemfsVfs } from './memfs-vfs.ts';
import { S3Vfs, type S3VfsOptions } from './s3-vfs.ts';
import { SwiftVfs, type SwiftVfsOptions } from './swift-vfs.ts';
import type { Vfs } from './types.ts';

/** Backend-specific options; each backend reads only its own. */
export interface VfsOptions {
  /** `s3://` and the S3-compatible schemes (`do://`, `hos://`, `linode://`, `scw://`). */
  s3?: S3VfsOptions;
  gcs?: GcsVfsOptions;
  swift?: SwiftVfsOptions;
  azureBlob?: AzureBlobVfsOptions;
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
  if (env['S3_ENDPOINT']) s3.endpoint = s3Endpoint(env['S3_ENDPOINT']);
  if (env['S3_REGION']) s3.region = env['S3_REGION'];
  if (env['S3_ACCESS_KEY_ID'] && env['S3_SECRET_ACCESS_KEY']) {
    s3.credentials = { accessKeyId: env['S3_ACCESS_KEY_ID'], secretAccessKey: env['S3_SECRET_ACCESS_KEY'] };
  }
  const gcs: GcsVfsOptions = {};
  const emulator = env['STORAGE_EMULATOR_HOST'];
  if (emulator) gcs.endpoint = /^https?:\/\//.test(emulator) ? emulator : `http://${emulator}`;
  return { s3, gcs };
}

/**
 * `S3_ENDPOINT` as a URL: kops' own guides write it without a scheme for DigitalOcean and Scaleway
 * (`nyc3.digitaloceanspaces.com`, `s3.fr-par.scw.cloud`), which means HTTPS.
 */
function s3Endpoint(value: string): string {
  return /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\//.test(value) ? value : `https://${value}`;
}

/** The URL schemes `openVfs` understands (kops' `BuildVfsPath` but `k8s://`). */
export const supportedSchemes = [
  'file',
  's3',
  'gs',
  'memfs',
  'do',
  'hos',
  'linode',
  'scw',
  'swift',
  'azureblob',
] as const;

/**
 * The S3-compatible stores kops addresses by a scheme of their own (kops' `buildDOPath`,
 * `buildHetznerPath`, `buildLinodePath`, `buildSCWPath`): all need `S3_ENDPOINT`, use path-style
 * addressing and the `S3_*` credentials. Linode's is the one kops restricts checksums to
 * "when required" (Akamai rejects the others); the rest keep the SDK's default.
 */
const s3CompatibleStores: Record<string, { title: string; example: string; whenRequired: boolean }> = {
  do: { title: 'DigitalOcean Spaces', example: 'https://nyc3.digitaloceanspaces.com', whenRequired: false },
  hos: {
    title: 'Hetzner Object Storage',
    example: 'https://fsn1.your-objectstorage.com',
    whenRequired: false,
  },
  linode: {
    title: 'Linode (Akamai) Object Storage',
    example: 'https://us-east-1.linodeobjects.com',
    whenRequired: true,
  },
  scw: { title: 'Scaleway Object Storage', example: 'https://s3.fr-par.scw.cloud', whenRequired: false },
};

/**
 * The S3 options of an S3-compatible scheme: explicit options first, then the `S3_*` variables as
 * kops reads them once `S3_ENDPOINT` is set — the endpoint is required, both keys are required, and
 * the region is `S3_REGION` or `us-east-1` (never `AWS_REGION`).
 */
function s3CompatibleOptions(raw: string, scheme: string, options: VfsOptions): S3VfsOptions {
  const store = s3CompatibleStores[scheme] as (typeof s3CompatibleStores)[string];
  const env = options.env ?? process.env;
  const explicit = options.s3 ?? {};
  const endpoint = explicit.endpoint ?? (env['S3_ENDPOINT'] ? s3Endpoint(env['S3_ENDPOINT']) : undefined);
  if (!endpoint) {
    throw new ConfigError(
      `state store URL "${raw}" needs S3_ENDPOINT: set it to the ${store.title} endpoint (e.g. ${store.example}), as kops does`,
    );
  }
  let credentials = explicit.credentials;
  if (!credentials) {
    for (const name of ['S3_ACCESS_KEY_ID', 'S3_SECRET_ACCESS_KEY']) {
      if (!env[name]) {
        throw new ConfigError(
          `state store URL "${raw}": ${name} is not set; ${store.title} needs S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY (as kops does when S3_ENDPOINT is set)`,
        );
      }
    }
    credentials = {
      accessKeyId: env['S3_ACCESS_KEY_ID'] as string,
      secretAccessKey: env['S3_SECRET_ACCESS_KEY'] as string,
    };
  }
  return {
    checksums: store.whenRequired ? 'when-required' : 'sdk-default',
    credentialsHint: `no valid ${store.title} credentials (check S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY)`,
    ...explicit,
    endpoint,
    region: explicit.region ?? (env['S3_REGION'] || 'us-east-1'),
    forcePathStyle: true,
    credentials,
  };
}

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
 * Opens the state store at `url`: `s3://bucket/prefix`, `gs://bucket/prefix`, the S3-compatible
 * `do://`, `hos://`, `linode://` and `scw://bucket/prefix` (with `S3_ENDPOINT`),
 * `swift://container/prefix` (OpenStack, `OS_*`), `azureblob://account/container/prefix`,
 * `file:///dir`, a plain directory path, or `memfs://name/prefix` (in-process, for tests and `dev`).
 * Explicit options win over the environment defaults of `vfsOptionsFromEnv`.
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
    case 'do:':
    case 'hos:':
    case 'linode:':
    case 'scw:':
      requireBucket(parsed, url);
      return new S3Vfs(parsed, s3CompatibleOptions(url, parsed.protocol.slice(0, -1), options));
    case 'swift:':
      return new SwiftVfs(parsed, { env: options.env ?? process.env, ...options.swift });
    case 'azureblob:': {
      const env = options.env ?? process.env;
      if (env['AZURE_STORAGE_ACCOUNT']) {
        throw new ConfigError(
          'unset AZURE_STORAGE_ACCOUNT: the storage account belongs in the URL, azureblob://<account>/<container>/<key> (kops refuses it too)',
        );
      }
      return new AzureBlobVfs(azureBlobLocation(parsed, url), { env, ...options.azureBlob });
    }
    default:
      throw new ConfigError(
        `unsupported state store URL "${url}": the scheme must be one of ${supportedSchemes
          .map((s) => `${s}://`)
          .join(', ')}`,
      );
  }
}
