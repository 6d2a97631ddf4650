/**
 * Small HTTP pieces the bootstrap handlers share: answering with
 * JSON or with the error object of docs/bootstrap-api.md. Every error a handler throws becomes a 4xx
 * with a reason and one readable line; only real server faults become a 5xx.
 */
import type { ServerResponse } from 'node:http';
import { asKopsError, httpStatusOf } from '../errors.ts';

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

/**
 * Sends `{"error": {"reason", "message"}}` with the error's status. Internal errors show a generic
 * message (the detail goes to the log, never to the caller). A too-large body closes the connection,
 * so that the unread rest of it is not parsed as the next request.
 */
export function sendError(res: ServerResponse, err: unknown, headers: Record<string, string> = {}): void {
  const error = asKopsError(err);
  // An input error may name a more precise 4xx (405, 415) than its kind's 400.
  const precise = error.details?.['httpStatus'];
  const status = error.kind === 'invalid' && typeof precise === 'number' ? precise : httpStatusOf(error);
  const allow = error.details?.['allow'];
  if (typeof allow === 'string') headers = { ...headers, allow };
  const message = status >= 500 && error.kind !== 'unavailable' ? 'internal error' : error.message;
  sendJson(
    res,
    status,
    { error: { reason: reasonOf(error), message } },
    error.kind === 'too-large' ? { ...headers, connection: 'close' } : headers,
  );
}
