/**
 * Small HTTP pieces the bootstrap handlers share: answering with
 * JSON or with the error object of docs/bootstrap-api.md. Every error a handler throws becomes a 4xx
 * with a reason and one readable line; only real server faults become a 5xx. Every 503 carries
 * `Retry-After`, and a dependency fault also names the dependency.
 */
import type { ServerResponse } from 'node:http';
import { asKopsError, MethodNotAllowedError } from '../errors.ts';
import { defaultRetryAfterSeconds, isDependencyFault } from './dependency.ts';

/** The largest request body accepted: a request with two RSA-8192 CSRs is well below it. */
export const maxBodyBytes = 64 * 1024;

/** Sends a JSON answer. */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'cache-control': 'no-store',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

/** The machine-readable reason of an error: a specific one when the error carries it, else its kind. */
export function reasonOf(err: unknown): string {
  const error = asKopsError(err);
  return error.reasonCode ?? error.kind;
}

/** The seconds to put in `Retry-After` for an error: its own, else for a 503 a short spread wait. */
export function retryAfterOf(err: unknown): number | undefined {
  const { retryAfterSeconds, kind } = asKopsError(err);
  if (retryAfterSeconds !== undefined && retryAfterSeconds > 0) return Math.ceil(retryAfterSeconds);
  return kind === 'unavailable' ? defaultRetryAfterSeconds() : undefined;
}

/**
 * Sends `{"error": {"reason", "message"}}` with the error's status, plus `dependency` for a dependency
 * fault. Internal errors show a generic message (the detail goes to the log, never to the caller). A
 * 503, and any error that says how long to wait, carries `Retry-After` (unless the caller set it). A
 * too-large body closes the connection, so that the unread rest of it is not parsed as the next request.
 */
export function sendError(res: ServerResponse, err: unknown, headers: Record<string, string> = {}): void {
  const error = asKopsError(err);
  const status = error.httpStatus;
  const answerHeaders = { ...headers };
  if (error instanceof MethodNotAllowedError) answerHeaders['allow'] = error.allow;
  const retryAfter = retryAfterOf(error);
  if (retryAfter !== undefined && !('retry-after' in answerHeaders))
    answerHeaders['retry-after'] = String(retryAfter);
  if (error.kind === 'too-large') answerHeaders['connection'] = 'close';
  const message = status >= 500 && error.kind !== 'unavailable' ? 'internal error' : error.message;
  const body: { reason: string; message: string; dependency?: string } = { reason: reasonOf(error), message };
  if (isDependencyFault(error)) body.dependency = error.dependency;
  sendJson(res, status, { error: body }, answerHeaders);
}
