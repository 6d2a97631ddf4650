/**
 * Bootstrap tokens in the kubeadm format: `<id>.<secret>` stored as Secret
 * `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token`, so tokens made by kubeadm,
 * `kubectl` or `kops-controller token create` are interchangeable. Expired tokens are removed by
 * {@link TokenCleaner}; an expiration that does not parse counts as expired, never as "no expiry".
 *
 * The controller reads the token Secrets through a watch ({@link WatchedTokenSecrets}): a presented
 * token the watch does not know (or whose secret does not match) is refused without asking the API
 * server, so guessing costs nothing upstream, and the cluster-info signer and the cleaner react to
 * the watch's events instead of polling. Acceptance always rests on a read of the Secret.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { CoreV1Api, KubeConfig, V1Secret } from '@kubernetes/client-node';
import { Counter, type Registry } from 'prom-client';
import { bounded } from '../deadline.ts';
import { InvalidInputError, KopsError } from '../errors.ts';
import { fromApiException, httpStatusOfApiError } from '../kube/api-errors.ts';
import { abortingWith } from '../kube/call-options.ts';
import { Informer, kubeList, kubeWatch } from '../kube/informer.ts';
import { sharedMetric } from '../kube/metrics.ts';
import { type Logger, RecurringFailureLog, silentLogger } from '../log.ts';
import { isTokenId, isTokenSecret, parseToken } from '../protocol/bootstrap-token.ts';
import { Backoff } from '../runtime/backoff.ts';
import { type Clock, systemClock } from '../runtime/clock.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { isTransientFailure } from './dependency.ts';
import { maxWatchSilenceMs, watchIsCurrent } from './node-guard.ts';
import type { BootstrapTokenInfo, BootstrapTokenRejection, BootstrapTokenValidator } from './types.ts';

/** The namespace bootstrap token Secrets live in. */
export const tokenNamespace = 'kube-system';
/** The Secret type that marks a bootstrap token. */
export const tokenSecretType = 'bootstrap.kubernetes.io/token';
/** The Secret name prefix; the token id follows. */
export const tokenSecretPrefix = 'bootstrap-token-';
/** kubeadm's default token lifetime. */
export const defaultTokenTtlMs = 24 * 60 * 60 * 1000;
/**
 * How long the read of a token Secret that would be accepted may take before the node is told to
 * retry (default): the replay marker's and the queue's API calls have the same 5 s.
 */
export const defaultTokenReadTimeoutMs = 5_000;

const extraGroupPattern = /^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$/;
const secretNamePattern = /^bootstrap-token-([a-z0-9]{6})$/;
const alphabet = '0123456789abcdefghijklmnopqrstuvwxyz';
/** The largest multiple of 36 that fits a byte: bytes at or above it are redrawn, so no letter is favoured. */
const rejectionLimit = 252;

/** What a token may be used for. */
export type TokenUsage = 'authentication' | 'signing';
/** Every usage, in the order kubeadm lists them. */
export const tokenUsages: readonly TokenUsage[] = ['signing', 'authentication'];

/** A bootstrap token with its secret (as created, before it is stored). */
export interface BootstrapToken extends BootstrapTokenInfo {
  secret: string;
}

/** A random string over `[0-9a-z]` from crypto randomness, by rejection sampling. */
export function randomTokenString(length: number, random: (size: number) => Buffer = randomBytes): string {
  let out = '';
  while (out.length < length) {
    for (const byte of random(length * 2)) {
      if (byte >= rejectionLimit) continue;
      out += alphabet[byte % alphabet.length];
      if (out.length === length) break;
    }
  }
  return out;
}

/** Checks extra groups: each must be `system:bootstrappers:...` as the apiserver requires. */
export function validateExtraGroups(groups: readonly string[]): string[] {
  for (const group of groups) {
    if (!extraGroupPattern.test(group)) {
      throw new InvalidInputError(
        `invalid bootstrap token group "${group}": it must match system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`,
      );
    }
  }
  return [...new Set(groups)];
}

