/**
 * The intermediate CAs between Azure's metadata signer and a trusted root, fetched as kops' attest.go
 * fetches them: Azure's PKCS#7 carries the signer alone, and the signer's Authority Information
 * Access names its issuer in Microsoft's PKI repository. The AIA URLs are the document's (untrusted)
 * words, so only those under the configured repository (default `https://www.microsoft.com/pkiops/certs`,
 * same host and port, no credentials, query or fragment, path normalised) are fetched, always with
 * the repository's scheme; a fetched certificate counts only when it is a CA whose subject is the
 * child's issuer (its signature is then checked by the chain validation). A chain follows at most
 * {@link maxIssuerUrlsPerChain} URLs over all its hops, 16 KiB a certificate. Downloads are cached by
 * URL — certificates for 24 hours, failures and misses for 5 minutes — and requests that need the same
 * URL at once share its download, so a forged document can make the controller fetch at most two
 * URLs, each at most once per 5 minutes, and cannot poison what an honest signer's URL gives (kops
 * caches by issuer name, which a forged leaf can copy). Each download is counted as cloud `azure`,
 * call `pki.certificate`.
 * Microsoft's repository failing or not answering is an UnavailableError (retry later); a URL that
 * is refused, a 404 or a certificate that is not the issuer is no chain at all.
 */
import { X509Certificate } from 'node:crypto';
import * as pkijs from 'pkijs';
import { UnavailableError } from '../../errors.ts';
import { egressFetch } from '../../net/egress-proxy.ts';
import { quoted } from '../../quote.ts';
import { LruCache } from '../lru.ts';
import {
  type CloudCallRecorder,
  type CloudCallResult,
  httpCallResult,
  noCloudCalls,
  secondsSince,
} from '../metrics.ts';

/** Where kops fetches Azure's intermediates from. */
export const defaultMicrosoftPkiUrl = 'https://www.microsoft.com/pkiops/certs';
/**
 * Issuer URLs one chain follows, over all its hops, fetched or remembered. Azure's signer names one,
 * whose issuer names at most the root's. The URLs are the words of a document nothing has verified
 * yet: unbounded, one request naming 150 of them (a 16 KiB header's worth) made the controller fetch
 * all 150 (tmp/volume.md, finding 8).
 */
const maxIssuerUrlsPerChain = 2;
const maxCertificateBytes = 16 * 1024;
/** URLs as they appear in errors: the real ones (about 100 characters) whole, a forged one cut. */
const shownUrlLength = 160;

/** Options of {@link AiaIntermediates}. */
export interface AiaIntermediatesOptions {
  /** The repository URLs must point into (default {@link defaultMicrosoftPkiUrl}). */
  baseUrl?: string;
  fetch?: typeof globalThis.fetch;
  /** How long a fetched issuer is kept (default 24 hours). */
  ttlMs?: number;
  /** How long a failed fetch is remembered (default 5 minutes). */
  negativeTtlMs?: number;
  /** The clock the cache's ages are read from (default monotonic, see src/cloud/age.ts). */
  now?: () => number;
  /** Where each download is counted, as call `pki.certificate` of cloud `azure` (default: nowhere). */
  cloudCalls?: CloudCallRecorder;
}

function der(certificate: pkijs.Certificate): Buffer {
  return Buffer.from(certificate.toSchema().toBER(false));
}

/** The CA Issuers URLs a certificate's AIA names. */
function caIssuerUrls(certificate: pkijs.Certificate): string[] {
  const info = new X509Certificate(der(certificate)).infoAccess ?? '';
  return info
    .split('\n')
    .filter((line) => line.startsWith('CA Issuers - URI:'))
    .map((line) => line.slice('CA Issuers - URI:'.length));
}

/** Fetches and caches the issuers a signer's AIA names, within the configured repository. */
export class AiaIntermediates {
  readonly #base: URL;
  readonly #basePath: string;
  readonly #fetch: typeof globalThis.fetch;
  readonly #downloaded: LruCache<string, pkijs.Certificate>;
  /** URLs that recently gave no certificate (`none`) or failed (the error). */
  readonly #missed: LruCache<string, Error | 'none'>;
  /** Downloads under way, shared by the requests that need the same URL meanwhile. */
  readonly #inFlight = new Map<string, Promise<pkijs.Certificate | undefined>>();
  readonly #calls: CloudCallRecorder;

