/**
 * `Retry-After` as sent by any HTTP server we call (the API server, the bootstrap server, a proxy):
 * delta-seconds or an HTTP date (RFC 9110 §10.2.3). One parser, so every client waits alike.
 */

/**
 * Retry-After in whole seconds from now; undefined when absent, malformed, already past, or more
 * digits than a safe integer holds (Number rounds them, or makes them Infinity).
 */
export function retryAfterSeconds(header: string | undefined, now = Date.now()): number | undefined {
  const value = header?.trim();
  if (!value) return undefined;
  if (/^\d+$/.test(value)) {
    const seconds = Number(value);
    return seconds > 0 && Number.isSafeInteger(seconds) ? seconds : undefined;
  }
  const at = Date.parse(value);
  if (Number.isNaN(at) || at <= now) return undefined;
  return Math.ceil((at - now) / 1000);
}
