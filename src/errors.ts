/**
 * The project's typed errors. Code throws a {@link KopsError} of the kind that says what went wrong;
 * each edge maps the kind once: the HTTP servers to a status code and JSON reason, the CLI to one
 * readable line and an exit code, the controllers to "requeue with backoff" or "give up".
 */

/** What kind of failure an error is; decides the HTTP status, the exit code and whether to retry. */
export type ErrorKind =
  | 'invalid' // the input is wrong; retrying the same input fails again
  | 'config' // the configuration (file, flags, environment) is wrong
  | 'unauthenticated' // the caller could not be identified
  | 'forbidden' // the caller is known but not allowed
  | 'not-found'
  | 'conflict' // the object changed or already exists
  | 'gone' // a resource version or handle has expired
  | 'too-large'
  | 'rate-limited'
  | 'unavailable' // a dependency (apiserver, cloud, state store) failed; retry later
  | 'timeout'
  | 'internal'; // a bug

/**
 * Options every error takes: the underlying cause, and the typed facts the edges render — a reason
 * more specific than the kind, how long to wait, the status a client edge was answered.
 */
export interface KopsErrorOptions {
  cause?: unknown;
  /**
   * A machine-readable reason more specific than the kind (`dependency-unavailable`,
   * `ca-pin-mismatch`): the `reason` of the server's JSON error, and what callers branch on.
   */
  reason?: string;
  /** How long to wait before asking again: an answer's Retry-After, or what the server asks of its client. */
  retryAfterSeconds?: number;
  /** The HTTP status a client was answered, where this error was made from an answer. */
  upstreamStatus?: number;
  /** Extra structured facts, safe to show to the caller (never secrets), that no edge renders. */
  details?: Record<string, unknown>;
}

/** The HTTP status a server answers each kind with. */
const httpStatusByKind: Record<ErrorKind, number> = {
  invalid: 400,
  config: 500,
  unauthenticated: 401,
  forbidden: 403,
  'not-found': 404,
  conflict: 409,
  gone: 410,
  'too-large': 413,
  'rate-limited': 429,
  unavailable: 503,
  timeout: 504,
  internal: 500,
};

const stringOr = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);
const numberOr = (value: unknown): number | undefined =>
  typeof value === 'number' && Number.isFinite(value) ? value : undefined;

/** Base of every error the project throws on purpose. */
export class KopsError extends Error {
  readonly kind: ErrorKind;
  /** The `reason` option: the specific reason, when there is one more specific than the kind. */
  readonly reasonCode: string | undefined;
  readonly retryAfterSeconds: number | undefined;
  readonly upstreamStatus: number | undefined;
  readonly details: Record<string, unknown> | undefined;

  constructor(kind: ErrorKind, message: string, options: KopsErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.kind = kind;
    // A fact written into `details` (as the cloud clients' error mappers write `status` and `reason`)
    // is read as the typed one, and a typed one is copied into `details` for the code that reads it
    // there (the retry loops of agent/retry.ts and cloud/retry.ts): one error, however made or read.
    const { details } = options;
    this.reasonCode = options.reason ?? stringOr(details?.['reason']);
    this.retryAfterSeconds = options.retryAfterSeconds ?? numberOr(details?.['retryAfterSeconds']);
    this.upstreamStatus =
      options.upstreamStatus ?? numberOr(details?.['status']) ?? numberOr(details?.['httpStatus']);
    this.details = withTypedFacts(details, options);
  }

  /** The HTTP status a server answers this error with: its kind's, unless a subclass is more precise. */
  get httpStatus(): number {
    return httpStatusByKind[this.kind];
  }
}

/** `details` with the typed facts given as options added, for the code that reads them there. */
function withTypedFacts(
  details: Record<string, unknown> | undefined,
  options: KopsErrorOptions,
): Record<string, unknown> | undefined {
  const typed: Record<string, unknown> = {};
  if (options.reason !== undefined) typed['reason'] = options.reason;
  if (options.retryAfterSeconds !== undefined) typed['retryAfterSeconds'] = options.retryAfterSeconds;
  if (options.upstreamStatus !== undefined) typed['httpStatus'] = options.upstreamStatus;
  if (Object.keys(typed).length === 0) return details;
  return { ...details, ...typed };
}

export class InvalidInputError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('invalid', message, options);
  }
}

export class ConfigError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('config', message, options);
  }
}

export class UnauthenticatedError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('unauthenticated', message, options);
  }
}

export class ForbiddenError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('forbidden', message, options);
  }
}

export class NotFoundError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('not-found', message, options);
  }
}

export class ConflictError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('conflict', message, options);
  }
}

export class GoneError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('gone', message, options);
  }
}

export class TooLargeError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('too-large', message, options);
  }
}

export class RateLimitedError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('rate-limited', message, options);
  }
}

export class UnavailableError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('unavailable', message, options);
  }
}

export class TimeoutError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('timeout', message, options);
  }
}

export class InternalError extends KopsError {
  constructor(message: string, options?: KopsErrorOptions) {
    super('internal', message, options);
  }
}

/** A request with a method the endpoint does not serve: 405, with the methods it does in `Allow`. */
export class MethodNotAllowedError extends InvalidInputError {
  readonly allow: string;

  constructor(allow: string) {
    super(`method not allowed here; use ${allow}`, { reason: 'method-not-allowed' });
    this.allow = allow;
  }

