/**
 * Notices that the CAs the bootstrap server signs with and trusts are no longer what their store
 * holds — `pki rotate`, an old certificate removed from the bundle (docs/pki.md §7), a kops keyset
 * rotated or distrusted — and says so, so that the process restarts with them.
 *
 * Why a restart and not a swap in place: the CA loaded at start is held, each in its own form, by the
 * renewal policy (whom it trusts), the native and kops handlers and the queue signer (what they sign
 * with, and the bundle they hand to nodes), the CSR queue and its signer (a seal key derived from the
 * signer's key, which sealed requests already waiting in CSR objects), the callback challenger's
 * client certificate, a self-issued serving certificate, the ledger's record of what this replica
 * holds, and — with serving workers — by every worker process, which loaded the CA itself. A swap
 * that missed one of them would leave a replica half on the removed CA (still trusting it for
 * renewals, or still handing out its bundle); one that reached them all would have to change them at
 * one instant across processes. A new process reads the CA once, at start, into every holder at once:
 * so this process stops through its ordinary graceful shutdown (lease released, requests in flight
 * answered) and exits 75, and Kubernetes starts it again (src/cli/run.ts `runUntilStopped`).
 *
 * A CA that cannot be read or parsed (a rotation half written, a state store that fails) is not a
 * replacement: the loaded CA keeps serving, the failure is logged, and the next period reads again.
 * A changed CA is acted on only once two reads {@link caConfirmMs} apart agree on it, so that a read
 * landing between the files of one rotation (`pki rotate` writes the bundle, then the keypair ids,
 * then the key) does not restart the process onto a state about to change again.
 */
import { createHash } from 'node:crypto';
import { GoneError, type KopsError } from '../errors.ts';
import { type Logger, RecurringFailureLog } from '../log.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import { type Clock, systemClock } from '../runtime/clock.ts';
import { repeatOnClock, type SigningAuthorities, type SigningAuthoritiesSource } from './bootstrap-parts.ts';

/** How often the CAs are read again: as often as configured serving certificate files are. */
export const caPollMs = 60_000;
/** How long after a read that found other CAs a second read must find the same before it counts. */
export const caConfirmMs = 5_000;
/** The `reason` of the error a replaced CA ends the process with (exit code 75, `gone`). */
const caReplacedReason = 'ca-replaced';

/** Every CA of the set, the signing one first. */
function caList(authorities: SigningAuthorities): CertificateAuthority[] {
  return [authorities.ca, ...authorities.otherSigners];
}

/**
 * What decides how a set of CAs signs and whom it trusts: each CA's name, its signer's keypair id
 * (kops nodes ask for it by id) and every trusted certificate with its keypair id, in bundle order.
 * The signer's key is its certificate's, so the certificate stands for it. How the files are written
 * (line ends, text around the PEM blocks, YAML formatting) is not part of it: rewriting the same CA
 * restarts nothing.
 */
export function authoritiesDigest(authorities: SigningAuthorities): string {
  const summary = caList(authorities).map((ca) => [
    ca.name,
    ca.signer.certificate.keypairId,
    ca.certificates.map((c) => [c.keypairId, c.parsed.der.toString('base64')]),
  ]);
  return createHash('sha256').update(JSON.stringify(summary)).digest('hex');
}

/** `kubernetes-ca: signs with 77…, trusts 77…, 76…` for each CA of the set. */
function describeAuthorities(authorities: SigningAuthorities): string {
  return caList(authorities)
    .map(
      (ca) =>
        `${ca.name}: signs with ${ca.signer.certificate.keypairId}, trusts ${ca.certificates.map((c) => c.keypairId).join(', ')}`,
    )
    .join('; ');
}

/** The error a replaced CA ends the process with: `gone` (exit 75: run it again), naming both sets. */
function caReplacedError(location: string, loaded: SigningAuthorities, found: SigningAuthorities): KopsError {
  return new GoneError(
    `the CAs in ${location} are not the ones this process loaded (${describeAuthorities(loaded)}; now ` +
      `${describeAuthorities(found)}); it stops so that its restart signs with and trusts the new ones`,
    { reason: caReplacedReason },
  );
}

/** What {@link watchSigningAuthorities} compares, and whom it tells. */
export interface CaWatchOptions {
  /** The CAs the server loaded at start and holds. */
  loaded: SigningAuthorities;
  /** Where they were read from, read again every period. */
  source: SigningAuthoritiesSource;
  /** Called once, when the store holds other CAs, with the error the process is to exit with. */
  onReplaced: (err: KopsError) => void;
  clock?: Clock | undefined;
  logger: Logger;
}

/**
 * Reads the CAs again every {@link caPollMs} and calls `onReplaced` once, at most `caPollMs +
 * caConfirmMs` after the store holds other ones; then it stops reading. Returns what stops it.
 */
export function watchSigningAuthorities(options: CaWatchOptions): () => void {
  const { loaded, source, onReplaced, logger } = options;
  const loadedDigest = authoritiesDigest(loaded);
  const failures = new RecurringFailureLog(logger, {
    message: `cannot read the CAs in ${source.location}; still signing with and trusting the ones loaded at start`,
    recoveredMessage: `the CAs in ${source.location} can be read again`,
  });
  let stopped = false;
  /** The digest of other CAs found by the last read, waiting for a second read to agree. */
  let pending: string | undefined;
  const stopReading = repeatOnClock(
    options.clock ?? systemClock,
    async () => {
      let found: SigningAuthorities;
      try {
        found = await source.read();
      } catch (err) {
        // Half written, unparsable, or the store failing: never a reason to drop the loaded CA.
        failures.failed(err, { location: source.location });
        return caPollMs;
      }
      failures.succeeded();
      if (stopped) return undefined;
      const digest = authoritiesDigest(found);
      if (digest === loadedDigest) {
        pending = undefined;
        return caPollMs;
      }
      if (digest !== pending) {
        pending = digest;
        return caConfirmMs;
      }
      stopped = true;
      onReplaced(caReplacedError(source.location, loaded, found));
      return undefined;
    },
    caPollMs,
  );
  return () => {
    stopped = true;
    stopReading();
  };
}
