/**
 * The node side of kops metal's `x-pki-tpm` proof, made as nodeup makes it: a record naming this
 * host, its public key, the SHA-256 of the request body, the time (Unix seconds) and the kops
 * audience, signed (ECDSA, SHA-256, ASN.1 DER) with the machine key whose public half the operator
 * registered in the host's `Host` object. A fresh record for every attempt, since each binds to one
 * body and is spent once. The key never leaves the node; nodeup keeps it at
 * /etc/kubernetes/kops/pki/machine/private.pem.
 */
import { sign } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { hostname as osHostname } from 'node:os';
import {
  encodePkiTpmData,
  encodePkiTpmToken,
  pkiTpmAudience,
  pkiTpmRequestHash,
  pkiTpmScheme,
} from '../cloud/metal/pki-tpm-token.ts';
import { fileErrorReason, InvalidInputError, NotFoundError } from '../errors.ts';
import { parsePrivateKeyPem, spkiOf } from '../pki/keys.ts';
import { encodePem } from '../pki/pem.ts';
import type { ProofProvider } from './proofs.ts';

/** Options of {@link pkiTpmProof}. */
export interface PkiTpmProofOptions {
  /** The machine's private key, PEM (SEC 1 or PKCS#8). */
  keyPem: string;
  /** Where the key came from, for error messages. */
  keySource?: string;
  /** The host name the proof claims: the Host's name (default: this machine's host name, as nodeup). */
  hostname?: string;
  now?: () => Date;
}

/** Makes `x-pki-tpm` proofs with the given machine key. */
export function pkiTpmProof(options: PkiTpmProofOptions): ProofProvider {
  const source = options.keySource ?? 'the machine key';
  const key = parsePrivateKeyPem(options.keyPem, source);
  if (key.asymmetricKeyType !== 'ec') {
    throw new InvalidInputError(
      `${source} is a ${key.asymmetricKeyType} key; kops-controller verifies x-pki-tpm proofs made with ECDSA keys only`,
    );
  }
  const keyID = encodePem('PUBLIC KEY', spkiOf(key));
  const instance = options.hostname ?? osHostname();
  const now = options.now ?? (() => new Date());
  return async (body) => {
    const dataBytes = encodePkiTpmData({
      instance,
      keyID,
      requestHash: pkiTpmRequestHash(body),
      timestamp: Math.floor(now().getTime() / 1000),
      audience: pkiTpmAudience,
    });
    return `${pkiTpmScheme} ${encodePkiTpmToken(dataBytes, sign('sha256', dataBytes, key))}`;
  };
}

/** Reads the machine key file and makes the proof provider (`join --pki-tpm-key FILE`). */
export async function pkiTpmProofFromFile(
  path: string,
  options: Omit<PkiTpmProofOptions, 'keyPem' | 'keySource'> = {},
): Promise<ProofProvider> {
  let keyPem: string;
  try {
    keyPem = await readFile(path, 'utf8');
  } catch (err) {
    throw new NotFoundError(`cannot read the machine key ${path}: ${fileErrorReason(err)}`, { cause: err });
  }
  return pkiTpmProof({ ...options, keyPem, keySource: path });
}