  constructor(options: AiaIntermediatesOptions = {}) {
    this.#base = new URL(options.baseUrl ?? defaultMicrosoftPkiUrl);
    this.#basePath = this.#base.pathname.replace(/\/+$/, '');
    if (this.#basePath === '') throw new RangeError('the PKI repository URL needs a path');
    this.#fetch = options.fetch ?? egressFetch;
    this.#downloaded = new LruCache({
      maxEntries: 256,
      ttlMs: options.ttlMs ?? 86_400_000,
      now: options.now,
    });
    this.#missed = new LruCache({
      maxEntries: 4096,
      ttlMs: options.negativeTtlMs ?? 300_000,
      now: options.now,
    });
    this.#calls = options.cloudCalls ?? noCloudCalls;
  }

  /**
   * The issuers above `signer`, nearest first, as far as the repository has them within
   * {@link maxIssuerUrlsPerChain} URLs.
   */
  async chainFor(signer: pkijs.Certificate): Promise<pkijs.Certificate[]> {
    const chain: pkijs.Certificate[] = [];
    // One allowance for the whole chain: each hop follows at least one URL, so it also bounds the hops.
    const allowance = { urls: maxIssuerUrlsPerChain };
    let current = signer;
    while (allowance.urls > 0) {
      const issuer = await this.#issuerOf(current, allowance);
      if (!issuer) break;
      chain.push(issuer);
      // A self-signed certificate ends the chain.
      if (issuer.subject.isEqual(issuer.issuer)) break;
      current = issuer;
    }
    return chain;
  }

  /** The repository URL an AIA entry stands for, or undefined when it points elsewhere. */
  normalise(raw: string): string | undefined {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      return undefined;
    }
    if (url.username || url.password || url.search || url.hash) return undefined;
    if (url.protocol !== 'http:' && url.protocol !== 'https:') return undefined;
    if (url.hostname.toLowerCase() !== this.#base.hostname.toLowerCase() || url.port !== this.#base.port)
      return undefined;
    // URL already resolved dot segments; the decoded path must still be under the repository. A
    // path that does not decode names nothing there (and must not throw out of a verification).
    let path: string;
    try {
      path = decodeURIComponent(url.pathname);
    } catch {
      return undefined;
    }
    if (path.includes('/../') || !path.startsWith(`${this.#basePath}/`)) return undefined;
    return `${this.#base.protocol}//${this.#base.host}${url.pathname}`;
  }

  /**
   * The first certificate the child's AIA URLs give that is a CA named as the child's issuer, each
   * URL followed taken from `allowance`.
   */
  async #issuerOf(
    child: pkijs.Certificate,
    allowance: { urls: number },
  ): Promise<pkijs.Certificate | undefined> {
    const urls = [...new Set(caIssuerUrls(child).flatMap((raw) => this.normalise(raw) ?? []))];
    for (const url of urls) {
      if (allowance.urls <= 0) break;
      allowance.urls--;
      const certificate = await this.#cached(url);
      if (!certificate) continue;
      const parsed = new X509Certificate(der(certificate));
      if (parsed.ca && certificate.subject.isEqual(child.issuer)) return certificate;
    }
    return undefined;
  }

  async #cached(url: string): Promise<pkijs.Certificate | undefined> {
    const hit = this.#downloaded.get(url);
    if (hit) return hit;
    const missed = this.#missed.get(url);
    if (missed === 'none') return undefined;
    if (missed) throw missed;
    // Set before anything is awaited, so a request arriving meanwhile waits for this download.
    let download = this.#inFlight.get(url);
    if (!download) {
      download = this.#download(url)
        .then(
          (certificate) => {
            if (certificate) this.#downloaded.set(url, certificate);
            else this.#missed.set(url, 'none');
            return certificate;
          },
          (err: unknown) => {
            this.#missed.set(url, err as Error);
            throw err;
          },
        )
        .finally(() => this.#inFlight.delete(url));
      this.#inFlight.set(url, download);
    }
    return download;
  }

  /**
   * The certificate at `url`; undefined when the repository has none there (404, not a certificate).
   * Counted as one call, whatever it ends in.
   */
  async #download(url: string): Promise<pkijs.Certificate | undefined> {
    const started = performance.now();
    // A 200 that is not a certificate is as unusable as no answer: it stays an error unless read.
    let result: CloudCallResult = 'error';
    const shown = quoted(url, shownUrlLength);
    const unanswered = (err: unknown) =>
      new UnavailableError(
        `Microsoft's PKI repository (${shown}) did not answer: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    try {
      let response: Response;
      try {
        response = await this.#fetch(url, { redirect: 'error', signal: AbortSignal.timeout(10_000) });
      } catch (err) {
        throw unanswered(err);
      }
      if (!response.ok) result = httpCallResult(response.status);
      if (response.status === 404 || response.status === 410) return undefined;
      if (!response.ok)
        throw new UnavailableError(`Microsoft's PKI repository answered ${response.status} for ${shown}`);
      let bytes: Uint8Array;
      try {
        bytes = new Uint8Array(await response.arrayBuffer());
      } catch (err) {
        // The answer cut off midway is a fault like no answer, not a document's fault.
        throw unanswered(err);
      }
      if (bytes.length > maxCertificateBytes) return undefined;
      try {
        const certificate = pkijs.Certificate.fromBER(bytes);
        result = 'ok';
        return certificate;
      } catch {
        return undefined;
      }
    } finally {
      this.#calls.request('azure', 'pki.certificate', result);
      this.#calls.duration('azure', 'pki.certificate', secondsSince(started));
    }
  }
}
