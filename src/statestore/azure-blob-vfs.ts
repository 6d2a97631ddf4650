/**
 * `azureblob://account/container/prefix`: a state store in Azure Blob Storage, as kops' `AzureBlobPath`
 * reads and writes it, through the maintained SDK (`@azure/storage-blob`) with the credential kops
 * uses, DefaultAzureCredential (its requests, as the store's, through the egress proxy as every client's:
 * src/cloud/azure/egress.ts; the VM's managed identity on Azure; `AZURE_CLIENT_ID` /
 * `AZURE_TENANT_ID` / `AZURE_CLIENT_SECRET` or workload identity elsewhere, and the SDK's variables
 * that narrow it, e.g. `AZURE_TOKEN_CREDENTIALS`).
 *
 * The account's endpoint is `https://<account>.blob.core.windows.net/`, as in kops. Tests and
 * `kops-controller dev` point it elsewhere with {@link azureBlobEndpointVariable}: a base URL under
 * which the account is the first path segment (path-style, as Azurite and the simulator serve it).
 *
 * Every call has a deadline ({@link defaultAzureBlobTimeoutMs}) that covers getting the token, the
 * SDK's retries (three attempts for a 500, a 503 or a connection failure, as the S3 backend's SDK)
 * and the read of the answer; past it the call is aborted. The version of a blob is its ETag.
 */
