/**
 * The node's TLS check of the API server. A handshake that fails verification means the server is not
 * one the trusted CA vouches for: that will not fix itself, so it is final. Anything else (refused,
 * reset, no route, no answer) is a network fault worth another attempt. The API server the node will
 * be told to use is checked with a bare handshake before anything is written, so a kubeconfig never
 * names a server the pinned CA does not vouch for. A certificate that fails only its dates on this
 * machine's clock is the exception: that clock may not be set yet (node-clock.ts), so it is a fault.
 */
import { isIP } from 'node:net';
import { connect } from 'node:tls';
import { ForbiddenError, UnavailableError } from '../errors.ts';
import { isTlsVerificationFailure } from '../net/tls-verification.ts';
import { clockValidityFault } from './node-clock.ts';

/**
 * Completes a TLS handshake with the API server at `server`, verified against `caBundlePem` only
 * (never the system roots), host name or address included, then hangs up. Throws ForbiddenError
 * (`api-server-untrusted`) when the certificate does not verify, UnavailableError when the server
 * cannot be reached, does not finish the handshake within `timeoutMs`, or presents a certificate
 * outside its validity by this machine's clock (`certificate-validity`).
 */
export async function probeApiServer(server: string, caBundlePem: string, timeoutMs = 10_000): Promise<void> {
  const url = new URL(server);
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const failure = await new Promise<NodeJS.ErrnoException | undefined>((resolve) => {
    const socket = connect({
      host,
      port: Number(url.port || 443),
      ca: caBundlePem,
      rejectUnauthorized: true,
      // SNI carries names only; an address is checked against the certificate's IP SANs.
      ...(isIP(host) ? {} : { servername: host }),
      timeout: timeoutMs,
    });
    socket.once('secureConnect', () => {
      socket.end();
      resolve(undefined);
    });
    socket.once('timeout', () =>
      socket.destroy(
        new UnavailableError(
          `the API server ${server} did not complete a TLS handshake within ${timeoutMs} ms`,
        ),
      ),
    );
    socket.once('error', (err: NodeJS.ErrnoException) => {
      socket.destroy();
      resolve(err);
    });
  });
  if (!failure) return;
  if (failure instanceof UnavailableError) throw failure;
  if (!isTlsVerificationFailure(failure)) {
    throw new UnavailableError(`cannot reach the API server ${server}: ${failure.message}`, {
      cause: failure,
    });
  }
  // Out of its dates by this machine's clock, which chrony may step a moment later: a fault.
  const dated = await clockValidityFault(failure.code, {
    url,
    caBundlePem,
    peer: `the API server ${server}`,
    viaProxy: false,
    timeoutMs,
  });
  if (dated) throw dated;
  throw new ForbiddenError(
    `the API server ${server} did not present a certificate from a CA the node trusts (${failure.code}): ` +
      'the node could never trust it; check the API server URL the cluster publishes, or someone ' +
      'else is answering for it',
    // No cause: Node's own text suggests trusting the system CAs, the opposite of what is meant.
    { details: { reason: 'api-server-untrusted' } },
  );
}
