/**
 * Test support: a node's kubelet certificate renewed on both paths of a bootstrap server — the
 * native `/v1/certificates` (the real `join` with a renewal proof) and kops' `/bootstrap` (nodeup's
 * body with `x-kops-renewal`) — and what each answers, for the end-to-end renewal tests.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import type { ProofProvider } from '../agent/proofs.ts';
import { type CurrentCredentials, readCurrentCredentials, renewalProof } from '../agent/renewal.ts';
import { exitCodeOf } from '../errors.ts';
import { generateKey } from '../pki/keys.ts';
import { parseCertificate } from '../pki/x509.ts';
import { nodeupBody, postNodeup } from './nodeup.ts';

/** What the renewal paths need of a test's cluster. */
export interface RenewalCluster {
  /** The kops cluster name (the renewal proof's audience). */
  name: string;
  boot: { server: { url: string } };
  /** Every line the server logged (the audit trail among them). */
  lines: string[];
}

/** The renewals of one test file's clusters, whose nodes join with `joinWith` and trust `caPem`. */
export function renewalPaths<C extends RenewalCluster>(
  caPem: string,
  joinWith: (cluster: C, nodeName: string, proof: ProofProvider) => Promise<string>,
) {
  /** A renewal with `current` on the native path; resolves with the new credentials. */
  async function renewNative(cluster: C, current: CurrentCredentials): Promise<CurrentCredentials> {
    return readCurrentCredentials(
      await joinWith(cluster, current.nodeName, renewalProof(current, cluster.name)),
    );
  }

  /** The same renewal refused on the native path (exit 77): the reason the node was told. */
  async function nativeRefusal(cluster: C, current: CurrentCredentials): Promise<string> {
    let reason = '';
    await assert.rejects(renewNative(cluster, current), (err) => {
      assert.equal(exitCodeOf(err), 77, String(err));
      reason = String(err);
      return true;
    });
    return reason;
  }

  /** A renewal with `current` on kops' `/bootstrap`, as nodeup asks for its kubelet certificate. */
  async function renewKops(cluster: C, current: CurrentCredentials) {
    const body = nodeupBody(generateKey('ecdsa-p256'));
    const proof = (await renewalProof(current, cluster.name)(Buffer.from(body))) as string;
    return postNodeup(cluster.boot.server.url, body, proof, caPem);
  }

  /** The same renewal refused on kops' path (403): the reason written to the audit trail. */
  async function kopsRefusal(cluster: C, current: CurrentCredentials): Promise<string> {
    const before = cluster.lines.length;
    const answer = await renewKops(cluster, current);
    assert.equal(answer.status, 403, answer.text);
    const audit = cluster.lines.slice(before).find((line) => line.includes('renewal refused'));
    assert.ok(audit, `an audit record of the refusal among ${cluster.lines.slice(before).join('')}`);
    return audit;
  }

  return { renewNative, nativeRefusal, renewKops, kopsRefusal };
}

/** The kubelet certificate kops' /bootstrap answered with. */
export function kopsKubelet(answer: { status: number; text: string }): X509Certificate {
  assert.equal(answer.status, 200, answer.text);
  return new X509Certificate((JSON.parse(answer.text) as { Certs: { kubelet: string } }).Certs.kubelet);
}

/** The incarnation id a certificate carries, as this server's parser reads it. */
export function incarnationIn(certificate: X509Certificate): string | undefined {
  return parseCertificate(Buffer.from(certificate.raw)).extensions.incarnationId;
}