  override get httpStatus(): number {
    return 405;
  }
}

/** A request body of a type the endpoint does not read: 415. */
export class UnsupportedMediaTypeError extends InvalidInputError {
  constructor(message: string) {
    super(message, { reason: 'unsupported-media-type' });
  }

  override get httpStatus(): number {
    return 415;
  }
}

const errorClassByKind: Record<ErrorKind, new (message: string, options?: KopsErrorOptions) => KopsError> = {
  invalid: InvalidInputError,
  config: ConfigError,
  unauthenticated: UnauthenticatedError,
  forbidden: ForbiddenError,
  'not-found': NotFoundError,
  conflict: ConflictError,
  gone: GoneError,
  'too-large': TooLargeError,
  'rate-limited': RateLimitedError,
  unavailable: UnavailableError,
  timeout: TimeoutError,
  internal: InternalError,
};

/** Statuses that mean "not now" rather than "no": a dependency fault, worth asking again later. */
export function isFaultStatus(status: number): boolean {
  return status === 408 || status === 429 || (status >= 500 && status <= 599);
}

/** The kinds that HTTP statuses name, as a client reads them (the other faults are `unavailable`). */
const kindByHttpStatus: Partial<Record<number, ErrorKind>> = {
  400: 'invalid',
  401: 'unauthenticated',
  403: 'forbidden',
  404: 'not-found',
  409: 'conflict',
  410: 'gone',
  422: 'invalid',
  413: 'too-large',
  429: 'rate-limited',
};

/**
 * The typed error for an HTTP status a client was answered, at a client edge: the statuses above
 * name their kind, the other faults (408, 5xx) are `unavailable`, and any other status (3xx,
 * 405, 415, ...) is `otherwise`, which each client decides: for the node an answer it did not expect
 * is final, for a controller the API server answering oddly is a fault to retry.
 */
export function errorForHttpStatus(
  status: number,
  message: string,
  options: KopsErrorOptions,
  otherwise: ErrorKind,
): KopsError {
  const kind = kindByHttpStatus[status] ?? (isFaultStatus(status) ? 'unavailable' : otherwise);
  return new errorClassByKind[kind](message, options);
}

/** Exit codes follow sysexits(3) where one fits, so scripts can tell input errors from outages. */
export const exitCodeByKind: Readonly<Record<ErrorKind, number>> = {
  invalid: 65, // EX_DATAERR
  config: 78, // EX_CONFIG
  unauthenticated: 77, // EX_NOPERM
  forbidden: 77,
  'not-found': 66, // EX_NOINPUT
  conflict: 75, // EX_TEMPFAIL
  gone: 75,
  'too-large': 65,
  'rate-limited': 75,
  unavailable: 69, // EX_UNAVAILABLE
  timeout: 75,
  internal: 70, // EX_SOFTWARE
};

/** Converts anything thrown into a KopsError; unknown errors become `internal`. */
export function asKopsError(err: unknown): KopsError {
  if (err instanceof KopsError) return err;
  if (err instanceof Error) return new InternalError(err.message, { cause: err });
  return new InternalError(String(err));
}

/** The HTTP status for an error at a server edge. */
export function httpStatusOf(err: unknown): number {
  return asKopsError(err).httpStatus;
}

/** The process exit code for an error at the CLI edge. */
export function exitCodeOf(err: unknown): number {
  return exitCodeByKind[asKopsError(err).kind];
}

/** Whether an operation that failed with this error may succeed if tried again later. */
export function isRetryable(err: unknown): boolean {
  const kind = asKopsError(err).kind;
  return (
    kind === 'conflict' ||
    kind === 'rate-limited' ||
    kind === 'unavailable' ||
    kind === 'timeout' ||
    kind === 'gone'
  );
}

/** Why a file-system call failed, in words ("no such file"), for a message that names the file. */
export function fileErrorReason(err: unknown): string {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  switch (code) {
    case 'ENOENT':
      return 'no such file';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'EISDIR':
      return 'is a directory';
    case 'ENOTDIR':
      return 'a parent is not a directory';
    default:
      return code ?? (err instanceof Error ? err.message : String(err));
  }
}

/**
 * Whether an error is a generated API client's answer exception (client-node's `ApiException`: a
 * numeric `code`, the raw `body` and the `headers`), whose message is the whole answer, dates and
 * audit ids included. Wrapped by a typed error, it adds nothing the wrapper's message (status and
 * the server's own message) does not say, and would make every line of the same failure differ.
 */
function isAnswerException(err: unknown): boolean {
  return (
    err instanceof Error &&
    typeof (err as { code?: unknown }).code === 'number' &&
    'body' in err &&
    'headers' in err
  );
}

/** A one-line description of an error, its causes joined, for logs and the CLI. */
export function describeError(err: unknown): string {
  const parts: string[] = [];
  let current: unknown = err;
  for (let depth = 0; current !== undefined && depth < 5; depth++) {
    if (depth > 0 && isAnswerException(current)) break;
    let message = current instanceof Error ? current.message : String(current);
    // Alone, its status, message and body say it; its headers (a date, an audit id) differ each time.
    if (isAnswerException(current)) message = message.replace(/\nHeaders: [\s\S]*$/, '');
    if (message && !parts.some((p) => p.includes(message))) parts.push(message);
    current = current instanceof Error ? current.cause : undefined;
  }
  return parts.join(': ').replace(/\s*\n\s*/g, ' ');
}
