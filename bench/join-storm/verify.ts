/** Every answer's certificate checked: signed by the CA, for the node's own name. */
import { X509Certificate } from 'node:crypto';
import type { Reply, StormNode } from './types.ts';

/** Reads the certificate out of an answer; throws with the answer when there is none. */
export type CertificateOf = (reply: Reply) => string;

/** The kubelet certificate of a native bootstrap answer. */
export const bootstrapCertificate: CertificateOf = (reply) => {
  const pem = (JSON.parse(reply.text) as { certificates?: { kubelet?: string } }).certificates?.kubelet;
  if (reply.status !== 200 || !pem) throw new Error(`HTTP ${reply.status}: ${reply.text.slice(0, 300)}`);
  return pem;
};

/** The certificate of a `cfssl serve` sign answer. */
export const cfsslCertificate: CertificateOf = (reply) => {
  const pem = (JSON.parse(reply.text) as { result?: { certificate?: string } }).result?.certificate;
  if (reply.status !== 200 || !pem) throw new Error(`HTTP ${reply.status}: ${reply.text.slice(0, 300)}`);
  return pem;
};

/** Why one answer is not a good certificate for node `name`, or undefined when it is. */
function problemOf(
  reply: Reply,
  name: string,
  certificateOf: CertificateOf,
  ca: X509Certificate,
): string | undefined {
  try {
    if (reply.status === 0) return `no answer: ${reply.text}`;
    const certificate = new X509Certificate(certificateOf(reply));
    if (!certificate.checkIssued(ca) || !certificate.verify(ca.publicKey)) {
      return 'the certificate does not verify against the CA';
    }
    if (!certificate.subject.split('\n').includes(`CN=system:node:${name}`)) {
      return `the certificate names ${certificate.subject}, not system:node:${name}`;
    }
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}

/** Counts the answers whose certificate the CA signed for the node's name. */
export function verifyReplies(
  replies: readonly Reply[],
  nodes: readonly StormNode[],
  certificateOf: CertificateOf,
  caCertificate: X509Certificate,
): { verified: number; firstFailure?: string } {
  let verified = 0;
  let firstFailure: string | undefined;
  replies.forEach((reply, i) => {
    const name = (nodes[i] as StormNode).name;
    const problem = problemOf(reply, name, certificateOf, caCertificate);
    if (problem === undefined) verified++;
    else firstFailure ??= `${name}: ${problem}`;
  });
  return firstFailure === undefined ? { verified } : { verified, firstFailure };
}
