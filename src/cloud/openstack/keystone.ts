/**
 * A Keystone v3 session: one token at a time, got with the controller's credentials, renewed before
 * it expires and once more when an API refuses it (kops sets gophercloud's `AllowReauth` for the same
 * reason: the controller runs for longer than a token lives), with the token's service catalog, in
 * which each client looks up its own endpoint when it needs it (Nova `compute`, Swift
 * `object-store`). Concurrent callers share one authentication. The Nova client and the Swift state
 * store both use it.
 */
import {
  ConfigError,
  KopsError,
  TimeoutError,
  UnauthenticatedError,
  UnavailableError,
} from '../../errors.ts';
import { isVerdictStatus, malformedAnswer } from '../api-answer.ts';
import { type CloudCallRecorder, noCloudCalls } from '../metrics.ts';
import { keystoneAuthBody, keystoneTokensUrl, type OpenStackAuthOptions } from './auth.ts';
import { openstackRequest } from './http.ts';

/** The catalog services the controller uses, with the names operators know them by. */
const serviceNames = { compute: 'Nova', 'object-store': 'Swift' } as const;

/** A service type of the catalog: `compute` (Nova) or `object-store` (Swift). */
export type CatalogService = keyof typeof serviceNames;

/** One service of a Keystone catalog, as far as it is read. */
export interface CatalogEntry {
  type?: string;
  endpoints?: Array<{ interface?: string; region?: string; region_id?: string; url?: string }>;
}

/** A token, the project it is scoped to, and its service catalog. */
export interface KeystoneToken {
  token: string;
  /** The project the token is scoped to (`token.project.id`): our cluster's (an unscoped token is refused). */
  projectId: string;
  expiresAt: number;
  catalog: readonly CatalogEntry[];
  /**
   * The URL of `service` in our region (`OS_REGION_NAME`) and interface (`OS_INTERFACE`), e.g.
   * `https://nova.example:8774/v2.1`; ConfigError when the catalog has none.
   */
  endpointOf(service: CatalogService): string;
}

/**
 * One call's tokens, however many attempts it makes: `token()` is the session's, and after the API
 * refused one (401: revoked, or expired early) `renew(token)` drops it so that the next `token()`
 * authenticates again. Once per call, as gophercloud's reauthentication: the second time it answers
 * false, and the refusal is the call's answer.
 */
export interface TokenRenewal {
  token(): Promise<KeystoneToken>;
  renew(refused: KeystoneToken): boolean;
}

/** Options of {@link KeystoneSession}. */
export interface KeystoneSessionOptions {
  auth: OpenStackAuthOptions;
  /** Deadline of one authentication (default 10 s). */
  timeoutMs?: number;
  /** A token is renewed this long before it expires (default 5 minutes). */
  renewBeforeMs?: number;
  calls?: CloudCallRecorder;
  now?: () => number;
  /** Aborted when the provider is closed: an authentication in flight ends. */
  signal?: AbortSignal;
}

/** Tokens for the controller's OpenStack credentials. */
export class KeystoneSession {
  readonly #options: KeystoneSessionOptions;
  readonly #now: () => number;
  #current: KeystoneToken | undefined;
  #pending: Promise<KeystoneToken> | undefined;

