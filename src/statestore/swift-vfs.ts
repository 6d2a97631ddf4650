/**
 * `swift://container/prefix`: a state store in OpenStack Swift, as kops' `SwiftPath` reads and writes
 * it. The controller logs in to Keystone v3 with the `OS_*` variables kops passes to it
 * (`openstackAuthFromEnv`, the same reading as the OpenStack cloud's) through a {@link KeystoneSession}
 * of its own, takes the `object-store` endpoint of `OS_REGION_NAME` (and `OS_INTERFACE`, default
 * `public`) from the token's catalog, and speaks Swift's object API over the project's HTTP client:
 * GET / HEAD / PUT / DELETE of an object, and the container's JSON listing with a prefix, paged by
 * marker. An object's version is its ETag. `KOPS_OS_TLS_INSECURE_SKIP_VERIFY` skips the verification
 * of Swift's certificate as it does Keystone's (kops' Swift client honours it too).
 *
 * Every call has a deadline ({@link defaultSwiftTimeoutMs}) that covers the authentication, its
 * retries and the answer. A 5xx, a 408 or 429, or a connection that fails is tried again (three
 * attempts in all, as the S3 backend's SDK does), then reported as unavailable; a 401 renews the
 * token once (kops sets gophercloud's `AllowReauth`), a 404 is NotFound.
 */
