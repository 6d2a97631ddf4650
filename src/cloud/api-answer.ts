/**
 * The one rule every cloud client keeps for an API's refusals: a 4xx is a verdict on what was asked
 * (no such server, an id the API refuses) only in the API's own error body. The same status with any
 * other body is not the API answering (an endpoint that is not the API's, a proxy's page) and is a
 * fault, never a denial of a node. And an answer that cannot be right is a fault too
 * ({@link malformedAnswer}).
 */
import { UnavailableError } from '../errors.ts';

/** Whether a status, in the API's own error body, is a verdict on what was asked: a 4xx but 401, 403 (the controller's own credentials) and 429 (throttling). */
export function isVerdictStatus(status: number): boolean {
  return status >= 400 && status < 500 && status !== 401 && status !== 403 && status !== 429;
}

/** The error of an answer the cloud should never give: a dependency fault, never a verdict on a node. */
export function malformedAnswer(message: string): UnavailableError {
  return new UnavailableError(message, { details: { reason: 'malformed-answer' } });
}