  constructor(options: KeystoneSessionOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  /** A token valid for a while yet (a new one when the current is near its expiry). */
  async token(): Promise<KeystoneToken> {
    const current = this.#current;
    if (current && current.expiresAt - (this.#options.renewBeforeMs ?? 300_000) > this.#now()) return current;
    this.#pending ??= this.#authenticate().finally(() => {
      this.#pending = undefined;
    });
    return this.#pending;
  }

  /** The tokens of one call: see {@link TokenRenewal}. */
  forCall(): TokenRenewal {
    let renewed = false;
    return {
      token: () => this.token(),
      renew: (refused) => {
        if (renewed) return false;
        renewed = true;
        if (this.#current?.token === refused.token) this.#current = undefined;
        return true;
      },
    };
  }

  async #authenticate(): Promise<KeystoneToken> {
    const { auth, signal } = this.#options;
    const answer = await openstackRequest({
      call: 'tokens.create',
      url: keystoneTokensUrl(auth.authUrl),
      method: 'POST',
      body: keystoneAuthBody(auth.credentials),
      timeoutMs: this.#options.timeoutMs ?? 10_000,
      maxBodyBytes: 4 * 1024 * 1024,
      calls: this.#options.calls ?? noCloudCalls,
      ...(signal ? { signal } : {}),
    }).catch((err: unknown) => {
      if (!(err instanceof KopsError) || signal?.aborted) throw err;
      // Keystone's 401 says only "requires authentication", for a wrong password and an unknown
      // project alike: name what the operator sets.
      if (err.kind === 'unauthenticated') {
        throw new UnauthenticatedError(
          `${err.message} Keystone refused the controller's credentials for ${scopeOf(auth)}: check ` +
            'OS_USERNAME and OS_PASSWORD (or OS_APPLICATION_CREDENTIAL_ID and OS_APPLICATION_CREDENTIAL_SECRET), ' +
            'and OS_PROJECT_NAME with OS_PROJECT_DOMAIN_NAME, or OS_PROJECT_ID',
          { cause: err, details: err.details },
        );
      }
      // Any 4xx answer to the login but 401 (above), 403 and 429 — Keystone's own 400 for a body it
      // cannot validate, or a 404 page from a URL that is not Keystone's (not-the-api) — is the
      // controller's configuration: the login URL is nothing else. Never a verdict on a node (a
      // not-found must not read as "no such server"), and named as what the operator fixes.
      const status = err.upstreamStatus;
      if (status !== undefined && isVerdictStatus(status)) {
        throw new ConfigError(
          `OpenStack: Keystone refused the login at ${keystoneTokensUrl(auth.authUrl).href} (${err.message}): ` +
            "check OS_AUTH_URL (Keystone's URL, with or without /v3) and the OS_* credentials",
          { cause: err, details: err.details },
        );
      }
      if (err.kind === 'unavailable' || err.kind === 'timeout') {
        const Fault = err.kind === 'timeout' ? TimeoutError : UnavailableError;
        throw new Fault(`Keystone (${auth.authUrl}) is unavailable: ${err.message}`, {
          cause: err,
          details: err.details,
        });
      }
      throw err;
    });
    const token = answer.headers['x-subject-token'];
    let parsed: { token?: { expires_at?: string; catalog?: CatalogEntry[]; project?: { id?: unknown } } };
    try {
      parsed = JSON.parse(answer.body.toString('utf8'));
    } catch {
      throw malformedAnswer('Keystone answered a token that is not JSON');
    }
    const expiresAt = Date.parse(parsed.token?.expires_at ?? '');
    if (typeof token !== 'string' || !token || Number.isNaN(expiresAt)) {
      throw malformedAnswer('Keystone answered without X-Subject-Token or expires_at');
    }
    const projectId = parsed.token?.project?.id;
    // Without a project Keystone issues an unscoped token, whose catalog is empty: say why, rather
    // than that the region has no endpoint.
    if (typeof projectId !== 'string' || !projectId) {
      throw new ConfigError(
        'OpenStack: Keystone issued a token scoped to no project (no OS_PROJECT_NAME or OS_PROJECT_ID is set): ' +
          "set OS_PROJECT_NAME with OS_PROJECT_DOMAIN_NAME, or OS_PROJECT_ID, to the cluster's project",
      );
    }
    const catalog = Array.isArray(parsed.token?.catalog) ? parsed.token.catalog : [];
    this.#current = {
      token,
      projectId,
      expiresAt,
      catalog,
      endpointOf: (service) => endpointOf(catalog, service, auth.region, auth.endpointInterface),
    };
    return this.#current;
  }
}

/** The project the credentials ask for, in words: `project kops (domain Default)`. */
function scopeOf(auth: OpenStackAuthOptions): string {
  const { credentials } = auth;
  if (credentials.method === 'application-credential') return "the application credential's project";
  const project = credentials.project;
  if (!project) return 'no project';
  if ('id' in project) return `project id ${project.id}`;
  const domain = 'id' in project.domain ? `domain id ${project.domain.id}` : `domain ${project.domain.name}`;
  return `project ${project.name} (${domain})`;
}

/** The URL of `service` in `region` and `endpointInterface` in a Keystone catalog, without a trailing slash. */
export function endpointOf(
  catalog: readonly CatalogEntry[],
  service: CatalogService,
  region: string,
  endpointInterface: string,
): string {
  for (const entry of catalog) {
    if (entry.type !== service) continue;
    for (const endpoint of entry.endpoints ?? []) {
      const inRegion = endpoint.region_id === region || endpoint.region === region;
      if (inRegion && endpoint.interface === endpointInterface && endpoint.url) {
        return endpoint.url.replace(/\/+$/, '');
      }
    }
  }
  throw new ConfigError(
    `OpenStack: the service catalog has no ${endpointInterface} ${service} (${serviceNames[service]}) endpoint ` +
      `in region ${region}: check OS_REGION_NAME (and OS_INTERFACE), and that the cloud runs ${serviceNames[service]}`,
  );
}
