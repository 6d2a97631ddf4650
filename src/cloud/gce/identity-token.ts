/**
 * Verification of Google instance identity tokens: the RS256 JWTs a GCE VM gets from its metadata
 * server (`instance/service-accounts/default/identity?audience=…&format=full`). A valid token proves
 * the holder runs on the instance named in its `google.compute_engine` claims; the audience binds it
 * to this controller so a token minted for another service cannot be replayed here.
 */
import { createPublicKey, type KeyObject, verify } from 'node:crypto';
import { z } from 'zod';
import { UnauthenticatedError, UnavailableError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { httpsRequest } from '../../net/https-client.ts';
import { quoted } from '../../quote.ts';
import { monotonicMs, youngerThan } from '../age.ts';
import {
  type CloudCallRecorder,
  type CloudCallResult,
  httpCallResult,
  noCloudCalls,
  secondsSince,
} from '../metrics.ts';

/** Google's signing keys for identity tokens, as a JWKS. */
export const googleJwksUrl = 'https://www.googleapis.com/oauth2/v3/certs';

/** Google's key set is a few kilobytes; an answer past this is not one. */
const maxJwksBytes = 1024 * 1024;
/** The issuers Google writes into identity tokens. */
export const googleIssuers: readonly string[] = ['https://accounts.google.com', 'accounts.google.com'];

/** Options of {@link JwksKeyStore}. */
export interface JwksKeyStoreOptions {
  /** Where the JWKS is served (the simulator's `jwksUri` in tests). */
  url?: string;
  /** Minimum time between two refreshes, so unknown `kid`s cannot make us hammer the JWKS endpoint. */
  minRefreshIntervalMs?: number;
  /** Keys are re-fetched when older than this, unless the response's Cache-Control max-age says less. */
  maxAgeMs?: number;
  timeoutMs?: number;
  /** The clock the refresh interval and the keys' age are read from (default monotonic, see src/cloud/age.ts). */
  now?: () => number;
  logger?: Logger;
  /** Where each fetch of the keys is counted, as call `jwks` of cloud `gce` (default: nowhere). */
  cloudCalls?: CloudCallRecorder;
}

const jwksSchema = z.object({
  keys: z.array(z.looseObject({ kty: z.string(), kid: z.string().optional(), use: z.string().optional() })),
});

/** A cache of a JWKS: refreshed when stale and on an unknown `kid`, at most once per interval. */
export class JwksKeyStore {
  readonly url: string;
  readonly #minRefreshIntervalMs: number;
  readonly #maxAgeMs: number;
  readonly #timeoutMs: number;
  readonly #now: () => number;
  readonly #logger: Logger;
  readonly #calls: CloudCallRecorder;
  #keys = new Map<string, KeyObject>();
  #fetchedAt = Number.NEGATIVE_INFINITY;
  /** When the keys held were read, and how long they may be used from then. */
  #loadedAt = Number.NEGATIVE_INFINITY;
  #lifetimeMs = 0;
  #inFlight: Promise<void> | undefined;
  /** The last refresh's failure, re-thrown until the next refresh is allowed: an outage is not a denial. */
  #failure: Error | undefined;

  constructor(options: JwksKeyStoreOptions = {}) {
    this.url = options.url ?? googleJwksUrl;
    this.#minRefreshIntervalMs = options.minRefreshIntervalMs ?? 30_000;
    this.#maxAgeMs = options.maxAgeMs ?? 3_600_000;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    this.#now = options.now ?? monotonicMs;
    this.#logger = options.logger ?? silentLogger;
    this.#calls = options.cloudCalls ?? noCloudCalls;
  }

  /** The RSA public key with this `kid`, or undefined if the issuer does not publish it. */
  async key(kid: string): Promise<KeyObject | undefined> {
    const now = this.#now();
    const stale = !youngerThan(this.#loadedAt, now, this.#lifetimeMs);
    const unknown = !this.#keys.has(kid);
    if ((stale || unknown) && !youngerThan(this.#fetchedAt, now, this.#minRefreshIntervalMs)) {
      this.#inFlight ??= this.#refresh().finally(() => {
        this.#inFlight = undefined;
      });
      await this.#inFlight;
    } else if (this.#inFlight) {
      await this.#inFlight;
    } else if (unknown && this.#failure) {
      throw this.#failure;
    }
    return this.#keys.get(kid);
  }

  async #refresh(): Promise<void> {
    this.#fetchedAt = this.#now();
    let jwks: z.infer<typeof jwksSchema>;
    let maxAge = this.#maxAgeMs;
    const started = performance.now();
    // A 200 that is not a JWKS is as unusable as no answer: it stays an error unless parsed.
    let result: CloudCallResult = 'error';
    try {
      const res = await httpsRequest({
        url: new URL(this.url),
        timeoutMs: this.#timeoutMs,
        maxBodyBytes: maxJwksBytes,
      });
      if (res.status < 200 || res.status > 299) {
        result = httpCallResult(res.status);
        throw new Error(`HTTP ${res.status}`);
      }
      const cacheControl = /max-age=(\d+)/.exec(res.headers['cache-control'] ?? '');
      if (cacheControl) maxAge = Math.min(maxAge, Number(cacheControl[1]) * 1000);
      const parsed = jwksSchema.safeParse(JSON.parse(res.body.toString('utf8')));
      if (!parsed.success) throw new Error('the response is not a JWKS ({"keys": [...]})');
      jwks = parsed.data;
      result = 'ok';
    } catch (err) {
      const reason = (err as Error).message;
      this.#failure = new UnavailableError(`cannot fetch identity-token keys from ${this.url}: ${reason}`, {
        cause: err,
      });
      throw this.#failure;
    } finally {
      this.#calls.request('gce', 'jwks', result);
      this.#calls.duration('gce', 'jwks', secondsSince(started));
    }
    this.#failure = undefined;
    const keys = new Map<string, KeyObject>();
    for (const jwk of jwks.keys) {
      if (jwk.kty !== 'RSA' || !jwk.kid || (jwk.use && jwk.use !== 'sig')) continue;
      try {
        keys.set(jwk.kid, createPublicKey({ key: jwk as never, format: 'jwk' }));
      } catch {
        this.#logger.warn({ kid: jwk.kid, url: this.url }, 'ignoring a malformed key in the JWKS');
      }
    }
    this.#keys = keys;
    this.#loadedAt = this.#now();
    this.#lifetimeMs = maxAge;
    this.#logger.debug({ url: this.url, keys: keys.size }, 'refreshed identity-token keys');
  }
}

