/**
 * The API's error vocabulary: every failure the simulator answers is a typed error from src/errors.ts
 * carrying the exact `Status` object a real kube-apiserver would send, so clients see the same code,
 * reason, message and details.
 */
import {
  ConflictError,
  ForbiddenError,
  GoneError,
  InternalError,
  InvalidInputError,
  type KopsError,
  NotFoundError,
  RateLimitedError,
  TooLargeError,
  UnauthenticatedError,
  UnavailableError,
} from '../../errors.ts';
import type { ResourceType } from './resources.ts';

/** The details block of a Status. */
export interface StatusDetails {
  name?: string;
  group?: string;
  kind?: string;
  uid?: string;
  causes?: { reason: string; message: string; field: string }[];
  retryAfterSeconds?: number;
}

/** A `meta.k8s.io/v1` Status object. */
export interface Status {
  kind: 'Status';
  apiVersion: 'v1';
  metadata: Record<string, never>;
  status: 'Failure' | 'Success';
  message?: string;
  reason?: string;
  details?: StatusDetails;
  /** Absent on the success Status a delete returns. */
  code?: number;
}

function failure(code: number, reason: string, message: string, details?: StatusDetails): Status {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason,
    ...(details ? { details } : {}),
    code,
  };
}

/** The Status an error carries, or a generic one derived from its kind. */
export function statusOf(err: KopsError): Status {
  const carried = err.details?.['status'] as Status | undefined;
  if (carried) return carried;
  const byKind: Record<string, [number, string]> = {
    invalid: [400, 'BadRequest'],
    unauthenticated: [401, 'Unauthorized'],
    forbidden: [403, 'Forbidden'],
    'not-found': [404, 'NotFound'],
    conflict: [409, 'Conflict'],
    gone: [410, 'Expired'],
    'too-large': [413, 'RequestEntityTooLarge'],
    'rate-limited': [429, 'TooManyRequests'],
    unavailable: [503, 'ServiceUnavailable'],
    timeout: [504, 'Timeout'],
  };
  const [code, reason] = byKind[err.kind] ?? [500, 'InternalError'];
  return failure(code, reason, err.message);
}

function withStatus<E extends KopsError>(
  make: (message: string, opts: { details: { status: Status } }) => E,
  status: Status,
): E {
  return make(status.message ?? '', { details: { status } });
}

/** `nodes` or `leases.coordination.k8s.io`, as messages name a resource. */
export function qualifiedResource(type: ResourceType): string {
  return type.group ? `${type.plural}.${type.group}` : type.plural;
}

function resourceDetails(type: ResourceType, name: string): StatusDetails {
  return type.group ? { name, group: type.group, kind: type.plural } : { name, kind: type.plural };
}

/** 404 for a missing object. */
export function notFound(type: ResourceType, name: string): NotFoundError {
  return withStatus(
    (m, o) => new NotFoundError(m, o),
    failure(404, 'NotFound', `${qualifiedResource(type)} "${name}" not found`, resourceDetails(type, name)),
  );
}

/** 404 for a URL that names no resource the server knows. */
export function unknownPath(): NotFoundError {
  return withStatus(
    (m, o) => new NotFoundError(m, o),
    failure(404, 'NotFound', 'the server could not find the requested resource', {}),
  );
}

/** 409 for a create whose name is taken. */
export function alreadyExists(type: ResourceType, name: string): ConflictError {
  return withStatus(
    (m, o) => new ConflictError(m, o),
    failure(
      409,
      'AlreadyExists',
      `${qualifiedResource(type)} "${name}" already exists`,
      resourceDetails(type, name),
    ),
  );
}

/** 409 for an update against a stale resourceVersion (or another precondition). */
export function conflict(type: ResourceType, name: string, why: string): ConflictError {
  return withStatus(
    (m, o) => new ConflictError(m, o),
    failure(
      409,
      'Conflict',
      `Operation cannot be fulfilled on ${qualifiedResource(type)} "${name}": ${why}`,
      resourceDetails(type, name),
    ),
  );
}

/** The message a stale resourceVersion gets. */
export const staleObjectMessage =
  'the object has been modified; please apply your changes to the latest version and try again';

/** One field problem, as Kubernetes validation reports it. */
export interface FieldError {
  type: 'Invalid' | 'Required' | 'Forbidden' | 'Duplicate' | 'NotSupported' | 'TooLong';
  field: string;
  value?: unknown;
  detail?: string;
}

