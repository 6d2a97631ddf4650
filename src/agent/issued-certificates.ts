/**
 * What `join` checks in the certificates a bootstrap server answered, before it writes or relies on
 * any of them: every certificate it asked for is there, and each certifies the node's own key, names
 * `system:node:<name>` in `system:nodes` and no other group, is for its use (client or server
 * authentication), is valid now, and chains to a CA the node pinned. A server that passed TLS but
 * answers anything else is broken, compromised or has a wrong clock; writing what it sent would leave
 * a node that cannot register, and on a renewal it would replace working credentials with ones that
 * can never renew again. Each refusal is one line (UnauthenticatedError, exit 77).
 */
import { type KeyObject, X509Certificate } from 'node:crypto';
import { UnauthenticatedError } from '../errors.ts';
import { spkiOf } from '../pki/keys.ts';
import { decodePem } from '../pki/pem.ts';
import { clockOffsetNote } from './node-clock.ts';

/** What each profile `join` asks for is, as the messages say, and the extended key usage it needs. */
const profiles = {
  kubelet: { what: 'kubelet client', usage: 'client', oid: '1.3.6.1.5.5.7.3.2' },
  'kubelet-server': { what: 'kubelet serving', usage: 'server', oid: '1.3.6.1.5.5.7.3.1' },
} as const;

export type NodeProfile = keyof typeof profiles;

/** anyExtendedKeyUsage: Go's crypto/x509, which the API server and kubelet verify with, accepts it for any use. */
const anyExtendedKeyUsage = '2.5.29.37.0';

/**
 * How far ahead of this machine's clock a certificate may start: the server backdates what it issues
 * by 5 minutes, so a certificate that starts later than that comes from a clock that is well off.
 */
const clockSkewMs = 5 * 60_000;

function parse(pem: string, what: string): X509Certificate {
  try {
    return new X509Certificate(pem);
  } catch (err) {
    throw new UnauthenticatedError(`the ${what} certificate the server returned is unreadable`, {
      cause: err,
    });
  }
}

/** The CAs of a PEM bundle: the ones the node pinned. */
function certificatesOf(bundlePem: string): X509Certificate[] {
  return decodePem(bundlePem, 'CERTIFICATE', 'CA bundle').map((der) => new X509Certificate(der));
}

/** Checks one issued certificate of `profile` for `key` and `nodeName` (see the module comment). */
function checkIssued(
  pem: string,
  profile: NodeProfile,
  key: KeyObject,
  nodeName: string,
  cas: X509Certificate[],
  now: Date,
  clockNote: string | undefined,
): void {
  const { what, usage, oid } = profiles[profile];
  const certificate = parse(pem, what);
  const refuse = (problem: string) =>
    new UnauthenticatedError(`the ${what} certificate the server returned ${problem}`);
  if (!certificate.publicKey.export({ format: 'der', type: 'spki' }).equals(spkiOf(key))) {
    throw refuse('is for another key');
  }
  if (!cas.some((ca) => certificate.checkIssued(ca) && certificate.verify(ca.publicKey))) {
    throw refuse('is not signed by the cluster CA');
  }
  // No extended key usage means any, as Go reads it; a list must name this use.
  const usages = certificate.keyUsage as string[] | undefined;
  if (usages && !usages.includes(oid) && !usages.includes(anyExtendedKeyUsage)) {
    throw refuse(`is not for ${usage} authentication`);
  }
  // Another group (system:masters) on the node's name would give the kubelet powers no node has.
  // A serving certificate may also name just the node, as kops issues it.
  const subject = certificate.subject.split('\n');
  const groups = subject.filter((part) => part.startsWith('O='));
  const asNode = subject.includes(`CN=system:node:${nodeName}`) && groups.join() === 'O=system:nodes';
  const asKopsServer = usage === 'server' && subject.join() === `CN=${nodeName}`;
  if (!asNode && !asKopsServer) {
    throw new UnauthenticatedError(
      `the ${what} certificate names "${subject.join(', ')}", not system:node:${nodeName} in system:nodes` +
        (usage === 'server' ? ` nor ${nodeName}` : ''),
    );
  }
  // Dates are judged on this machine's clock, which may be the one that is off: say so, and how far
  // it is from the server's when its answer said (node-clock.ts).
  const byThisClock = `by this machine's clock (now ${now.toISOString()})`;
  const advice = clockNote ? `; ${clockNote}` : ': check the clocks of this machine and of the controller';
  if (certificate.validToDate <= now) {
    throw refuse(`expired on ${certificate.validToDate.toISOString()} ${byThisClock}${advice}`);
  }
  if (certificate.validFromDate.getTime() > now.getTime() + clockSkewMs) {
    throw refuse(`is not valid until ${certificate.validFromDate.toISOString()} ${byThisClock}${advice}`);
  }
}

/**
 * The certificates answered for the keys the node asked with (`keys`, by profile), each checked;
 * throws if one is missing or fails a check, so nothing is written unless all of them pass.
 * `serverClockOffsetMs` is how far the server's clock was ahead of this one as it answered, if known.
 */
export function checkIssuedCertificates(
  certificates: Record<string, string>,
  keys: Partial<Record<NodeProfile, KeyObject>>,
  nodeName: string,
  caBundlePem: string,
  now = new Date(),
  serverClockOffsetMs?: number,
): Partial<Record<NodeProfile, string>> {
  const clockNote = clockOffsetNote(serverClockOffsetMs);
  // Only the CA the node trusted for TLS may have signed them, not one the answer itself names.
  const cas = certificatesOf(caBundlePem);
  const checked: Partial<Record<NodeProfile, string>> = {};
  for (const [profile, key] of Object.entries(keys) as [NodeProfile, KeyObject][]) {
    const pem = certificates[profile];
    if (!pem) {
      throw new UnauthenticatedError(
        `the server answered "issued" without the ${profile} certificate it was asked for`,
      );
    }
    checkIssued(pem, profile, key, nodeName, cas, now, clockNote);
    checked[profile] = pem;
  }
  return checked;
}