/** The verified facts of an instance identity token. */
export interface GceIdentityClaims {
  projectId: string;
  projectNumber: string;
  zone: string;
  instanceId: string;
  instanceName: string;
  /** When the instance was created, seconds since the epoch. */
  instanceCreationTimestamp: number;
  /** The instance's service account: its numeric id and, when present, its email. */
  serviceAccountId: string;
  serviceAccountEmail: string | undefined;
  audience: string;
  issuedAt: number;
  expiresAt: number;
}

/** Options of {@link GceIdentityTokenVerifier}. */
export interface GceIdentityTokenVerifierOptions {
  keys: JwksKeyStore;
  /** The audience tokens must be minted for: this controller's URL, never a shared value. */
  audience: string;
  /** If set, the instance's project must be one of these. */
  projectIds?: readonly string[];
  /**
   * How far this controller's clock may be behind Google's, which dates the token: tolerated on `iat`
   * and `exp` (default 60 s; the `gce` policy passes its `maxProofAge`).
   */
  maxSkewSeconds?: number;
  /** Longest accepted `exp - iat`; Google's tokens live one hour (default 3,600 s). */
  maxLifetimeSeconds?: number;
  /** The wall clock, milliseconds since the epoch, that `iat` and `exp` are compared with (default `Date.now`). */
  now?: () => number;
}

const headerSchema = z.object({ alg: z.string(), kid: z.string().min(1), typ: z.string().optional() });
const payloadSchema = z.object({
  iss: z.string(),
  aud: z.string(),
  sub: z.string().min(1),
  email: z.string().optional(),
  iat: z.number(),
  exp: z.number(),
  google: z.object({
    compute_engine: z.object({
      project_id: z.string().min(1),
      project_number: z.union([z.number(), z.string()]),
      zone: z.string().min(1),
      instance_id: z.string().min(1),
      instance_name: z.string().min(1),
      instance_creation_timestamp: z.number(),
    }),
  }),
});

/** The largest token accepted; real identity tokens are about 1 KB. */
const maxTokenBytes = 8_192;

function decodeSegment(segment: string, what: string): unknown {
  if (!/^[A-Za-z0-9_-]*$/.test(segment))
    throw new UnauthenticatedError(`identity token ${what} is not base64url`);
  try {
    return JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));
  } catch {
    throw new UnauthenticatedError(`identity token ${what} is not JSON`);
  }
}

/** Verifies GCE instance identity tokens (`format=full`) against a JWKS. */
export class GceIdentityTokenVerifier {
  readonly #options: GceIdentityTokenVerifierOptions;

