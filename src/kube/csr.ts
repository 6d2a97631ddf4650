/** Reading one CertificateSigningRequest from the API server, past any informer's cache. */
import type { CertificatesV1Api, V1CertificateSigningRequest } from '@kubernetes/client-node';
import { unlessNotFound } from './api-errors.ts';

/**
 * The CSR called `name` as the API server has it now, or undefined once it is deleted. Deciders read
 * it fresh because their cache may lag behind their own last write or someone else's decision.
 */
export function readCsr(
  certificates: CertificatesV1Api,
  name: string,
): Promise<V1CertificateSigningRequest | undefined> {
  return unlessNotFound(
    () => certificates.readCertificateSigningRequest({ name }),
    `read certificate signing request ${name}`,
  );
}
