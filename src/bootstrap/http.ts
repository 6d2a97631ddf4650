/**
 * Small HTTP pieces the bootstrap handlers share: answering with
 * JSON or with the error object of docs/bootstrap-api.md. Every error a handler throws becomes a 4xx
 * with a reason and one readable line; only real server faults become a 5xx. Every 503 carries
 * `Retry-After`, and a dependency fault also names the dependency.
 */
import type { ServerResponse } from 'node:http';
import { asKopsError, httpStatusOf } from '../errors.ts';
import { defaultRetryAfterSeconds } from './dependency.ts';

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
  const specific = error.details?.['reason'];
  return typeof specific === 'string' ? specific : error.kind;
}

/** The seconds to put in `Retry-After` for an error: its own, else for a 503 a short spread wait. */
export function retryAfterOf(err: unknown): number | undefined {
  const error = asKopsError(err);
  const seconds = error.details?.['retryAfterSeconds'];
  if (typeof seconds === 'number' && seconds > 0) return Math.ceil(seconds);
  return error.kind === 'unavailable' ? defaultRetryAfterSeconds() : undefined;
}

/**
 * Sends `{"error": {"reason", "message"}}` with the error's status, plus `dependency` for a dependency
 * fault. Internal errors show a generic message (the detail goes to the log, never to the caller). A
 * 503, and any error that says how long to wait, carries `Retry-After` (unless the caller set it). A
 * too-large body closes the connection, so that the unread rest of it is not parsed as the next request.
 */
export function sendError(res: ServerResponse, err: unknown, headers: Record<string, string> = {}): void {
  const error = asKopsError(err);
  // An input error may name a more precise 4xx (405, 415) than its kind's 400.
  const precise = error.details?.['httpStatus'];
  const status = error.kind === 'invalid' && typeof precise === 'number' ? precise : httpStatusOf(error);
  const allow = error.details?.['allow'];
  if (typeof allow === 'string') headers = { ...headers, allow };
  const retryAfter = retryAfterOf(error);
  if (retryAfter !== undefined && !('retry-after' in headers))
    headers = { ...headers, 'retry-after': String(retryAfter) };
  const message = status >= 500 && error.kind !== 'unavailable' ? 'internal error' : error.message;
  const dependency = error.details?.['dependency'];
  sendJson(
    res,
    status,
    {
      error: { reason: reasonOf(error), message, ...(typeof dependency === 'string' ? { dependency } : {}) },
    },
    error.kind === 'too-large' ? { ...headers, connection: 'close' } : headers,
  );
}
