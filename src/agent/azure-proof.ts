/**
 * The node side of kops' Azure proof: `x-azure-id <ARM resource id> <attested document>`, the
 * document asked from IMDS with the nonce `hex(sha256(body))[:32]`, so that it vouches for this
 * request body only. Made fresh for every attempt (the controller spends each document once).
 */
import { nonceForBody } from '../cloud/azure/attested-document.ts';
import { imdsAttestedDocument, imdsInstance } from '../cloud/azure/imds.ts';
import { parseAzureVmId } from '../cloud/azure/resource-id.ts';
import { InvalidInputError, KopsError, UnavailableError } from '../errors.ts';
import { printable } from '../log.ts';
import type { ProofProvider } from './proofs.ts';

/** A base64 PKCS#7 document: one token of the header, nothing the controller would read as another. */
const documentPattern = /^[A-Za-z0-9+/]{1,65536}={0,2}$/;

/** Options of {@link azureProof}. */
export interface AzureProofOptions {
  /** IMDS base URL (default `http://169.254.169.254`; the simulator's per-VM URL in tests). */
  imdsUrl?: string;
  fetch?: typeof globalThis.fetch;
}

/** The `Authorization` value for one body, from this VM's IMDS. */
export function azureProof(options: AzureProofOptions = {}): ProofProvider {
  return async (body, signal) => {
    const imds = {
      ...(options.imdsUrl ? { url: options.imdsUrl } : {}),
      ...(options.fetch ? { fetch: options.fetch } : {}),
      ...(signal ? { signal } : {}),
    };
    const { resourceId } = await imdsInstance(imds);
    // Both go into the header as they are: IMDS (or whatever answers in its place) must not choose
    // its bytes, spaces and line breaks included. Not a VM's id: exit 65, as for any cloud's id.
    try {
      parseAzureVmId(resourceId);
    } catch (err) {
      throw new InvalidInputError(
        `Azure IMDS's resource id "${printable(resourceId, 120)}" is not a VM's: ${err instanceof KopsError ? printable(err.message) : 'malformed'}; is this an Azure VM?`,
        { cause: err },
      );
    }
    const document = await imdsAttestedDocument(nonceForBody(body), imds);
    if (!documentPattern.test(document)) {
      throw new UnavailableError('Azure IMDS returned an attested document whose signature is not base64');
    }
    return `x-azure-id ${resourceId} ${document}`;
  };
}