import type { Agent as HttpsAgent } from 'node:https';
import type { TokenCredential } from '@azure/identity';
import { ContainerClient, type StoragePipelineOptions } from '@azure/storage-blob';
import { azureCredential } from '../cloud/azure/egress.ts';
import { bounded } from '../deadline.ts';
import {
  ConfigError,
  ForbiddenError,
  KopsError,
  NotFoundError,
  TimeoutError,
  TooLargeError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { egressAgent, sharedEgressAgent } from '../net/egress-proxy.ts';
import { checkObjectPath, joinKey, ListingPages, listScope, trimSlashes } from './paths.ts';
import { maxObjectBytes, type StoredObject, type Vfs } from './types.ts';

/**
 * The variable that moves every account's blob endpoint to `<value>/<account>` (path-style), for
 * simulators and emulators; it must be `https://` (the SDK sends bearer tokens over TLS only).
 */
export const azureBlobEndpointVariable = 'KOPS_AZURE_BLOB_ENDPOINT';

/** How to reach Blob Storage; everything is optional. */
export interface AzureBlobVfsOptions {
  /** Default DefaultAzureCredential. */
  credential?: TokenCredential;
  /** Path-style base URL (`https://127.0.0.1:PORT`); default {@link azureBlobEndpointVariable}, else Azure's. */
  endpoint?: string;
  /** Extra CA certificates (PEM) trusted for the endpoint's TLS (a simulator's). */
  caPem?: string;
  /** Where the endpoint variable is read (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Deadline of each call, token and retries included (default {@link defaultAzureBlobTimeoutMs}). */
  timeoutMs?: number;
  /** Attempts of a call that meets a 500, a 503 or a connection failure (default 3). */
  maxTries?: number;
  /** Wait before the second attempt; later ones double (default 200 ms). */
  retryDelayMs?: number;
  /** Names per listing page (default 5,000, the service's maximum). */
  pageSize?: number;
}

/** How long one call may take, its token and retries included (as S3's and GCS's). */
export const defaultAzureBlobTimeoutMs = 10_000;

/** Where an `azureblob://` URL points. */
export interface AzureBlobLocation {
  account: string;
  container: string;
  root: string;
  /** The URL written canonically. */
  url: string;
}

const accountName = /^[a-z0-9]{3,24}$/;
const containerName = /^(?=.{3,63}$)[a-z0-9]+(-[a-z0-9]+)*$/;

/**
 * The account, container and key prefix of `azureblob://account/container/prefix` (kops' layout).
 * Throws ConfigError, saying what to write, when the account or container is missing or malformed.
 */
export function azureBlobLocation(url: URL, raw = url.href): AzureBlobLocation {
  const expected = 'use azureblob://<account>/<container>/<key>';
  const account = decodeURIComponent(url.host);
  if (account === '')
    throw new ConfigError(`invalid state store URL "${raw}": no storage account; ${expected}`);
  if (!accountName.test(account)) {
    throw new ConfigError(
      `invalid state store URL "${raw}": "${account}" is not a storage account name (3-24 lowercase letters and digits); ${expected}`,
    );
  }
  const rest = trimSlashes(decodeURIComponent(url.pathname));
  const slash = rest.indexOf('/');
  const container = slash < 0 ? rest : rest.slice(0, slash);
  const root = slash < 0 ? '' : trimSlashes(rest.slice(slash + 1));
  if (container === '') throw new ConfigError(`invalid state store URL "${raw}": no container; ${expected}`);
  if (!containerName.test(container)) {
    throw new ConfigError(
      `invalid state store URL "${raw}": "${container}" is not a container name (3-63 lowercase letters, digits and single hyphens); ${expected}`,
    );
  }
  return { account, container, root, url: `azureblob://${account}/${container}${root ? `/${root}` : ''}` };
}

/** The container's URL: path-style under an override, else the account's public endpoint. */
function containerUrlOf(location: AzureBlobLocation, endpoint: string | undefined): string {
  const container = encodeURIComponent(location.container);
  if (!endpoint) return `https://${location.account}.blob.core.windows.net/${container}`;
  let base: URL;
  try {
    base = new URL(endpoint);
  } catch {
    throw new ConfigError(`${azureBlobEndpointVariable} "${endpoint}" is not a URL`);
  }
  if (base.protocol !== 'https:') {
    throw new ConfigError(
      `${azureBlobEndpointVariable} "${endpoint}" must be an https:// URL (bearer tokens are sent over TLS only)`,
    );
  }
  return `${endpoint.replace(/\/+$/, '')}/${encodeURIComponent(location.account)}/${container}`;
}

/** A failure as the SDK reports it: a RestError, or a credential's error. */
interface AzureFailure {
  name?: string;
  message?: string;
  statusCode?: number;
  code?: string;
  details?: { errorCode?: string };
}

/** The names of @azure/identity's errors: no token could be got. */
const credentialErrors = new Set([
  'CredentialUnavailableError',
  'AuthenticationError',
  'AggregateAuthenticationError',
  'AuthenticationRequiredError',
]);

/** One container's blobs under a key prefix. */
export class AzureBlobVfs implements Vfs {
  readonly url: string;
  readonly #location: AzureBlobLocation;
  readonly #client: ContainerClient;
  readonly #timeoutMs: number;
  readonly #pageSize: number;

  constructor(location: AzureBlobLocation, options: AzureBlobVfsOptions = {}) {
    this.#location = location;
    this.url = location.url;
    this.#timeoutMs = options.timeoutMs ?? defaultAzureBlobTimeoutMs;
    this.#pageSize = options.pageSize ?? 5_000;
    const env = options.env ?? process.env;
    const endpoint = options.endpoint ?? (env[azureBlobEndpointVariable] || undefined);
    const pipeline: StoragePipelineOptions & { agent?: HttpsAgent } = {
      retryOptions: {
        maxTries: options.maxTries ?? 3,
        retryDelayInMs: options.retryDelayMs ?? 200,
        maxRetryDelayInMs: 2_000,
      },
      // The storage pipeline passes its core options on. The egress proxy as every client honours it
      // (src/net/egress-proxy.ts): with an agent of its own (the endpoint is always https://), the
      // pipeline's proxyPolicy (its own reading of the variables, without CIDRs) stands aside. The
      // agent carries the simulator's CA (the pipeline's TLS options apply only to its own agents).
      agent: options.caPem
        ? egressAgent('https:', { keepAlive: true, ca: options.caPem })
        : sharedEgressAgent('https:'),
    };
    this.#client = new ContainerClient(
      containerUrlOf(location, endpoint),
      options.credential ?? azureCredential(),
      pipeline,
    );
  }

  #key(path: string): string {
    return joinKey(this.#location.root, checkObjectPath(path));
  }

  /** `work` within the call's deadline, its failure typed. */
  async #bounded<T>(
    action: string,
    path: string,
    work: (abortSignal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    try {
      return await bounded(work, this.#timeoutMs, `cannot ${action} ${this.url}/${path}`);
    } catch (err) {
      throw this.#failure(action, path, err);
    }
  }

  #failure(action: string, path: string, err: unknown): KopsError {
    if (err instanceof KopsError) return err;
    const e = (err ?? {}) as AzureFailure;
    const where = `${this.url}/${path}`;
    const code = e.details?.errorCode ?? e.code ?? '';
    const status = e.statusCode;
    const reason = `${status ? `HTTP ${status} ` : ''}${code ? `${code}: ` : ''}${(e.message ?? String(err)).split('\n')[0]}`;
    const options = { cause: err, details: { ...(status ? { status } : {}), ...(code ? { code } : {}) } };
    if (e.name === 'AbortError')
      return new TimeoutError(`cannot ${action} ${where}: aborted (${reason})`, options);
    if (credentialErrors.has(e.name ?? '')) {
      return new UnauthenticatedError(
        `cannot ${action} ${where}: no valid Azure credentials (managed identity, or AZURE_CLIENT_ID / AZURE_TENANT_ID with a secret or workload identity): ${reason}`,
        options,
      );
    }
    // The egress proxy refused the tunnel or could not be reached: a dependency fault, whatever status
    // the proxy answered (a 403 there is not Storage's verdict on the identity).
    if (code === 'ERR_PROXY_TUNNEL')
      return new UnavailableError(`cannot ${action} ${where}: ${reason}`, options);
    if (status === 404 && code === 'ContainerNotFound') {
      return new NotFoundError(
        `cannot ${action} ${where}: container ${this.#location.container} does not exist in storage account ${this.#location.account}`,
        options,
      );
    }
    if (status === 404) return new NotFoundError(`${where} does not exist`, options);
    if (status === 401) {
      return new UnauthenticatedError(
        `cannot ${action} ${where}: Azure Storage refused the token (${reason})`,
        options,
      );
    }
    if (status === 403) {
      return new ForbiddenError(
        `cannot ${action} ${where}: access denied (${reason}); grant the controller's identity "Storage Blob Data Reader" ` +
          `on container ${this.#location.container} ("Storage Blob Data Contributor" to write; see docs/state-store.md)`,
        options,
      );
    }
    return new UnavailableError(`cannot ${action} ${where}: ${reason}`, options);
  }

  async read(path: string): Promise<StoredObject> {
    const blob = this.#client.getBlobClient(this.#key(path));
    return this.#bounded('read', path, async (abortSignal) => {
      const answer = await blob.download(0, undefined, { abortSignal });
      const stream = answer.readableStreamBody;
      // At most maxObjectBytes, announced or as it comes: a larger blob is refused, never held whole.
      const tooLarge = () => {
        stream?.destroy();
        return new TooLargeError(
          `cannot read ${this.url}/${path}: the blob is larger than ${maxObjectBytes} bytes, which no kops object is`,
        );
      };
      if ((answer.contentLength ?? 0) > maxObjectBytes) throw tooLarge();
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of stream ?? []) {
        size += (chunk as Uint8Array).length;
        if (size > maxObjectBytes) throw tooLarge();
        chunks.push(Buffer.from(chunk as Uint8Array));
      }
      return {
        data: Buffer.concat(chunks, size),
        version: answer.etag ?? '',
        ...(answer.lastModified ? { modifiedMs: answer.lastModified.getTime() } : {}),
      };
    });
  }

  async stat(path: string): Promise<string | undefined> {
    const blob = this.#client.getBlobClient(this.#key(path));
    try {
      return await this.#bounded('stat', path, async (abortSignal) => {
        const properties = await blob.getProperties({ abortSignal });
        return properties.etag ?? '';
      });
    } catch (err) {
      // A HEAD answer has no body: a missing container is a 404 too, but its code says which.
      if (err instanceof NotFoundError && (err.details?.['code'] ?? '') !== 'ContainerNotFound')
        return undefined;
      throw err;
    }
  }

  async write(path: string, data: Buffer | string): Promise<void> {
    const blob = this.#client.getBlockBlobClient(this.#key(path));
    const body = Buffer.from(data);
    // One Put Blob: readers see the old or the new blob, never a mix.
    await this.#bounded('write', path, (abortSignal) =>
      blob.upload(body, body.length, {
        abortSignal,
        blobHTTPHeaders: { blobContentType: 'application/octet-stream' },
      }),
    );
  }

  async list(prefix: string): Promise<string[]> {
    const scope = listScope(this.#location.root, prefix);
    const { full } = scope;
    const where = `${this.url}/${prefix}`;
    const pages = new ListingPages(where, scope);
    let continuationToken: string | undefined;
    do {
      pages.beginPage();
      // Each page has the call's deadline: a long listing is many calls.
      const page = await this.#bounded('list', prefix || '(root)', async (abortSignal) => {
        const pages = this.#client
          .listBlobsFlat({ ...(full ? { prefix: full } : {}), abortSignal })
          .byPage({ maxPageSize: this.#pageSize, ...(continuationToken ? { continuationToken } : {}) });
        return (await pages.next()).value;
      });
      // A 200 whose body is not a listing (an `<Error>`, a proxy's page) is not an empty listing.
      if (!page?.segment || !Array.isArray(page.segment.blobItems)) {
        throw new UnavailableError(`cannot list ${where}: the store answered what is not a listing`);
      }
      const items: { name?: unknown }[] = page.segment.blobItems;
      pages.add(items.flatMap((item) => (typeof item.name === 'string' ? [item.name] : [])));
      continuationToken = pages.next(page.continuationToken || undefined);
    } while (continuationToken);
    return pages.keys();
  }

  async delete(path: string): Promise<void> {
    const blob = this.#client.getBlobClient(this.#key(path));
    await this.#bounded('delete', path, (abortSignal) => blob.deleteIfExists({ abortSignal }));
  }
}