/** Options of {@link newBootstrapToken}. */
export interface NewTokenOptions {
  /** Lifetime in ms; 0 means the token never expires. Default 24 h. */
  ttlMs?: number;
  description?: string;
  usages?: readonly TokenUsage[];
  extraGroups?: readonly string[];
  now?: Date;
  random?: (size: number) => Buffer;
}

/** A fresh token: random id and secret, expiry `now + ttl`, both usages by default. */
export function newBootstrapToken(options: NewTokenOptions = {}): BootstrapToken {
  const ttlMs = options.ttlMs ?? defaultTokenTtlMs;
  if (!Number.isFinite(ttlMs) || ttlMs < 0) {
    throw new InvalidInputError('the token TTL must be a positive duration such as 24h, or 0 for no expiry');
  }
  const usages = options.usages ?? tokenUsages;
  if (usages.length === 0)
    throw new InvalidInputError('a token needs at least one usage: signing, authentication');
  const now = options.now ?? new Date();
  return {
    id: randomTokenString(6, options.random),
    secret: randomTokenString(16, options.random),
    description: options.description,
    expires: ttlMs === 0 ? undefined : new Date(Math.floor((now.getTime() + ttlMs) / 1000) * 1000),
    usages: { authentication: usages.includes('authentication'), signing: usages.includes('signing') },
    extraGroups: validateExtraGroups(options.extraGroups ?? []),
  };
}

/** RFC 3339 in UTC without fractional seconds, as kubeadm writes expirations. */
function rfc3339(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** The Secret that stores a token, with exactly kubeadm's data keys. */
export function tokenSecretOf(token: BootstrapToken): V1Secret {
  const data: Record<string, string> = { 'token-id': token.id, 'token-secret': token.secret };
  if (token.description) data['description'] = token.description;
  if (token.expires) data['expiration'] = rfc3339(token.expires);
  if (token.usages.authentication) data['usage-bootstrap-authentication'] = 'true';
  if (token.usages.signing) data['usage-bootstrap-signing'] = 'true';
  if (token.extraGroups.length > 0) data['auth-extra-groups'] = token.extraGroups.join(',');
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: tokenSecretPrefix + token.id, namespace: tokenNamespace },
    type: tokenSecretType,
    data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
  };
}

/** A stored token as read from its Secret: what is needed to judge it, secret included. */
export interface StoredToken {
  id: string;
  secret: string;
  /** undefined = no expiry; an Invalid Date = an expiration that does not parse (treated as expired). */
  expires: Date | undefined;
  description?: string;
  usages: { authentication: boolean; signing: boolean };
  /** The groups as stored; {@link validate} rejects the token if any is invalid. */
  extraGroups: string[];
  uid?: string;
  deleting: boolean;
}

function decoded(data: Record<string, string>, key: string): string | undefined {
  const value = data[key];
  return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
}

/**
 * Reads a token Secret (wire or client-node shape: data base64). Undefined when the Secret is not a
 * well-formed bootstrap token: wrong name or type, missing or mismatched id, malformed secret.
 */
export function storedTokenOf(secret: V1Secret): StoredToken | undefined {
  const nameMatch = secretNamePattern.exec(secret.metadata?.name ?? '');
  if (!nameMatch || secret.type !== tokenSecretType || !secret.data) return undefined;
  const data = secret.data;
  const id = decoded(data, 'token-id');
  const tokenSecret = decoded(data, 'token-secret');
  if (id !== nameMatch[1] || tokenSecret === undefined || !isTokenSecret(tokenSecret)) return undefined;
  const expiration = decoded(data, 'expiration');
  const groups = decoded(data, 'auth-extra-groups');
  return {
    id: nameMatch[1] as string,
    secret: tokenSecret,
    // Anything but RFC 3339 becomes an Invalid Date, which counts as expired.
    expires: expiration === undefined ? undefined : new Date(parseRfc3339(expiration)),
    description: decoded(data, 'description'),
    usages: {
      authentication: decoded(data, 'usage-bootstrap-authentication') === 'true',
      signing: decoded(data, 'usage-bootstrap-signing') === 'true',
    },
    extraGroups: groups ? groups.split(',').map((g) => g.trim()) : [],
    uid: secret.metadata?.uid,
    deleting: Boolean(secret.metadata?.deletionTimestamp),
  };
}

