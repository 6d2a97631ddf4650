/**
 * `join --renew`: a node that already joined renews its certificates before they expire, proving
 * who it is with its current kubelet client certificate and key (src/protocol/renewal-proof.ts)
 * instead of a cloud proof or token. The rest is an ordinary join: new keys made here, the answer
 * checked, the files replaced atomically.
 */

import { type KeyObject, sign, X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { ConfigError, UnauthenticatedError } from '../errors.ts';
import { parsePrivateKeyPem, spkiOf } from '../pki/keys.ts';
import {
  bodyDigest,
  encodeRenewalToken,
  renewalAudience,
  renewalScheme,
  renewalSignedText,
} from '../protocol/renewal-proof.ts';
import { nodeFilePath } from './node-files.ts';
import type { ProofProvider } from './proofs.ts';

/** The credentials a renewal is proven with. */
export interface CurrentCredentials {
  nodeName: string;
  certificate: X509Certificate;
  key: KeyObject;
}

/**
 * Reads the kubelet client certificate and key `join` wrote into `dir`, checking they belong together
 * (a ConfigError otherwise) and that the certificate has not expired (an UnauthenticatedError).
 */
export async function readCurrentCredentials(dir: string, now = new Date()): Promise<CurrentCredentials> {
  const certificatePath = nodeFilePath(dir, 'clientCertificate');
  const keyPath = nodeFilePath(dir, 'clientKey');
  let certificate: X509Certificate;
  let key: KeyObject;
  try {
    certificate = new X509Certificate(await readFile(certificatePath));
    key = parsePrivateKeyPem(await readFile(keyPath, 'utf8'), keyPath);
  } catch (err) {
    throw new ConfigError(
      `cannot read the current kubelet credentials in ${dir} (${(err as Error).message}); renew needs the --dir of the first join`,
      { cause: err },
    );
  }
  if (!certificate.publicKey.export({ format: 'der', type: 'spki' }).equals(spkiOf(key))) {
    throw new ConfigError(`${certificatePath} is not the certificate of ${keyPath}`);
  }
  // Refused as the server would refuse it (exit 77): the credential no longer proves who the node is.
  // Judged on this machine's clock, which may be the one that is wrong (stepped ahead, or not set
  // since boot): the line names it and its time, so that an operator sets the clock rather than
  // rejoining a node whose certificate is still good.
  if (certificate.validToDate <= now) {
    throw new UnauthenticatedError(
      `${certificatePath} expired on ${certificate.validToDate.toISOString()} by this machine's clock (now ${now.toISOString()}; if that is wrong, set the clock and renew): an expired node cannot renew; join it again with a cloud proof or token`,
    );
  }
  const commonName = /^CN=system:node:(.+)$/m.exec(certificate.subject)?.[1];
  if (!commonName) throw new ConfigError(`${certificatePath} is not a node's client certificate`);
  return { nodeName: commonName, certificate, key };
}

/** The renewal proof for each attempt's body, signed with the current key at the time of the attempt. */
export function renewalProof(
  current: CurrentCredentials,
  clusterName: string,
  now: () => Date = () => new Date(),
): ProofProvider {
  return async (body) => {
    const fields = {
      audience: renewalAudience(clusterName),
      timestamp: now().toISOString(),
      bodySha256: bodyDigest(body),
    };
    const signature = sign('sha256', renewalSignedText(fields), current.key);
    return `${renewalScheme} ${encodeRenewalToken({ ...fields, certificate: current.certificate.raw, signature })}`;
  };
}
