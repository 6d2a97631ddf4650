/**
 * A Keystone v3 session: one token at a time, got with the controller's credentials, renewed before
 * it expires and again when Nova answers 401 (kops sets gophercloud's `AllowReauth` for the same
 * reason: the controller runs for longer than a token lives), and the compute endpoint of our region
 * from the token's service catalog. Concurrent callers share one authentication.
 */
import { ConfigError, KopsError, UnauthenticatedError, UnavailableError } from '../../errors.ts';
import { type CloudCallRecorder, noCloudCalls } from '../metrics.ts';
import { keystoneAuthBody, keystoneTokensUrl, type OpenStackAuthOptions } from './auth.ts';
import { openstackRequest } from './http.ts';

/** A token and the endpoint it is used at. */
export interface KeystoneToken {
  token: string;
  /** The compute (Nova) endpoint of our region, e.g. `https://nova.example:8774/v2.1`. */
  computeUrl: string;
  /** The project the token is scoped to (`token.project.id`): our cluster's (an unscoped token is refused). */
  projectId: string;
  expiresAt: number;
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

interface CatalogEntry {
  type?: string;
  endpoints?: Array<{ interface?: string; region?: string; region_id?: string; url?: string }>;
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

  /** Drops `token` after the API refused it (revoked, expired early); the next call authenticates. */
  invalidate(token: string): void {
    if (this.#current?.token === token) this.#current = undefined;
  }

  async #authenticate(): Promise<KeystoneToken> {
    const { auth } = this.#options;
    const answer = await openstackRequest({
      call: 'tokens.create',
      url: keystoneTokensUrl(auth.authUrl),
      method: 'POST',
      body: keystoneAuthBody(auth.credentials),
      timeoutMs: this.#options.timeoutMs ?? 10_000,
      maxBodyBytes: 4 * 1024 * 1024,
      calls: this.#options.calls ?? noCloudCalls,
      ...(this.#options.signal ? { signal: this.#options.signal } : {}),
    }).catch((err: unknown) => {
      // Keystone's 401 says only "requires authentication", for a wrong password and an unknown
      // project alike: name what the operator sets.
      if (err instanceof KopsError && err.kind === 'unauthenticated') {
        throw new UnauthenticatedError(
          `${err.message} Keystone refused the controller's credentials for ${scopeOf(auth)}: check ` +
            'OS_USERNAME and OS_PASSWORD (or the application credential), and OS_PROJECT_NAME with ' +
            'OS_PROJECT_DOMAIN_NAME, or OS_PROJECT_ID',
          { cause: err, details: err.details },
        );
      }
      throw err;
    });
    const token = answer.headers['x-subject-token'];
    let parsed: { token?: { expires_at?: string; catalog?: CatalogEntry[]; project?: { id?: unknown } } };
    try {
      parsed = JSON.parse(answer.body.toString('utf8'));
    } catch {
      throw new UnavailableError('Keystone answered a token that is not JSON');
    }
    const expiresAt = Date.parse(parsed.token?.expires_at ?? '');
    if (typeof token !== 'string' || !token || Number.isNaN(expiresAt)) {
      throw new UnavailableError('Keystone answered without X-Subject-Token or expires_at');
    }
    const projectId = parsed.token?.project?.id;
    // Without a project Keystone issues an unscoped token, whose catalog is empty: say why, rather
    // than that the region has no compute endpoint.
    if (typeof projectId !== 'string' || !projectId) {
      throw new ConfigError(
        'OpenStack: Keystone issued a token scoped to no project (no OS_PROJECT_NAME or OS_PROJECT_ID is set): ' +
          "set OS_PROJECT_NAME with OS_PROJECT_DOMAIN_NAME, or OS_PROJECT_ID, to the cluster's project",
      );
    }
    const computeUrl = computeEndpointOf(parsed.token?.catalog ?? [], auth.region, auth.endpointInterface);
    this.#current = { token, computeUrl, expiresAt, projectId };
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

/** The compute endpoint of `region` and `endpointInterface` in a Keystone catalog. */
export function computeEndpointOf(
  catalog: CatalogEntry[],
  region: string,
  endpointInterface: string,
): string {
  for (const service of catalog) {
    if (service.type !== 'compute') continue;
    for (const endpoint of service.endpoints ?? []) {
      const inRegion = endpoint.region_id === region || endpoint.region === region;
      if (inRegion && endpoint.interface === endpointInterface && endpoint.url) {
        return endpoint.url.replace(/\/+$/, '');
      }
    }
  }
  throw new ConfigError(
    `OpenStack: the service catalog has no ${endpointInterface} compute endpoint in region ${region} (check OS_REGION_NAME)`,
  );
}