const fieldErrorText: Record<FieldError['type'], [string, string]> = {
  Invalid: ['Invalid value', 'FieldValueInvalid'],
  Required: ['Required value', 'FieldValueRequired'],
  Forbidden: ['Forbidden', 'FieldValueForbidden'],
  Duplicate: ['Duplicate value', 'FieldValueDuplicate'],
  NotSupported: ['Unsupported value', 'FieldValueNotSupported'],
  TooLong: ['Too long', 'FieldValueTooLong'],
};

function formatValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return JSON.stringify(value) ?? 'null';
}

/** The body of a field error without its path, as in `Invalid value: "x": must be ...`. */
export function fieldErrorBody(e: FieldError): string {
  const [label] = fieldErrorText[e.type];
  let body =
    e.type === 'Required' || e.type === 'Forbidden' || e.type === 'TooLong'
      ? label
      : `${label}: ${formatValue(e.value)}`;
  if (e.detail) body += `: ${e.detail}`;
  return body;
}

/** 422 Invalid, listing every field problem the way the API does. */
export function invalid(type: ResourceType, name: string, errors: FieldError[]): InvalidInputError {
  const texts = errors.map((e) => `${e.field}: ${fieldErrorBody(e)}`);
  const joined = texts.length === 1 ? texts[0] : `[${texts.join(', ')}]`;
  const kind = type.group ? `${type.kind}.${type.group}` : type.kind;
  const details: StatusDetails = { name, ...(type.group ? { group: type.group } : {}), kind: type.kind };
  details.causes = errors.map((e) => ({
    reason: fieldErrorText[e.type][1],
    message: fieldErrorBody(e),
    field: e.field,
  }));
  return withStatus(
    (m, o) => new InvalidInputError(m, o),
    failure(422, 'Invalid', `${kind} "${name}" is invalid: ${joined}`, details),
  );
}

/** 400 BadRequest. */
export function badRequest(message: string): InvalidInputError {
  return withStatus((m, o) => new InvalidInputError(m, o), failure(400, 'BadRequest', message));
}

/** 401 for a caller with no valid credentials. */
export function unauthorized(): UnauthenticatedError {
  return withStatus((m, o) => new UnauthenticatedError(m, o), failure(401, 'Unauthorized', 'Unauthorized'));
}

/** 403 with the authorizer's sentence. */
export function forbidden(message: string, type?: ResourceType, name?: string): ForbiddenError {
  const details = type ? resourceDetails(type, name ?? '') : {};
  if (!name) delete details.name;
  return withStatus((m, o) => new ForbiddenError(m, o), failure(403, 'Forbidden', message, details));
}

/** 405 for a verb the resource does not serve. */
export function methodNotAllowed(): InvalidInputError {
  return withStatus(
    (m, o) => new InvalidInputError(m, o),
    failure(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource', {}),
  );
}

/** 410 Expired, for a resourceVersion or continue token older than the history kept. */
export function expired(message: string): GoneError {
  return withStatus((m, o) => new GoneError(m, o), failure(410, 'Expired', message));
}

/** 413 for a body over the limit. */
export function tooLarge(limit: number): TooLargeError {
  return withStatus(
    (m, o) => new TooLargeError(m, o),
    failure(413, 'RequestEntityTooLarge', `Request entity too large: limit is ${limit}`),
  );
}

/** 415 for a body in a format the endpoint does not accept. */
export function unsupportedMediaType(contentType: string, accepted: string[]): InvalidInputError {
  return withStatus(
    (m, o) => new InvalidInputError(m, o),
    failure(
      415,
      'UnsupportedMediaType',
      `the body of the request was in an unknown format - accepted media types include: ${accepted.join(', ')}` +
        (contentType ? '' : ' (no Content-Type was sent)'),
    ),
  );
}

/** The injected failures: 500, 503 or 429 with a Retry-After. */
export function injectedFailure(code: 500 | 503 | 429, retryAfterSeconds: number): KopsError {
  if (code === 429) {
    return withStatus(
      (m, o) => new RateLimitedError(m, o),
      failure(429, 'TooManyRequests', 'Too many requests, please try again later.', { retryAfterSeconds }),
    );
  }
  if (code === 503) {
    return withStatus(
      (m, o) => new UnavailableError(m, o),
      failure(
        503,
        'ServiceUnavailable',
        'the server is currently unable to handle the request (injected fault)',
        { retryAfterSeconds },
      ),
    );
  }
  return withStatus(
    (m, o) => new InternalError(m, o),
    failure(500, 'InternalError', 'Internal error occurred: injected fault', {
      causes: [{ reason: 'UnexpectedServerResponse', message: 'injected fault', field: '' }],
    }),
  );
}

/** A success Status, as a delete of a resource without graceful deletion returns. */
export function success(type: ResourceType, name: string, uid: string): Status {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Success',
    details: { ...resourceDetails(type, name), uid },
  };
}
