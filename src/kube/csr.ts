/** Reading one CertificateSigningRequest from the API server, past any informer's cache. */
import type { CertificatesV1Api, V1CertificateSigningRequest } from '@kubernetes/client-node';
import { UnavailableError } from '../errors.ts';
import { isJsonObject } from '../json-object.ts';
import { unlessNotFound } from './api-errors.ts';
import { type KubeHttps, kubeAnswerError, kubeJson } from './kube-https.ts';

/** The CertificateSigningRequests' collection. */
export const csrCollectionPath = '/apis/certificates.k8s.io/v1/certificatesigningrequests';

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

/**
 * The CSR called `name` as the API server sent it (its JSON, not client-node's model of it), or
 * undefined once it is deleted. A decider that must judge what it read reads this: client-node's
 * deserializer makes its model whatever the answer was (`groups: "g"` becomes `["g"]`, a `status`
 * that is a string becomes an empty status), so a malformed answer would look well-formed.
 */
export async function readCsrWire(
  call: KubeHttps,
  name: string,
  signal?: AbortSignal,
): Promise<Record<string, unknown> | undefined> {
  const action = `read certificate signing request ${name}`;
  const path = `${csrCollectionPath}/${encodeURIComponent(name)}`;
  const answer = await call({ action, method: 'GET', path, ...(signal ? { signal } : {}) });
  if (answer.status === 404) return undefined;
  if (answer.status !== 200) throw kubeAnswerError(answer, action);
  const object = kubeJson<unknown>(answer, action);
  if (!isJsonObject(object)) {
    throw new UnavailableError(`${action}: HTTP 200 with a body that is not an object`);
  }
  return object as Record<string, unknown>;
}