  constructor(options: GceIdentityTokenVerifierOptions) {
    if (!options.audience) throw new UnauthenticatedError('an identity-token audience is required');
    this.#options = options;
  }

  /**
   * Verifies signature, issuer, audience, lifetime and the compute claims; throws UnauthenticatedError
   * saying which check failed, or UnavailableError when the keys cannot be fetched.
   */
  async verify(token: string): Promise<GceIdentityClaims> {
    if (token.length > maxTokenBytes) throw new UnauthenticatedError('identity token is too large');
    const parts = token.split('.');
    if (parts.length !== 3)
      throw new UnauthenticatedError('identity token is not a JWT (header.payload.signature)');
    const [h, p, s] = parts as [string, string, string];
    await this.#verifySignature(h, p, s);
    const claims = this.#checkedClaims(decodeSegment(p, 'payload'));
    const ce = claims.google.compute_engine;
    return {
      projectId: ce.project_id,
      projectNumber: String(ce.project_number),
      zone: ce.zone,
      instanceId: ce.instance_id,
      instanceName: ce.instance_name,
      instanceCreationTimestamp: ce.instance_creation_timestamp,
      serviceAccountId: claims.sub,
      serviceAccountEmail: claims.email,
      audience: claims.aud,
      issuedAt: claims.iat,
      expiresAt: claims.exp,
    };
  }

  /** The header names an RS256 key the JWKS publishes, and that key signed `header.payload`. */
  async #verifySignature(h: string, p: string, s: string): Promise<void> {
    const header = headerSchema.safeParse(decodeSegment(h, 'header'));
    if (!header.success) throw new UnauthenticatedError('identity token header has no key id (kid)');
    // Only RS256: never `none`, and never an HMAC that would use a public key as the secret. The
    // header is not verified yet: its fields are quoted and cut (a refusal reaches the audit trail).
    if (header.data.alg !== 'RS256') {
      throw new UnauthenticatedError(
        `identity token algorithm ${quoted(header.data.alg)} is not accepted; expected RS256`,
      );
    }
    const { keys } = this.#options;
    const key = await keys.key(header.data.kid);
    if (!key) {
      throw new UnauthenticatedError(
        `identity token is signed with key ${quoted(header.data.kid)}, which ${keys.url} does not publish`,
      );
    }
    if (
      !/^[A-Za-z0-9_-]+$/.test(s) ||
      !verify('sha256', Buffer.from(`${h}.${p}`), key, Buffer.from(s, 'base64url'))
    ) {
      throw new UnauthenticatedError('identity token signature is invalid');
    }
  }

  /** The payload's claims, checked: Google's, for this audience, current, short-lived, of an allowed project. */
  #checkedClaims(payload: unknown): z.infer<typeof payloadSchema> {
    const { audience, projectIds } = this.#options;
    const skew = this.#options.maxSkewSeconds ?? 60;
    const maxLifetime = this.#options.maxLifetimeSeconds ?? 3_600;
    const parsed = payloadSchema.safeParse(payload);
    if (!parsed.success) {
      const path = parsed.error.issues[0]?.path.join('.') ?? '';
      throw new UnauthenticatedError(
        `identity token lacks claim ${path}; request it with format=full from the metadata server`,
      );
    }
    const claims = parsed.data;
    if (!googleIssuers.includes(claims.iss)) {
      throw new UnauthenticatedError(`identity token issuer ${claims.iss} is not Google`);
    }
    // Signed, but the metadata server mints a token for whatever audience the VM asks for.
    if (claims.aud !== audience) {
      throw new UnauthenticatedError(
        `identity token audience ${quoted(claims.aud)} is not this controller ("${audience}")`,
      );
    }
    const now = Math.floor((this.#options.now ?? Date.now)() / 1000);
    if (claims.exp + skew <= now) throw new UnauthenticatedError('identity token has expired');
    if (claims.iat - skew > now) {
      throw new UnauthenticatedError(
        `identity token is issued ${claims.iat - now} s in the future by this controller's clock; at most ${skew} s is tolerated (Google's clock dates it: check this controller's clock)`,
      );
    }
    if (claims.exp - claims.iat > maxLifetime) {
      throw new UnauthenticatedError(`identity token lifetime exceeds ${maxLifetime} s`);
    }
    const projectId = claims.google.compute_engine.project_id;
    if (projectIds && !projectIds.includes(projectId)) {
      throw new UnauthenticatedError(`identity token is for project ${projectId}, not one of this cluster's`);
    }
    return claims;
  }
}
