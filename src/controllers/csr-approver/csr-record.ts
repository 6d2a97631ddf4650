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

/** The signer of kubelet client certificates. */
export const kubeletClientSigner = 'kubernetes.io/kube-apiserver-client-kubelet';
/** The signer of kubelet serving certificates. */
export const kubeletServingSigner = 'kubernetes.io/kubelet-serving';

/** The signers whose requests the approver reads; other CSRs are cached without their request. */
const kubeletSigners = new Set([kubeletClientSigner, kubeletServingSigner]);

/** The record of a CSR in its JSON wire shape. */
export function csrRecordOf(csr: V1CertificateSigningRequest): CsrRecord {
  const spec = csr.spec ?? ({} as Partial<V1CertificateSigningRequest['spec']>);
  const conditions = csr.status?.conditions ?? [];
  const decided = conditions.some((c) => c.type === 'Approved' || c.type === 'Denied');
  const issued = Boolean(csr.status?.certificate);
  // Only an undecided kubelet request is ever read again: keep the (largest) field for those alone.
  const wanted = !decided && !issued && kubeletSigners.has(spec.signerName ?? '');
  return {
    name: csr.metadata?.name ?? '',
    resourceVersion: csr.metadata?.resourceVersion ?? '',
    signerName: spec.signerName ?? '',
    username: spec.username ?? '',
    groups: spec.groups ?? [],
    usages: spec.usages ?? [],
    request: wanted && typeof spec.request === 'string' ? spec.request : '',
    ...(typeof spec.expirationSeconds === 'number' ? { expirationSeconds: spec.expirationSeconds } : {}),
    decided,
    issued,
  };
}
