/**
 * The two short-lived certificates of the callback challenge: the node server's self-signed one
 * (`challenge-server.<cluster>`, kops: valid from 15 minutes ago for one hour, sent in the request
 * as the only certificate the controller may accept) and the controller's client certificate from
 * the cluster CA (`kops-controller.<cluster>`, valid from 48 hours ago until an hour from now, as
 * kops issues it), the only caller a node answers.
 */
import type { KeyObject } from 'node:crypto';
import type { CertificateAuthority } from '../pki/ca.ts';
import { unsignedInteger } from '../pki/der.ts';
import { describeSpki, generateKey, privateKeyPem, signatureSchemeFor, spkiOf } from '../pki/keys.ts';
import { encodePem } from '../pki/pem.ts';
import {
  basicConstraintsExtension,
  encodeName,
  extKeyUsageExtension,
  keyUsageExtension,
  signCertificate,
  subjectAltNameExtension,
  subjectKeyIdentifierExtension,
} from '../pki/x509.ts';
import { pooledRandomBytes } from '../random.ts';
import { challengeClientName, challengeServerName } from './challenge.ts';

/** A certificate with its private key, both PEM, and when it stops being valid. */
export interface ChallengeCredential {
  certificatePem: string;
  keyPem: string;
  notAfter: Date;
}

const hourMs = 3_600_000;

/**
 * A certificate of the challenge is replaced when less than this remains of it: more than a callback
 * takes, so neither side ever presents one that expires during the exchange.
 */
const challengeRenewBeforeMs = 15 * 60_000;

/** When a challenge certificate was made, on the wall clock and on the monotonic clock. */
export interface MadeAt {
  wallMs: number;
  monotonicMs: number;
}

/**
 * Whether a challenge certificate made at `made`, valid until `notAfter`, is to be replaced `now`:
 * when less than {@link challengeRenewBeforeMs} of it remains by the wall clock; when it has been held
 * that long short of what it had left by the monotonic clock (a wall clock stepped back does not
 * stretch it); or when the wall clock went back since it was made (it was dated by a clock running
 * ahead, so the other side may find it not valid yet).
 */
export function challengeCertificateDue(made: MadeAt, notAfter: Date, now: MadeAt): boolean {
  const validFor = notAfter.getTime() - made.wallMs;
  return (
    notAfter.getTime() - now.wallMs < challengeRenewBeforeMs ||
    now.monotonicMs - made.monotonicMs >= validFor - challengeRenewBeforeMs ||
    now.wallMs < made.wallMs
  );
}

/** A positive 128-bit serial. */
function randomSerial(): Buffer {
  const bytes = pooledRandomBytes(16);
  bytes[0] = (bytes[0] as number) & 0x7f;
  return unsignedInteger(bytes);
}

function credential(der: Buffer, key: KeyObject, notAfter: Date): ChallengeCredential {
  return { certificatePem: encodePem('CERTIFICATE', der), keyPem: privateKeyPem(key), notAfter };
}

/** The node server's self-signed certificate for `clusterName`, with a fresh key. */
export function challengeServerCertificate(clusterName: string, now = new Date()): ChallengeCredential {
  const key = generateKey('ecdsa-p256');
  const spki = spkiOf(key);
  const name = challengeServerName(clusterName);
  const subject = encodeName({ commonName: name, organizations: [] });
  // Backdated as kops does, so that a controller whose clock is a little ahead accepts it.
  const notBefore = new Date(now.getTime() - 15 * 60_000);
  const notAfter = new Date(notBefore.getTime() + hourMs);
  const der = signCertificate(
    {
      serial: randomSerial(),
      issuer: subject,
      subject,
      notBefore,
      notAfter,
      spki,
      extensions: [
        keyUsageExtension(['digitalSignature', 'keyEncipherment']),
        extKeyUsageExtension(['serverAuth']),
        basicConstraintsExtension(false),
        subjectKeyIdentifierExtension(describeSpki(spki).keyIdentifier),
        subjectAltNameExtension({ dnsNames: [name], ipAddresses: [] }),
      ],
    },
    signatureSchemeFor(key),
    key,
  );
  return credential(der, key, notAfter);
}

/**
 * How far the controller's client certificate is backdated: kops issues it through `pki.IssueCert`,
 * whose `signNewCertificate` starts every certificate 48 hours in the past. The node checks it on its
 * own clock, so a smaller backdate would turn a node whose clock is behind into a node that never
 * answers (the controller sees only the connection fail).
 */
const challengeClientBackdateMs = 48 * hourMs;

/** The controller's client certificate is valid until this long after it is made. */
const challengeClientLifetimeMs = hourMs;

/** The controller's client certificate for `clusterName`, signed by `ca`, valid until an hour from `now`. */
export function challengeClientCertificate(
  ca: CertificateAuthority,
  clusterName: string,
  now = new Date(),
): ChallengeCredential {
  const key = generateKey('ecdsa-p256');
  const spki = spkiOf(key);
  const notBefore = new Date(now.getTime() - challengeClientBackdateMs);
  const notAfter = new Date(now.getTime() + challengeClientLifetimeMs);
  const der = signCertificate(
    {
      serial: randomSerial(),
      issuer: ca.signer.certificate.parsed.subjectDer,
      subject: encodeName({ commonName: challengeClientName(clusterName), organizations: [] }),
      notBefore,
      notAfter,
      spki,
      extensions: [
        keyUsageExtension(['digitalSignature']),
        extKeyUsageExtension(['clientAuth']),
        basicConstraintsExtension(false),
        ca.signer.authorityKeyIdentifier,
      ],
    },
    ca.signer.scheme,
    ca.signer.key,
  );
  return credential(der, key, notAfter);
}