/** Milliseconds of an RFC 3339 timestamp, NaN for anything else (Date.parse alone is too lenient). */
function parseRfc3339(text: string): number {
  const rfc3339Pattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i;
  return rfc3339Pattern.test(text) ? Date.parse(text) : Number.NaN;
}

/** Whether a stored token has expired at `now`; an unparseable expiration has. */
export function isExpired(token: Pick<StoredToken, 'expires'>, now: Date): boolean {
  if (token.expires === undefined) return false;
  const at = token.expires.getTime();
  return Number.isNaN(at) || at <= now.getTime();
}

/** Whether a stored token may sign cluster-info now (kubeadm's BootstrapSigner rule). */
export function canSign(token: StoredToken, now: Date): boolean {
  return token.usages.signing && !token.deleting && !isExpired(token, now);
}

/** The public view of a stored token (no secret). */
export function tokenInfoOf(token: StoredToken): BootstrapTokenInfo {
  return {
    id: token.id,
    description: token.description,
    expires: token.expires,
    usages: token.usages,
    extraGroups: token.extraGroups,
  };
}

/** Constant-time string equality: compares digests, so neither content nor length leaks through timing. */
export function constantTimeEqual(a: string, b: string): boolean {
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(a), digest(b));
}

/** Where token Secrets are read from: the API, or a watch with the API behind it. */
export interface TokenSecretSource {
  /** The Secret of a token id as the API server has it now, or undefined if there is none. */
  get(id: string): Promise<V1Secret | undefined>;
  /** Every token Secret. */
  list(): Promise<V1Secret[]>;
  /** Calls `listener` after any change; returns the unsubscribe function. Absent for polling sources. */
  subscribe?(listener: () => void): () => void;
  /**
   * What a current watch holds for a token id (`secret` undefined: no such Secret), or undefined
   * when there is no current watch. Good for refusing only: acceptance rests on {@link get}.
   */
  watched?(id: string): { secret: V1Secret | undefined } | undefined;
}

/** An informer over the bootstrap token Secrets of kube-system (by field selector on the type). */
export function tokenSecretInformer(
  kubeConfig: KubeConfig,
  options: { logger?: Logger; clock?: Clock; registry?: Registry } = {},
): Informer<V1Secret> {
  const path = `/api/v1/namespaces/${tokenNamespace}/secrets`;
  return new Informer<V1Secret>({
    name: 'bootstrap-token-secrets',
    path,
    kind: 'Secret',
    list: kubeList<V1Secret>(kubeConfig, path),
    watch: kubeWatch(kubeConfig),
    fieldSelector: `type=${tokenSecretType}`,
    logger: options.logger,
    clock: options.clock,
    registry: options.registry,
  });
}

/** Options of {@link WatchedTokenSecrets}. */
export interface WatchedTokenSecretsOptions {
  kubeConfig: KubeConfig;
  /** The API server, read for every acceptance and for everything while the watch is not current. */
  api: TokenSecretSource;
  /** A watch silent for longer than this is not current (default: the impersonation guard's 90 s). */
  maxSilenceMs?: number;
  clock?: Clock;
  registry?: Registry;
  logger?: Logger;
}

/**
 * The token Secrets as the controller reads them: a watch (list+watch, no polling) with the API
 * server behind it. While the watch is current — the impersonation guard's rule: first list done,
 * stream open and heard from within `maxSilenceMs` — it answers {@link watched} (so a guessed token
 * is refused with no API read) and {@link list} (for the signer and the cleaner, which also
 * {@link subscribe} to its events). {@link get} is always a read of the API server: a token is only
 * ever accepted on the API server's word, so a Secret deleted a moment ago stops working at once,
 * whatever the watch has delivered. While the watch is not current (starting, reconnecting, stalled)
 * every lookup reads the API server, as a controller without a watch would.
 */
export class WatchedTokenSecrets implements TokenSecretSource {
  readonly #informer: Informer<V1Secret>;
  readonly #api: TokenSecretSource;
  readonly #maxSilenceMs: number;
  readonly #reads: Counter | undefined;