import { createHash } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import { type OpenStackAuthOptions, openstackAuthFromEnv } from '../cloud/openstack/auth.ts';
import { openstackTls, warnIfOpenstackInsecureSkipVerify } from '../cloud/openstack/http.ts';
import { KeystoneSession, type KeystoneToken } from '../cloud/openstack/keystone.ts';
import { bounded } from '../deadline.ts';
import {
  ConfigError,
  ForbiddenError,
  isFaultStatus,
  KopsError,
  NotFoundError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import type { Logger } from '../log.ts';
import { type HttpsAnswer, httpsRequest } from '../net/https-client.ts';
import { retryAfterSeconds } from '../net/retry-after.ts';
import { checkObjectPath, joinKey, ListingPages, listScope, trimSlashes } from './paths.ts';
import { maxObjectBytes, type StoredObject, type Vfs } from './types.ts';

/** How to reach Swift; everything is optional. */
export interface SwiftVfsOptions {
  /** Keystone's URL, the region and the credentials; default `openstackAuthFromEnv(env)`. */
  auth?: OpenStackAuthOptions;
  /** Where `auth` is read from when not given (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Deadline of each call, authentication and retries included (default {@link defaultSwiftTimeoutMs}). */
  timeoutMs?: number;
  /** Attempts of a call that meets a fault (default 3). */
  attempts?: number;
  /** Wait before the second attempt; later ones double (default 200 ms). */
  retryDelayMs?: number;
  /**
   * Names per listing page (default 1,000). Swift refuses more than its `container_listing_limit`
   * (412): the listing then pages by that limit, ending at an empty page.
   */
  pageSize?: number;
  /**
   * Where the one warning about `KOPS_OS_TLS_INSECURE_SKIP_VERIFY` goes, if no OpenStack client of
   * the process said it already (default JSON lines on standard error: the callers of `openVfs` give
   * the store no logger).
   */
  logger?: Logger;
}

/** How long one call may take, its authentication and retries included (as S3's and GCS's). */
export const defaultSwiftTimeoutMs = 10_000;

/** The container and key prefix of `swift://container/prefix`, and that URL written canonically. */
export function swiftLocation(url: URL, raw = url.href): { container: string; root: string; url: string } {
  const container = decodeURIComponent(url.host);
  if (container === '' || container.length > 256) {
    throw new ConfigError(
      `invalid state store URL "${raw}": ${container === '' ? 'no container' : `"${container}" is not a container name`}; use swift://CONTAINER/PATH`,
    );
  }
  const root = trimSlashes(decodeURIComponent(url.pathname));
  return { container, root, url: `swift://${container}${root ? `/${root}` : ''}` };
}

/** One container's objects under a key prefix, in Swift. */
export class SwiftVfs implements Vfs {
  readonly url: string;
  readonly #container: string;
  readonly #root: string;
  readonly #session: KeystoneSession;
  readonly #timeoutMs: number;
  readonly #attempts: number;
  readonly #retryDelayMs: number;
  /** Names asked per listing page; undefined once Swift refused it (then its own limit pages). */
  #pageSize: number | undefined;

  /** Throws ConfigError for a URL without container or an `OS_*` environment that names no credentials. */
  constructor(url: URL, options: SwiftVfsOptions = {}) {
    ({ container: this.#container, root: this.#root, url: this.url } = swiftLocation(url));
    this.#timeoutMs = options.timeoutMs ?? defaultSwiftTimeoutMs;
    // The cloud-call metrics count the cloud provider's calls, not the state store's: no recorder.
    this.#session = new KeystoneSession({
      auth: options.auth ?? openstackAuthFromEnv(options.env ?? process.env),
      timeoutMs: this.#timeoutMs,
    });
    this.#attempts = Math.max(1, options.attempts ?? 3);
    this.#retryDelayMs = options.retryDelayMs ?? 200;
    this.#pageSize = options.pageSize ?? 1_000;
    warnIfOpenstackInsecureSkipVerify(options.logger);
  }

  /**
   * A failure of the Keystone session (or of its catalog), said of this store. Keystone down or slow
   * is a fault like Swift down, tried again; refused credentials or a bad catalog are final.
   */
  #opening(err: unknown): unknown {
    if (!(err instanceof KopsError)) return err;
    const message = `cannot open ${this.url}: ${err.message}`;
    const options = { cause: err, details: err.details };
    switch (err.kind) {
      case 'unauthenticated':
        return new UnauthenticatedError(message, options);
      case 'config':
        return new ConfigError(message, options);
      case 'unavailable':
      case 'timeout':
        return new UnavailableError(message, options);
      default:
        return err;
    }
  }

  #objectUrl(storageUrl: string, key: string): URL {
    const path = [this.#container, ...key.split('/')].map(encodeURIComponent).join('/');
    return new URL(`${storageUrl}/${path}`);
  }

  /**
   * One call within the deadline: authenticates, sends, renews a refused token once, and tries a
   * fault again (with `Retry-After` when it fits). Returns the first answer that is not a fault.
   */
  #call(
    action: string,
    path: string,
    request: (storageUrl: string) => {
      url: URL;
      method: string;
      body?: Buffer;
      headers?: Record<string, string>;
    },
  ): Promise<HttpsAnswer> {
    const where = `${this.url}/${path}`;
    // Monotonic: a step of the wall clock must not leave the attempts 1 ms each, nor more than the call's time.
    const deadline = performance.now() + this.#timeoutMs;
    return bounded(
      async (signal) => {
        const tokens = this.#session.forCall();
        let failure: KopsError | undefined;
        for (let attempt = 1; attempt <= this.#attempts; attempt++) {
          let token: KeystoneToken;
          let storageUrl: string;
          try {
            token = await tokens.token();
            storageUrl = token.endpointOf('object-store');
          } catch (err) {
            const opening = this.#opening(err);
            if (!(opening instanceof UnavailableError)) throw opening;
            failure = opening;
            await this.#pause(attempt, undefined, deadline, signal);
            continue;
          }
          const { url, method, body, headers } = request(storageUrl);
          let answer: HttpsAnswer;
          try {
            answer = await httpsRequest({
              url,
              method,
              headers: { 'x-auth-token': token.token, 'user-agent': 'kops-controller', ...headers },
              ...(body ? { body } : {}),
              timeoutMs: Math.max(1, deadline - performance.now()),
              // The largest object or listing page read: kops' state files are kilobytes.
              maxBodyBytes: maxObjectBytes,
              ...openstackTls(),
              signal,
            });
          } catch (err) {
            if (signal.aborted) throw signal.reason;
            if (err instanceof KopsError && err.kind !== 'unavailable') {
              throw new KopsError(err.kind, `cannot ${action} ${where}: ${err.message}`, { cause: err });
            }
            failure = new UnavailableError(`cannot ${action} ${where}: ${(err as Error).message}`, {
              cause: err,
            });
            await this.#pause(attempt, undefined, deadline, signal);
            continue;
          }
          if (answer.status === 401 && tokens.renew(token)) {
            // Revoked or expired early: one new token, as gophercloud's AllowReauth does.
            attempt--;
            continue;
          }
          if (!isFaultStatus(answer.status)) return answer;
          failure = this.#failure(action, path, answer);
          await this.#pause(attempt, failure.retryAfterSeconds, deadline, signal);
        }
        throw failure as KopsError;
      },
      this.#timeoutMs,
      `cannot ${action} ${where}`,
    );
  }

  /** Waits before the next attempt, unless there is none or it would not fit in the (monotonic) deadline. */
  async #pause(attempt: number, retryAfter: number | undefined, deadline: number, signal: AbortSignal) {
    if (attempt >= this.#attempts) return;
    const wait = retryAfter !== undefined ? retryAfter * 1000 : this.#retryDelayMs * 2 ** (attempt - 1);
    if (performance.now() + wait >= deadline) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, wait);
      signal.addEventListener(
        'abort',
        () => {
          clearTimeout(timer);
          resolve();
        },
        { once: true },
      );
    });
  }

  /** The typed error of an answer that is not a success. */
  #failure(action: string, path: string, answer: HttpsAnswer): KopsError {
    const where = `${this.url}/${path}`;
    const text = answer.body
      .toString('utf8')
      .replace(/<[^>]*>/g, ' ')
      .replace(/\s+/g, ' ')
      .trim();
    const reason = `HTTP ${answer.status}: ${text.slice(0, 200) || STATUS_CODES[answer.status] || ''}`;
    const retryAfter = retryAfterSeconds(answer.headers['retry-after'] as string | undefined);
    const details = { status: answer.status, ...(retryAfter ? { retryAfterSeconds: retryAfter } : {}) };
    switch (answer.status) {
      case 404:
        return new NotFoundError(`${where} does not exist (${reason})`, { details });
      case 401:
        return new UnauthenticatedError(
          `cannot ${action} ${where}: Swift refused a new Keystone token (${reason})`,
          { details },
        );
      case 403:
        return new ForbiddenError(
          `cannot ${action} ${where}: access denied (${reason}); give the controller's OpenStack user a role ` +
            `on the project that may read container ${this.#container} (see docs/state-store.md)`,
          { details },
        );
      default:
        return new UnavailableError(`cannot ${action} ${where}: ${reason}`, { details });
    }
  }

  #key(path: string): string {
    return joinKey(this.#root, checkObjectPath(path));
  }

  async read(path: string): Promise<StoredObject> {
    const key = this.#key(path);
    const answer = await this.#call('read', path, (base) => ({
      url: this.#objectUrl(base, key),
      method: 'GET',
    }));
    if (answer.status !== 200) throw this.#failure('read', path, answer);
    const modifiedMs = Date.parse(String(answer.headers['last-modified'] ?? ''));
    return {
      data: answer.body,
      version: String(answer.headers.etag ?? ''),
      ...(Number.isNaN(modifiedMs) ? {} : { modifiedMs }),
    };
  }

  async stat(path: string): Promise<string | undefined> {
    const key = this.#key(path);
    const answer = await this.#call('stat', path, (base) => ({
      url: this.#objectUrl(base, key),
      method: 'HEAD',
    }));
    if (answer.status === 404) return undefined;
    if (answer.status < 200 || answer.status > 299) throw this.#failure('stat', path, answer);
    return String(answer.headers.etag ?? '');
  }

  async write(path: string, data: Buffer | string): Promise<void> {
    const key = this.#key(path);
    const body = Buffer.from(data);
    // Swift checks the body against the ETag it is sent (422 when they differ).
    const etag = createHash('md5').update(body).digest('hex');
    const answer = await this.#call('write', path, (base) => ({
      url: this.#objectUrl(base, key),
      method: 'PUT',
      body,
      headers: { 'content-type': 'application/octet-stream', etag },
    }));
    if (answer.status < 200 || answer.status > 299) throw this.#failure('write', path, answer);
  }

  async list(prefix: string): Promise<string[]> {
    const scope = listScope(this.#root, prefix);
    const full = scope.full;
    const pages = new ListingPages(`${this.url}/${prefix}`, scope);
    let marker: string | undefined;
    for (;;) {
      pages.beginPage();
      const answer = await this.#call('list', prefix || '(root)', (base) => {
        const url = new URL(`${base}/${encodeURIComponent(this.#container)}`);
        url.searchParams.set('format', 'json');
        if (this.#pageSize !== undefined) url.searchParams.set('limit', String(this.#pageSize));
        if (full) url.searchParams.set('prefix', full);
        if (marker !== undefined) url.searchParams.set('marker', marker);
        return { url, method: 'GET', headers: { accept: 'application/json' } };
      });
      if (answer.status === 404) {
        throw new NotFoundError(
          `cannot list ${this.url}/${prefix}: container ${this.#container} does not exist`,
        );
      }
      if (answer.status === 412 && this.#pageSize !== undefined) {
        // "Maximum limit is N": this Swift's container_listing_limit is lower; page by its own.
        this.#pageSize = undefined;
        continue;
      }
      if (answer.status < 200 || answer.status > 299) throw this.#failure('list', prefix, answer);
      // Older Swifts answer an empty listing with 204 and no body.
      let page: { name?: unknown }[] = [];
      if (answer.status !== 204 && answer.body.length > 0) {
        try {
          page = JSON.parse(answer.body.toString('utf8'));
        } catch (err) {
          throw new UnavailableError(`cannot list ${this.url}/${prefix}: the listing is not JSON`, {
            cause: err,
          });
        }
        if (!Array.isArray(page)) {
          throw new UnavailableError(`cannot list ${this.url}/${prefix}: the listing is not a JSON array`);
        }
      }
      const names = page.flatMap((item) => (typeof item?.name === 'string' ? [item.name] : []));
      pages.add(names);
      // Swift refuses a limit above its own, so a short page is the last one; without a limit of
      // ours, only an empty page is (gophercloud's marker pager).
      if (page.length === 0 || (this.#pageSize !== undefined && page.length < this.#pageSize)) break;
      // A marker seen before (a store that ignores it) would list the same page for ever.
      marker = pages.next(names.at(-1));
      if (marker === undefined) {
        throw new UnavailableError(
          `cannot list ${this.url}/${prefix}: a full page of the listing names no object to continue after`,
        );
      }
    }
    return pages.keys();
  }

  async delete(path: string): Promise<void> {
    const key = this.#key(path);
    const answer = await this.#call('delete', path, (base) => ({
      url: this.#objectUrl(base, key),
      method: 'DELETE',
    }));
    if (answer.status === 404) return;
    if (answer.status < 200 || answer.status > 299) throw this.#failure('delete', path, answer);
  }
}
