/**
 * The slim record the approver's informer keeps per CertificateSigningRequest: what the checks read,
 * taken from the wire shape (the request stays base64, as sent).
 */
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';

/** One CSR, as the approver sees it. */
export interface CsrRecord {
  name: string;
  resourceVersion: string;
  signerName: string;
  /** The authenticated requester, stamped by the API server (never from the request itself). */
  username: string;
  groups: string[];
  usages: string[];
  /** `spec.request`: base64 of the PEM CERTIFICATE REQUEST. */
  request: string;
  expirationSeconds?: number;
  /** Whether an Approved or Denied condition is already set: a decision is never revisited. */
  decided: boolean;
  /** Whether a certificate is already issued. */
  issued: boolean;
}

/** The record of a CSR in its JSON wire shape. */
export function csrRecordOf(csr: V1CertificateSigningRequest): CsrRecord {
  const spec = csr.spec ?? ({} as Partial<V1CertificateSigningRequest['spec']>);
  const conditions = csr.status?.conditions ?? [];
  return {
    name: csr.metadata?.name ?? '',
    resourceVersion: csr.metadata?.resourceVersion ?? '',
    signerName: spec.signerName ?? '',
    username: spec.username ?? '',
    groups: spec.groups ?? [],
    usages: spec.usages ?? [],
    request: typeof spec.request === 'string' ? spec.request : '',
    ...(typeof spec.expirationSeconds === 'number' ? { expirationSeconds: spec.expirationSeconds } : {}),
    decided: conditions.some((c) => c.type === 'Approved' || c.type === 'Denied'),
    issued: Boolean(csr.status?.certificate),
  };
}