  constructor(options: WatchedTokenSecretsOptions) {
    const { registry } = options;
    this.#informer = tokenSecretInformer(options.kubeConfig, {
      ...(options.logger ? { logger: options.logger } : {}),
      ...(options.clock ? { clock: options.clock } : {}),
      ...(registry ? { registry } : {}),
    });
    this.#api = options.api;
    this.#maxSilenceMs = options.maxSilenceMs ?? maxWatchSilenceMs;
    this.#reads = registry
      ? sharedMetric(
          registry,
          'kops_controller_bootstrap_token_reads_total',
          () =>
            new Counter({
              name: 'kops_controller_bootstrap_token_reads_total',
              help: 'Bootstrap token lookups, by where they were answered: the token watch or the API server.',
              labelNames: ['source'],
              registers: [registry],
            }),
        )
      : undefined;
  }

  /** Starts listing and watching; failures are retried until {@link stop}. */
  start(): void {
    this.#informer.start();
  }

  /** Stops the watch. */
  stop(): Promise<void> {
    return this.#informer.stop();
  }

  /** Whether the watch is current, so that its answers may stand in for the API server's. */
  isCurrent(): boolean {
    // The guard's rule reads these two of a Node informer; a Secret informer has the same.
    const informer = this.#informer;
    return watchIsCurrent(
      {
        hasSynced: () => informer.hasSynced(),
        watchSilenceMs: () => informer.watchSilenceMs(),
        get: () => undefined,
      },
      this.#maxSilenceMs,
    );
  }

  watched(id: string): { secret: V1Secret | undefined } | undefined {
    if (!this.isCurrent()) return undefined;
    this.#reads?.inc({ source: 'watch' });
    return { secret: this.#informer.get(`${tokenNamespace}/${tokenSecretPrefix}${id}`) };
  }

  get(id: string): Promise<V1Secret | undefined> {
    this.#reads?.inc({ source: 'api' });
    return this.#api.get(id);
  }

  async list(): Promise<V1Secret[]> {
    if (this.isCurrent()) return this.#informer.list();
    return this.#api.list();
  }

  subscribe(listener: () => void): () => void {
    return this.#informer.addHandlers({ add: listener, update: listener, delete: listener });
  }
}

/** Options of {@link apiTokenSource}. */
export interface ApiTokenSourceOptions {
  /** Deadline of each read of one token Secret (default {@link defaultTokenReadTimeoutMs}). */
  timeoutMs?: number;
}

/**
 * A {@link TokenSecretSource} reading the API directly (CLI, or processes without an informer). A
 * token read that gets no answer within its deadline is a TimeoutError: a dependency fault for the
 * bootstrap policies (503 with Retry-After), never a refusal of the token.
 */
export function apiTokenSource(core: CoreV1Api, options: ApiTokenSourceOptions = {}): TokenSecretSource {
  const timeoutMs = options.timeoutMs ?? defaultTokenReadTimeoutMs;
  return {
    async get(id) {
      if (!isTokenId(id)) return undefined;
      const name = tokenSecretPrefix + id;
      const action = `read secret ${tokenNamespace}/${name}`;
      try {
        return await bounded(
          (signal) => core.readNamespacedSecret({ name, namespace: tokenNamespace }, abortingWith(signal)),
          timeoutMs,
          action,
        );
      } catch (err) {
        if (httpStatusOfApiError(err) === 404) return undefined;
        throw fromApiException(err, action);
      }
    },
    async list() {
      try {
        const list = await core.listNamespacedSecret({
          namespace: tokenNamespace,
          fieldSelector: `type=${tokenSecretType}`,
        });
        return list.items;
      } catch (err) {
        throw fromApiException(err, `list bootstrap token secrets in ${tokenNamespace}`);
      }
    },
  };
}

/** Why a presented secret does not authenticate against a stored token Secret; undefined when it does. */
function refusalOf(presented: string, secret: V1Secret | undefined, now: Date): string | undefined {
  const stored = secret ? storedTokenOf(secret) : undefined;
  // Compare even when nothing is stored, so the comparison itself does not tell the two cases apart.
  const matches = constantTimeEqual(presented, stored?.secret ?? '');
  return !stored
    ? 'no such token'
    : !matches
      ? 'wrong secret'
      : stored.deleting
        ? 'being deleted'
        : isExpired(stored, now)
          ? 'expired'
          : !stored.usages.authentication
            ? 'not usable for authentication'
            : !stored.extraGroups.every((g) => extraGroupPattern.test(g))
              ? 'invalid extra groups'
              : undefined;
}

