/**
 * Whether this process runs with an OpenSSL configuration. Session tickets can only be turned off
 * for the whole process (deploy/openssl.cnf, passed with `node --openssl-config`), never per server,
 * so the servers say so at start when the process has no configuration at all.
 */

import type { Logger } from '../log.ts';

/** The start-up warning for a process without an OpenSSL configuration; undefined when it has one. */
export function sessionTicketsWarning(
  execArgv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): string | undefined {
  const flag = (arg: string) => arg === '--openssl-config' || arg.startsWith('--openssl-config=');
  if (execArgv.some(flag)) return undefined;
  if ((env['NODE_OPTIONS'] ?? '').split(/\s+/).some(flag)) return undefined;
  // Node reads OPENSSL_CONF when no flag is given; whether that file turns tickets off is its business.
  if (env['OPENSSL_CONF']) return undefined;
  return 'TLS session tickets are on: start Node with --openssl-config=deploy/openssl.cnf, as the image does (docs/security.md#tls)';
}

/** Logs {@link sessionTicketsWarning} for this process, if it applies; for TLS servers at start. */
export function warnIfSessionTicketsOn(logger: Logger): void {
  const warning = sessionTicketsWarning(process.execArgv, process.env);
  if (warning) logger.warn(warning);
}
