/**
 * The node side of kops' Azure proof: `x-azure-id <ARM resource id> <attested document>`, the
 * document asked from IMDS with the nonce `hex(sha256(body))[:32]`, so that it vouches for this
 * request body only. Made fresh for every attempt (the controller spends each document once).
 */
import { nonceForBody } from '../cloud/azure/attested-document.ts';
import { imdsAttestedDocument, imdsInstance } from '../cloud/azure/imds.ts';
import type { ProofProvider } from './proofs.ts';

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
    const document = await imdsAttestedDocument(nonceForBody(body), imds);
    return `x-azure-id ${resourceId} ${document}`;
  };
}