/**
 * Validates presented tokens as the apiserver's bootstrap authenticator does: the Secret exists and
 * is not being deleted, the secret matches (constant time), the token has not expired, it may be
 * used for authentication and its extra groups are valid. A malformed token is refused before any
 * lookup; one the source's current watch refuses costs no API read; every acceptance is decided on
 * the Secret as the API server has it now. A failed read throws (a dependency fault, not a refusal).
 */
export class TokenValidator implements BootstrapTokenValidator {
  readonly #source: TokenSecretSource;
  readonly #logger: Logger;

  constructor(source: TokenSecretSource, logger: Logger = silentLogger) {
    this.#source = source;
    this.#logger = logger;
  }

  async validate(token: string, now: Date): Promise<BootstrapTokenInfo | BootstrapTokenRejection> {
    const presented = parseToken(token);
    if (!presented) return { rejected: 'malformed token' };
    const view = this.#source.watched?.(presented.id);
    let reason = view ? refusalOf(presented.secret, view.secret, now) : undefined;
    let answeredBy = 'watch';
    let secret: V1Secret | undefined;
    if (!reason) {
      answeredBy = 'api';
      secret = await this.#source.get(presented.id);
      reason = refusalOf(presented.secret, secret, now);
    }
    const stored = secret ? storedTokenOf(secret) : undefined;
    if (reason || !stored) {
      this.#logger.debug({ tokenId: presented.id, reason, answeredBy }, 'bootstrap token rejected');
      return { rejected: `bootstrap token ${presented.id}: ${reason ?? 'no such token'}` };
    }
    return tokenInfoOf(stored);
  }
}

/** The earliest expiry after `now` among tokens, in ms since the epoch, or undefined. */
export function nextExpiry(tokens: readonly StoredToken[], now: Date): number | undefined {
  const future = tokens
    .map((t) => t.expires?.getTime())
    .filter((at): at is number => at !== undefined && !Number.isNaN(at) && at > now.getTime());
  return future.length === 0 ? undefined : Math.min(...future);
}

/**
 * Wakes a leader loop when token Secrets change. It subscribes before the loop's first read, so a
 * change that lands between a read and the wait that follows still ends that wait at once.
 */
class TokenChanges {
  #changed = false;
  #wake: (() => void) | undefined;
  readonly #unsubscribe: () => void;

  constructor(source: TokenSecretSource) {
    this.#unsubscribe =
      source.subscribe?.(() => {
        this.#changed = true;
        this.#wake?.();
      }) ?? (() => {});
  }

  /** Starts a pass: only changes from now on end the next wait early. */
  begin(): void {
    this.#changed = false;
  }

