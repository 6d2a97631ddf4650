/**
 * `join --renew`: a node that already joined renews its certificates before they expire, proving
 * who it is with its current kubelet client certificate and key (src/protocol/renewal-proof.ts)
 * instead of a cloud proof or token. The rest is an ordinary join: new keys made here, the answer
 * checked, the files replaced atomically.
 */

import { type KeyObject, sign, X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError, UnauthenticatedError } from '../errors.ts';
import { parsePrivateKeyPem, spkiOf } from '../pki/keys.ts';
import { decodePemBlocks, encodePem } from '../pki/pem.ts';
import { parseCertificate } from '../pki/x509.ts';
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
 * The pair the kubelet rotated itself, when `dir` is its --cert-dir: `kubelet-client-current.pem`, a
 * link to one PEM file with the certificate (then any intermediates) and the key, in any order, as Go's
 * tls.X509KeyPair reads it (k8s.io/client-go/util/certificate/certificate_store.go). The kubelet's
 * store looks there first; a link whose file is gone counts as absent (it checks with stat), one it
 * cannot read as a pair stops it, and here too.
 */
const kubeletCurrentPair = 'kubelet-client-current.pem';

interface Pair {
  certificate: X509Certificate;
  key: KeyObject;
  certificatePath: string;
  keyPath: string;
}

async function readKubeletRotatedPair(dir: string): Promise<Pair | undefined> {
  const path = join(dir, kubeletCurrentPair);
  try {
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
    const blocks = decodePemBlocks(text, path);
    const certificate = blocks.find((block) => block.type === 'CERTIFICATE');
    const key = blocks.find((block) => block.type === 'PRIVATE KEY' || block.type.endsWith(' PRIVATE KEY'));
    if (!certificate || !key) throw new Error('it holds no certificate and private key');
    return {
      certificate: new X509Certificate(certificate.der),
      key: parsePrivateKeyPem(encodePem(key.type, key.der), path),
      certificatePath: path,
      keyPath: path,
    };
  } catch (err) {
    throw new ConfigError(
      `cannot read the kubelet's current credentials ${path} (${(err as Error).message})`,
      {
        cause: err,
      },
    );
  }
}

/** The pair `join` wrote, or why it cannot be read. */
async function readJoinPair(dir: string): Promise<Pair | { unreadable: Error }> {
  const certificatePath = nodeFilePath(dir, 'clientCertificate');
  const keyPath = nodeFilePath(dir, 'clientKey');
  try {
    return {
      certificate: new X509Certificate(await readFile(certificatePath)),
      key: parsePrivateKeyPem(await readFile(keyPath, 'utf8'), keyPath),
      certificatePath,
      keyPath,
    };
  } catch (err) {
    return { unreadable: err as Error };
  }
}

/** What the choice between the two pairs reads of a certificate: its machine and its issuer's key. */
function markOf(certificate: X509Certificate): { machine?: string; issuerKey?: Buffer } {
  try {
    const { incarnationId, authorityKeyIdentifier } = parseCertificate(
      Buffer.from(certificate.raw),
    ).extensions;
    return {
      ...(incarnationId === undefined ? {} : { machine: incarnationId }),
      ...(authorityKeyIdentifier === undefined ? {} : { issuerKey: authorityKeyIdentifier }),
    };
  } catch {
    return {};
  }
}

/**
 * Whether `joined` should prove the renewal instead of the kubelet's `rotated` pair: it names its
 * machine where the kubelet's names none, and is otherwise as good — the same node, its own key, and
 * the same CA's (by the issuer's key: after a CA rotation the kubelet's pair may be the only one the
 * server still trusts, and the two CAs may bear one name).
 */
function joinPairIsBetter(joined: Pair, rotated: Pair): boolean {
  const mine = markOf(joined.certificate);
  const kubelet = markOf(rotated.certificate);
  return (
    mine.machine !== undefined &&
    kubelet.machine === undefined &&
    joined.certificate.subject === rotated.certificate.subject &&
    mine.issuerKey !== undefined &&
    kubelet.issuerKey !== undefined &&
    mine.issuerKey.equals(kubelet.issuerKey) &&
    joined.certificate.publicKey.export({ format: 'der', type: 'spki' }).equals(spkiOf(joined.key))
  );
}

/**
 * Reads the kubelet client certificate and key the kubelet uses now, checking they belong together
 * (a ConfigError otherwise) and that the certificate has not expired (an UnauthenticatedError). That
 * is the pair the kubelet rotated itself when `dir` is its --cert-dir and holds an unexpired one
 * ({@link kubeletCurrentPair}), otherwise the pair `join` wrote (which its kubeconfig embeds, what the
 * kubelet falls back to when its own has expired). Except: when the kubelet's pair names no machine
 * (the kube-controller-manager signed it) and `join`'s, unexpired, of the same node and CA and with
 * its own key, names its machine, `join`'s is presented ({@link joinPairIsBetter}). Both prove the
 * node; only one that names its machine still renews where the server refuses the others (the
 * renewal policy's `unmarked: refuse`).
 */
export async function readCurrentCredentials(dir: string, now = new Date()): Promise<CurrentCredentials> {
  const rotated = await readKubeletRotatedPair(dir);
  const joined = await readJoinPair(dir);
  const valid = (candidate: Pair | { unreadable: Error } | undefined): candidate is Pair =>
    candidate !== undefined && !('unreadable' in candidate) && candidate.certificate.validToDate > now;
  let pair: Pair;
  if (valid(rotated)) {
    pair = valid(joined) && joinPairIsBetter(joined, rotated) ? joined : rotated;
  } else if (valid(joined)) {
    pair = joined;
  } else if (rotated) {
    // Both expired, or only the kubelet's own pair is left, expired: named as the kubelet's first
    // choice, its own pair, and refused below.
    pair = rotated;
  } else if ('unreadable' in joined) {
    throw new ConfigError(
      `cannot read the current kubelet credentials in ${dir} (${joined.unreadable.message}); renew needs the --dir of the first join`,
      { cause: joined.unreadable },
    );
  } else {
    pair = joined;
  }
  const { certificate, key, certificatePath, keyPath } = pair;
  if (!certificate.publicKey.export({ format: 'der', type: 'spki' }).equals(spkiOf(key))) {
    throw new ConfigError(
      certificatePath === keyPath
        ? `${certificatePath} holds a certificate and a key that are not one pair`
        : `${certificatePath} is not the certificate of ${keyPath}`,
    );
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
