/**
 * `gs://bucket/prefix`: a state store in Google Cloud Storage, over the JSON API with
 * google-auth-library for credentials (Application Default Credentials: the node's service account
 * on GCE, `GOOGLE_APPLICATION_CREDENTIALS` elsewhere). Plain HTTPS keeps the dependency small; the
 * endpoint can be pointed at a simulator or an emulator.
 *
 * Every request has a deadline ({@link defaultGcsTimeoutMs}) that covers getting its credentials
 * (the metadata server or a token endpoint) as well as the exchange itself: a store, or a credential
 * source, that never answers is a TimeoutError, never a hang of the node's request that waits on it.
 */
import { STATUS_CODES } from 'node:http';
import { GoogleAuth } from 'google-auth-library';
import { googleClientOptions, googleCredentialsError } from '../cloud/gce/compute.ts';
import { withDeadline } from '../deadline.ts';
import {
  ForbiddenError,
  KopsError,
  NotFoundError,
  TimeoutError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { type HttpsAnswer, httpsRequest } from '../net/https-client.ts';
import { bucketLocation, checkObjectPath, joinKey, ListingPages, listScope } from './paths.ts';
import { maxObjectBytes, type StoredObject, type Vfs } from './types.ts';

/** What the GCS backend needs from an auth client: the headers that authorise one request. */
export interface GcsAuth {
  getRequestHeaders(url?: string): Promise<Headers>;
}

/** How to reach GCS. */
export interface GcsVfsOptions {
  /** Base URL of the JSON API; default `https://storage.googleapis.com`. */
  endpoint?: string;
  /** Auth client; default Application Default Credentials with the read-write storage scope. */
  auth?: GcsAuth;
  /** Deadline of each request, its credentials included (default {@link defaultGcsTimeoutMs}). */
  timeoutMs?: number;
}

/**
 * How long one request may take, getting its credentials included (default): kops' state files are
 * kilobytes, so a store slower than this is down; S3's calls have the same 10 s.
 */
export const defaultGcsTimeoutMs = 10_000;

const defaultEndpoint = 'https://storage.googleapis.com';
const storageScope = 'https://www.googleapis.com/auth/devstorage.read_write';

/** The JSON body of a successful answer; one that is not JSON means the endpoint is not GCS. */
function jsonOf(answer: HttpsAnswer): unknown {
  try {
    return JSON.parse(answer.body.toString('utf8'));
  } catch (err) {
    throw new UnavailableError(`the storage API answered what is not JSON (${(err as Error).message})`, {
      cause: err,
    });
  }
}

/** A VFS over one GCS bucket and object-name prefix. */
export class GcsVfs implements Vfs {
  readonly url: string;
  readonly #bucket: string;
  readonly #root: string;
  readonly #endpoint: string;
  readonly #auth: GcsAuth;
  readonly #timeoutMs: number;

  constructor(url: URL, options: GcsVfsOptions = {}) {
    ({ bucket: this.#bucket, root: this.#root, url: this.url } = bucketLocation(url, 'gs'));
    this.#endpoint = (options.endpoint ?? defaultEndpoint).replace(/\/+$/, '');
    this.#auth =
      options.auth ?? new GoogleAuth({ scopes: [storageScope], clientOptions: googleClientOptions() });
    this.#timeoutMs = options.timeoutMs ?? defaultGcsTimeoutMs;
  }

  #objectUrl(path: string, query: string): string {
    const name = encodeURIComponent(joinKey(this.#root, checkObjectPath(path)));
    return `${this.#endpoint}/storage/v1/b/${encodeURIComponent(this.#bucket)}/o/${name}${query}`;
  }

  async #request(
    action: string,
    path: string,
    url: string,
    init: { method?: string; headers?: Record<string, string>; body?: Buffer } = {},
  ): Promise<HttpsAnswer> {
    const where = `${this.url}/${path}`;
    // Monotonic: a step of the wall clock while the credentials come must not cut or stretch the rest.
    const started = performance.now();
    let answer: HttpsAnswer;
    // Typed by #credentials: a missing credential is not the store's outage.
    const headers = Object.fromEntries(await this.#credentials(url, action, where));
    try {
      answer = await httpsRequest({
        url: new URL(url),
        method: init.method,
        headers: { ...headers, ...init.headers },
        body: init.body,
        // What is left of the deadline once the credentials came.
        timeoutMs: Math.max(1, this.#timeoutMs - (performance.now() - started)),
        // The largest object or listing page read: kops' state files are kilobytes.
        maxBodyBytes: maxObjectBytes,
      });
    } catch (err) {
      if (err instanceof TimeoutError) {
        throw new TimeoutError(`cannot ${action} ${where}: no answer within ${this.#timeoutMs} ms`, {
          cause: err,
        });
      }
      // Too large stays too large: not an outage that a retry would end.
      if (err instanceof KopsError && err.kind === 'too-large') {
        throw new KopsError(err.kind, `cannot ${action} ${where}: ${err.message}`, { cause: err });
      }
      throw new UnavailableError(`cannot ${action} ${where}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    if (answer.status >= 200 && answer.status <= 299) return answer;
    throw this.#failure(action, path, answer);
  }

  /**
   * The headers that authorise a request, within the request's deadline: the auth client may have to
   * ask the metadata server or a token endpoint first, and neither is bounded by google-auth-library.
   * Past the deadline its answer is dropped.
   */
  async #credentials(url: string, action: string, where: string): Promise<Headers> {
    try {
      return await withDeadline(
        this.#auth.getRequestHeaders(url),
        this.#timeoutMs,
        `cannot ${action} ${where}: credentials`,
      );
    } catch (err) {
      if (err instanceof TimeoutError) {
        throw new TimeoutError(`cannot ${action} ${where}: no answer within ${this.#timeoutMs} ms`, {
          cause: err,
        });
      }
      // Typed as the compute client types them: an unusable credentials file is the configuration's
      // fault, no credentials at all a dependency's.
      throw googleCredentialsError(err, `cannot ${action} ${where}`);
    }
  }

  #failure(action: string, path: string, answer: HttpsAnswer): KopsError {
    const where = `${this.url}/${path}`;
    let message = STATUS_CODES[answer.status] ?? '';
    try {
      const body = JSON.parse(answer.body.toString('utf8')) as { error?: { message?: string } };
      message = body.error?.message ?? message;
    } catch {
      // Not JSON: keep the status text.
    }
    const reason = `HTTP ${answer.status}: ${message}`;
    switch (answer.status) {
      case 404:
        return new NotFoundError(`${where} does not exist (${message})`);
      case 401:
        return new UnauthenticatedError(`cannot ${action} ${where}: no valid Google credentials (${reason})`);
      case 403:
        return new ForbiddenError(
          `cannot ${action} ${where}: access denied (${reason}); grant the controller's service account ` +
            'storage.objects.get and storage.objects.list on the bucket (see docs/state-store.md)',
        );
      default:
        return new UnavailableError(`cannot ${action} ${where}: ${reason}`);
    }
  }

  async read(path: string): Promise<StoredObject> {
    const answer = await this.#request('read', path, this.#objectUrl(path, '?alt=media'));
    const modifiedMs = Date.parse(String(answer.headers['last-modified'] ?? ''));
    return {
      data: answer.body,
      version: String(answer.headers['x-goog-generation'] ?? ''),
      ...(Number.isNaN(modifiedMs) ? {} : { modifiedMs }),
    };
  }

  async stat(path: string): Promise<string | undefined> {
    try {
      const answer = await this.#request('stat', path, this.#objectUrl(path, '?fields=generation'));
      return (jsonOf(answer) as { generation?: string }).generation ?? '';
    } catch (err) {
      if (err instanceof NotFoundError) return undefined;
      throw err;
    }
  }

  async write(path: string, data: Buffer | string): Promise<void> {
    const name = encodeURIComponent(joinKey(this.#root, checkObjectPath(path)));
    const url =
      `${this.#endpoint}/upload/storage/v1/b/${encodeURIComponent(this.#bucket)}/o` +
      `?uploadType=media&name=${name}`;
    await this.#request('write', path, url, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream' },
      body: Buffer.from(data),
    });
  }

  async list(prefix: string): Promise<string[]> {
    const scope = listScope(this.#root, prefix);
    const where = `${this.url}/${prefix}`;
    const pages = new ListingPages(where, scope);
    let pageToken: string | undefined;
    do {
      pages.beginPage();
      const url =
        `${this.#endpoint}/storage/v1/b/${encodeURIComponent(this.#bucket)}/o` +
        `?prefix=${encodeURIComponent(scope.full)}&fields=${encodeURIComponent('items(name),nextPageToken')}` +
        (pageToken ? `&pageToken=${encodeURIComponent(pageToken)}` : '');
      const answer = await this.#request('list', prefix || '(root)', url);
      const page = jsonOf(answer) as { items?: unknown; nextPageToken?: unknown; error?: unknown };
      // A proxy's (or a broken store's) error in a 200 is not an empty listing.
      if (
        page === null ||
        typeof page !== 'object' ||
        'error' in page ||
        (page.items !== undefined && !Array.isArray(page.items)) ||
        (page.nextPageToken !== undefined && typeof page.nextPageToken !== 'string')
      ) {
        throw new UnavailableError(
          `cannot list ${where}: the storage API answered what is not a listing: ${answer.body.toString('utf8').slice(0, 200)}`,
        );
      }
      pages.add(
        ((page.items as { name?: unknown }[] | undefined) ?? []).flatMap((item) =>
          typeof item?.name === 'string' ? [item.name] : [],
        ),
      );
      pageToken = pages.next(page.nextPageToken as string | undefined);
    } while (pageToken);
    return pages.keys();
  }

  async delete(path: string): Promise<void> {
    try {
      await this.#request('delete', path, this.#objectUrl(path, ''), { method: 'DELETE' });
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
    }
  }
}