  /** Waits for a change since {@link TokenChanges.begin}, the time `untilMs` (epoch ms), `maxMs`, or `signal`. */
  async wait(clock: Clock, untilMs: number | undefined, maxMs: number, signal: AbortSignal): Promise<void> {
    if (this.#changed || signal.aborted) return;
    const delay = untilMs === undefined ? maxMs : Math.min(maxMs, Math.max(0, untilMs - clock.now()));
    await new Promise<void>((resolve) => {
      let cancel = () => {};
      const done = () => {
        cancel();
        signal.removeEventListener('abort', done);
        this.#wake = undefined;
        resolve();
      };
      this.#wake = done;
      signal.addEventListener('abort', done, { once: true });
      cancel = clock.setTimer(done, delay);
    });
  }

  /** Unsubscribes from the source. */
  close(): void {
    this.#unsubscribe();
  }
}

/**
 * How often the signer and the cleaner look again without a change notification. A source that
 * reports changes (a watch) needs only a backstop, every 10 minutes: its events and the tokens'
 * expiry times wake them at once, and the pass repairs a cluster-info someone else edited. A source
 * that cannot report changes is polled every minute.
 */
function tokenResyncMs(source: TokenSecretSource): number {
  return source.subscribe ? 10 * 60_000 : 60_000;
}

/**
 * A leader loop over the token Secrets: runs `pass` until `signal` aborts, waiting between passes for
 * a token change, the next expiry the pass reports, or `resyncMs` (default {@link tokenResyncMs}).
 * A pass that fails for a moment (the API server unavailable, throttling, a timeout, or a conflict: a
 * concurrent writer changed what the pass read) is retried with backoff (1 s doubling to 30 s, sooner
 * on a token change), logged at warn when it starts, then every ten minutes, and once when a pass
 * succeeds again, as the watches do: one API-server blip must not fail the component into an error
 * line. Any other failure ends the loop (the supervisor restarts it).
 */
export async function runOnTokenChanges(
  options: { source: TokenSecretSource; resyncMs?: number | undefined; logger?: Logger | undefined },
  clock: Clock,
  pass: () => Promise<{ nextExpiry: number | undefined }>,
  signal: AbortSignal,
): Promise<void> {
  const changes = new TokenChanges(options.source);
  const failures = new RecurringFailureLog(options.logger ?? silentLogger, {
    message: 'pass failed; retrying',
    recoveredMessage: 'pass succeeded again',
    now: () => clock.monotonic(),
  });
  const backoff = new Backoff({ initialMs: 1_000, maxMs: 30_000 });
  try {
    while (!signal.aborted) {
      changes.begin();
      let nextExpiry: number | undefined;
      try {
        ({ nextExpiry } = await pass());
      } catch (err) {
        const conflict = err instanceof KopsError && err.kind === 'conflict';
        if (signal.aborted || !(isTransientFailure(err) || conflict)) throw err;
        failures.failed(err);
        await changes.wait(clock, undefined, backoff.next(), signal);
        continue;
      }
      failures.succeeded();
      backoff.reset();
      const resyncMs = options.resyncMs ?? tokenResyncMs(options.source);
      await changes.wait(clock, nextExpiry, resyncMs, signal);
    }
  } finally {
    changes.close();
  }
}

/** Options of a {@link TokenCleaner}. */
export interface TokenCleanerOptions {
  core: CoreV1Api;
  /** The token Secrets; a source that can {@link TokenSecretSource.subscribe} wakes the cleaner on changes. */
  source: TokenSecretSource;
  /** How often to look again without a change notification; default {@link tokenResyncMs}. */
  resyncMs?: number;
  clock?: Clock;
  logger?: Logger;
}

/** Deletes expired token Secrets (leader only), each with a UID precondition so a re-created one survives. */
export class TokenCleaner implements LeaderComponent {
  readonly name = 'bootstrap-token-cleaner';
  readonly #options: TokenCleanerOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;

  constructor(options: TokenCleanerOptions) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#logger = (options.logger ?? silentLogger).child({ component: this.name });
  }

  /** Deletes every expired token now; returns the ids deleted and when the next token expires (epoch ms). */
  async sweep(): Promise<{ deleted: string[]; nextExpiry: number | undefined }> {
    const now = new Date(this.#clock.now());
    const deleted: string[] = [];
    const tokens = (await this.#options.source.list()).flatMap((s) => storedTokenOf(s) ?? []);
    for (const token of tokens) {
      if (token.deleting || !isExpired(token, now)) continue;
      try {
        await this.#options.core.deleteNamespacedSecret({
          name: tokenSecretPrefix + token.id,
          namespace: tokenNamespace,
          body: { preconditions: { uid: token.uid } },
        });
        deleted.push(token.id);
        this.#logger.info({ tokenId: token.id }, 'deleted expired bootstrap token');
      } catch (err) {
        const status = httpStatusOfApiError(err);
        // 404: already gone; 409: replaced by a new Secret of the same name, which is not ours to judge.
        if (status !== 404 && status !== 409) throw fromApiException(err, `delete expired token ${token.id}`);
      }
    }
    return { deleted, nextExpiry: nextExpiry(tokens, now) };
  }

  async start(signal: AbortSignal): Promise<void> {
    await runOnTokenChanges(
      { ...this.#options, logger: this.#logger },
      this.#clock,
      () => this.sweep(),
      signal,
    );
  }
}
