/**
 * The slim record the approver's informer keeps per CertificateSigningRequest: what the checks read,
 * taken from the wire shape (the request stays base64, as sent).
 */
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import { InvalidInputError } from '../../errors.ts';
import { isJsonObject, isStringList } from '../../json-object.ts';

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

/** A field that is a string when present. */
function optionalString(object: Record<string, unknown>, field: string, where: string): string | undefined {
  const value = object[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw new InvalidInputError(`${where}.${field} is not a string`);
  return value;
}

/** A field that is a list of strings when present. */
function optionalStrings(object: Record<string, unknown>, field: string, where: string): string[] {
  const value = object[field];
  if (value === undefined || value === null) return [];
  if (!isStringList(value)) {
    throw new InvalidInputError(`${where}.${field} is not a list of strings`);
  }
  return [...value];
}

/**
 * The record of a CSR in its JSON wire shape. A CSR whose fields do not have the types the API
 * server gives them (`spec.groups` a string, a condition without a type, a `status` that is a string)
 * is refused (thrown: the informer skips it with the reason, logged): read as it came, `groups:
 * "system:nodes"` passed the group check by substring, a status that was not an object read as
 * undecided, and such requests were approved.
 */
export function csrRecordOf(csr: V1CertificateSigningRequest): CsrRecord {
  const wire = csr as unknown as Record<string, unknown>;
  const spec = wire['spec'];
  if (!isJsonObject(spec)) throw new InvalidInputError('spec is not an object');
  const status = wire['status'] ?? {};
  if (!isJsonObject(status)) throw new InvalidInputError('status is not an object');
  const conditions = status['conditions'] ?? [];
  if (
    !Array.isArray(conditions) ||
    !conditions.every((c) => isJsonObject(c) && typeof c['type'] === 'string')
  ) {
    throw new InvalidInputError('status.conditions is not a list of conditions with a type');
  }
  const decided = conditions.some((c) => c['type'] === 'Approved' || c['type'] === 'Denied');
  const certificate = optionalString(status, 'certificate', 'status');
  const issued = Boolean(certificate);
  const signerName = optionalString(spec, 'signerName', 'spec') ?? '';
  const request = optionalString(spec, 'request', 'spec') ?? '';
  const expirationSeconds = spec['expirationSeconds'];
  if (
    expirationSeconds !== undefined &&
    expirationSeconds !== null &&
    !Number.isSafeInteger(expirationSeconds)
  ) {
    throw new InvalidInputError('spec.expirationSeconds is not a whole number');
  }
  // Only an undecided kubelet request is ever read again: keep the (largest) field for those alone.
  const wanted = !decided && !issued && kubeletSigners.has(signerName);
  return {
    name: csr.metadata?.name ?? '',
    resourceVersion: csr.metadata?.resourceVersion ?? '',
    signerName,
    username: optionalString(spec, 'username', 'spec') ?? '',
    groups: optionalStrings(spec, 'groups', 'spec'),
    usages: optionalStrings(spec, 'usages', 'spec'),
    request: wanted ? request : '',
    ...(typeof expirationSeconds === 'number' ? { expirationSeconds } : {}),
    decided,
    issued,
  };
}

/**
 * Whether two records are the same request: what the checks read of it (signer, requester, groups,
 * usages, the request itself, its lifetime). The approver writes its decision only on the request it
 * assessed.
 */
export function sameRequest(a: CsrRecord, b: CsrRecord): boolean {
  const same = (x: readonly string[], y: readonly string[]) =>
    x.length === y.length && x.every((v, i) => v === y[i]);
  return (
    a.signerName === b.signerName &&
    a.username === b.username &&
    a.request === b.request &&
    a.expirationSeconds === b.expirationSeconds &&
    same(a.groups, b.groups) &&
    same(a.usages, b.usages)
  );
}
