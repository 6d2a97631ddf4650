/**
 * `gs://bucket/prefix`: a state store in Google Cloud Storage, over the JSON API with
 * google-auth-library for credentials (Application Default Credentials: the node's service account
 * on GCE, `GOOGLE_APPLICATION_CREDENTIALS` elsewhere). Plain HTTPS keeps the dependency small; the
 * endpoint can be pointed at a simulator or an emulator.
 */
import { GoogleAuth } from 'google-auth-library';
import {
  ForbiddenError,
  type KopsError,
  NotFoundError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { bucketLocation, checkObjectPath, joinKey, listScope } from './paths.ts';
import type { StoredObject, Vfs } from './types.ts';

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
  /** Per-request timeout in milliseconds (default 30 s). */
  timeoutMs?: number;
}

const defaultEndpoint = 'https://storage.googleapis.com';
const storageScope = 'https://www.googleapis.com/auth/devstorage.read_write';

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
    this.#auth = options.auth ?? new GoogleAuth({ scopes: [storageScope] });
    this.#timeoutMs = options.timeoutMs ?? 30_000;
  }

  #objectUrl(path: string, query: string): string {
    const name = encodeURIComponent(joinKey(this.#root, checkObjectPath(path)));
    return `${this.#endpoint}/storage/v1/b/${encodeURIComponent(this.#bucket)}/o/${name}${query}`;
  }

  async #request(action: string, path: string, url: string, init: RequestInit = {}): Promise<Response> {
    let response: Response;
    try {
      const headers = await this.#auth.getRequestHeaders(url);
      for (const [name, value] of new Headers(init.headers ?? {})) headers.set(name, value);
      response = await fetch(url, { ...init, headers, signal: AbortSignal.timeout(this.#timeoutMs) });
    } catch (err) {
      throw new UnavailableError(`cannot ${action} ${this.url}/${path}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    if (response.ok) return response;
    throw await this.#failure(action, path, response);
  }

  async #failure(action: string, path: string, response: Response): Promise<KopsError> {
    const where = `${this.url}/${path}`;
    let message = response.statusText;
    try {
      const body = (await response.json()) as { error?: { message?: string } };
      message = body.error?.message ?? message;
    } catch {
      // Not JSON: keep the status text.
    }
    const reason = `HTTP ${response.status}: ${message}`;
    switch (response.status) {
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
    const response = await this.#request('read', path, this.#objectUrl(path, '?alt=media'));
    const data = Buffer.from(await response.arrayBuffer());
    return { data, version: response.headers.get('x-goog-generation') ?? '' };
  }

  async stat(path: string): Promise<string | undefined> {
    try {
      const response = await this.#request('stat', path, this.#objectUrl(path, '?fields=generation'));
      return ((await response.json()) as { generation?: string }).generation ?? '';
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
    const response = await this.#request('write', path, url, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream' },
      body: Buffer.from(data),
    });
    await response.arrayBuffer();
  }

  async list(prefix: string): Promise<string[]> {
    const { full, strip } = listScope(this.#root, prefix);
    const names: string[] = [];
    let pageToken: string | undefined;
    do {
      const url =
        `${this.#endpoint}/storage/v1/b/${encodeURIComponent(this.#bucket)}/o` +
        `?prefix=${encodeURIComponent(full)}&fields=${encodeURIComponent('items(name),nextPageToken')}` +
        (pageToken ? `&pageToken=${encodeURIComponent(pageToken)}` : '');
      const response = await this.#request('list', prefix || '(root)', url);
      const page = (await response.json()) as { items?: { name: string }[]; nextPageToken?: string };
      for (const item of page.items ?? []) names.push(item.name.slice(strip));
      pageToken = page.nextPageToken;
    } while (pageToken);
    return names.sort();
  }

  async delete(path: string): Promise<void> {
    try {
      const response = await this.#request('delete', path, this.#objectUrl(path, ''), { method: 'DELETE' });
      await response.arrayBuffer();
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
    }
  }
}
