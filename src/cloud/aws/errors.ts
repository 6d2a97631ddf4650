/** Turns AWS SDK failures into the project's typed errors, saying what to do about each. */
import { ConfigError, KopsError, RateLimitedError, UnavailableError } from '../../errors.ts';

const throttlingCodes = new Set([
  'RequestLimitExceeded',
  'Throttling',
  'ThrottlingException',
  'TooManyRequestsException',
  'RequestThrottled',
  'RequestThrottledException',
]);
const permissionCodes = new Set(['UnauthorizedOperation', 'AccessDenied', 'AccessDeniedException']);
const credentialCodes = new Set([
  'AuthFailure',
  'InvalidClientTokenId',
  'SignatureDoesNotMatch',
  'ExpiredToken',
]);

/** The AWS error code of an SDK error (the SDK puts it in `name`). */
export function awsErrorCode(err: unknown): string | undefined {
  return err instanceof Error ? err.name : undefined;
}

/**
 * Whether an SDK error is AWS refusing for rate: a throttling code (EC2 answers RequestLimitExceeded
 * with HTTP 503) or HTTP 429, as the SDK's own retry strategy decides.
 */
export function isAwsThrottling(err: unknown): boolean {
  const status = (err as { $metadata?: { httpStatusCode?: number } } | undefined)?.$metadata?.httpStatusCode;
  return throttlingCodes.has(awsErrorCode(err) ?? '') || status === 429;
}

/** A typed error for a failed AWS call; `permission` names the IAM action the call needs. */
export function awsCallError(err: unknown, operation: string, permission: string): KopsError {
  // Ours already (an answer found broken while paging, see groups.ts): typed where it was found.
  if (err instanceof KopsError) return err;
  const code = awsErrorCode(err) ?? 'Error';
  const message = err instanceof Error ? err.message : String(err);
  if (throttlingCodes.has(code)) {
    return new RateLimitedError(
      `AWS throttled ${operation} (${code}) even after retries; it will be retried`,
      {
        cause: err,
      },
    );
  }
  if (permissionCodes.has(code)) {
    return new ConfigError(
      `the controller may not call ${operation} (${code}): grant ${permission} to its IAM role (see docs/clouds.md)`,
      { cause: err },
    );
  }
  if (credentialCodes.has(code)) {
    return new ConfigError(
      `AWS rejected the controller's credentials for ${operation} (${code}: ${message})`,
      {
        cause: err,
      },
    );
  }
  return new UnavailableError(`${operation} failed (${code}: ${message}); it will be retried`, {
    cause: err,
  });
}
