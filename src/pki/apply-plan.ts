/**
 * What `pki apply` does with one wanted certificate, decided from what is on disk: issue it (nothing
 * there), re-issue it (what is there is not what is wanted: another subject or other names or
 * usages, not signed by the CA's signer, a key that does not match), renew it (it nears expiry), or
 * keep it. Pure: the files' contents in, a decision out.
 */
import { X509Certificate } from 'node:crypto';
import type { CertificateAuthority } from './ca.ts';
import { canonicalIp } from './ip.ts';
import { describeKey, keyPolicyViolation, parsePrivateKeyPem, spkiOf } from './keys.ts';
import { decodePem } from './pem.ts';
import { type CertificatePlan, type ProfileName, profileNamed, subjectText } from './profiles.ts';
import { type ParsedCertificate, parseCertificate } from './x509.ts';

/** The files of one entry as they are, absent ones undefined. */
export interface OnDisk {
  certificatePem?: string | undefined;
  keyPem?: string | undefined;
  kubeconfig?: string | undefined;
}

export type EntryAction = 'issue' | 'reissue' | 'renew' | 'keep';

/** The decision for one certificate. */
export interface EntryDecision {
  action: EntryAction;
  /** Why, for the plan: what differs, or when it expires. */
  reasons: string[];
  /** The certificate on disk's expiry, when there is one. */
  notAfter?: Date;
  /**
   * The key the new certificate is for: the one on disk when it is usable (so renewing rewrites the
   * certificate alone, which one atomic write replaces), else a new one.
   */
  key: 'reuse' | 'new';
}

/** Profiles whose key may have been made on the node (`pki sign`): a certificate without its key here is not broken. */
const keyMayLiveOnNode = new Set<ProfileName>(['kubelet', 'kubelet-server']);

function sameList(a: readonly string[], b: readonly string[]): boolean {
  const left = [...new Set(a)].sort();
  const right = [...new Set(b)].sort();
  return left.length === right.length && left.every((value, i) => value === right[i]);
}

/** How a certificate on disk differs from the wanted one; empty when it does not. */
function differences(
  parsed: ParsedCertificate,
  profile: ProfileName,
  wanted: CertificatePlan,
  ca: CertificateAuthority,
): string[] {
  const out: string[] = [];
  const subject = {
    commonName: parsed.subject.commonName ?? '',
    organizations: parsed.subject.organizations,
  };
  if (subjectText(subject) !== subjectText(wanted.subject)) {
    out.push(`subject is "${subjectText(subject)}", wanted "${subjectText(wanted.subject)}"`);
  }
  const san = parsed.extensions.subjectAltName;
  const names = [
    ...(san?.dnsNames ?? []).map((d) => `DNS:${d.toLowerCase()}`),
    ...(san?.ipAddresses ?? []).map((ip) => `IP:${canonicalIp(ip)}`),
  ];
  const wantedNames = [
    ...wanted.altNames.dnsNames.map((d) => `DNS:${d}`),
    ...wanted.altNames.ipAddresses.map((ip) => `IP:${ip}`),
  ];
  if (!sameList(names, wantedNames)) {
    const added = wantedNames.filter((n) => !names.includes(n)).map((n) => `+${n}`);
    const removed = names.filter((n) => !wantedNames.includes(n)).map((n) => `-${n}`);
    out.push(`names change: ${[...added, ...removed].join(' ')}`);
  }
  const usage = profileNamed(profile).usage === 'client' ? 'clientAuth' : 'serverAuth';
  if (!sameList(parsed.extensions.extKeyUsage ?? [], [usage])) {
    out.push(
      `extended key usage is [${(parsed.extensions.extKeyUsage ?? []).join(', ')}], wanted [${usage}]`,
    );
  }
  const signer = ca.signer.certificate;
  if (!new X509Certificate(parsed.der).verify(signer.parsed.publicKey)) {
    out.push(`not signed by the CA's signer (keypair ${signer.keypairId})`);
  }
  return out;
}

/** Why the key on disk cannot be certified again, or undefined when it can. */
function keyProblem(keyPem: string | undefined): string | undefined {
  if (keyPem === undefined) return 'no key';
  try {
    return keyPolicyViolation(describeKey(parsePrivateKeyPem(keyPem)))?.replace(/^/, 'key: ');
  } catch (err) {
    return `key: ${(err as Error).message}`;
  }
}

/** Whether a usable key on disk is the certificate's. */
function keyMatches(keyPem: string, parsed: ParsedCertificate): boolean {
  return spkiOf(parsePrivateKeyPem(keyPem)).equals(parsed.spki);
}

/** Options of a decision. */
export interface DecideOptions {
  now: Date;
  /**
   * Renew when less than this remains; default a third of the certificate's own lifetime (the
   * kubelet renews at 70–90 % of it).
   */
  renewBeforeMs?: number | undefined;
}

/** Decides what to do with one certificate. */
export function decideEntry(
  profile: ProfileName,
  wanted: CertificatePlan,
  disk: OnDisk,
  ca: CertificateAuthority,
  options: DecideOptions,
): EntryDecision {
  // A usable key is kept whatever else changes: the certificate is what is re-issued.
  const problem = keyProblem(disk.keyPem);
  const key = problem ? 'new' : 'reuse';
  if (disk.certificatePem === undefined) return { action: 'issue', reasons: ['not issued yet'], key };
  let parsed: ParsedCertificate;
  try {
    const [der] = decodePem(disk.certificatePem, 'CERTIFICATE', 'certificate');
    parsed = parseCertificate(der as Buffer);
  } catch (err) {
    return { action: 'reissue', reasons: [`the certificate is unreadable: ${(err as Error).message}`], key };
  }
  const reasons = differences(parsed, profile, wanted, ca);
  const keyHeldByNode = disk.keyPem === undefined && keyMayLiveOnNode.has(profile);
  if (problem && !keyHeldByNode) reasons.push(problem);
  if (!problem && !keyMatches(disk.keyPem as string, parsed)) {
    reasons.push('the key does not match the certificate');
  }
  const notAfter = parsed.notAfter;
  if (reasons.length) return { action: 'reissue', reasons, notAfter, key };
  const lifetimeMs = notAfter.getTime() - parsed.notBefore.getTime();
  const renewBeforeMs = options.renewBeforeMs ?? lifetimeMs / 3;
  const remainingMs = notAfter.getTime() - options.now.getTime();
  if (remainingMs <= renewBeforeMs) {
    const when = remainingMs <= 0 ? 'expired' : 'expires';
    return { action: 'renew', reasons: [`${when} ${notAfter.toISOString()}`], notAfter, key };
  }
  return { action: 'keep', reasons: [`valid until ${notAfter.toISOString()}`], notAfter, key };
}
