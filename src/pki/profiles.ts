/**
 * Issuance profiles: one small declarative entry per kind of certificate, and the signer that
 * issues them. The signer re-validates every request against its profile and the verified identity
 * even after approval (as the Kubernetes csrsigning controller does): the request contributes its
 * public key and may narrow the names, but the subject, names and usages come from the profile and
 * the verified facts, never from what the request claims.
 */
import { type KeyObject, sign } from 'node:crypto';
import { isDnsSubdomain } from '../dns-name.ts';
import { ConfigError, InvalidInputError } from '../errors.ts';
import { pooledRandomBytes } from '../random.ts';
import type { CertificateAuthority } from './ca.ts';
import { type ParsedCsr, RequestRejectedError } from './csr.ts';
import { unsignedInteger } from './der.ts';
import { incarnationExtension } from './incarnation.ts';
import { canonicalIp } from './ip.ts';
import { describeSpki, type KeyDescription, keyPolicyViolation, publicKeyFromSpki, spkiOf } from './keys.ts';
import { encodePem } from './pem.ts';
import { assertNoReservedNames, defaultReservedNames, type ReservedNames } from './reserved-names.ts';
import {
  type AltNames,
  basicConstraintsExtension,
  encodeName,
  extKeyUsageExtension,
  type KeyUsage,
  keyUsageExtension,
  type Subject,
  signAsync,
  subjectAltNameExtension,
  subjectKeyIdentifierExtension,
  unsignedCertificate,
} from './x509.ts';

const minuteMs = 60_000;
const hourMs = 60 * minuteMs;
const dayMs = 24 * hourMs;

/** One kind of certificate the CA issues. */
export interface Profile {
  description: string;
  usage: 'client' | 'server';
  /** Subjects a request may carry, for a node name; the first is used for a bare public key. */
  subjects: (name: string) => Subject[];
  /** `none`: no subjectAltName; `verified`: only names from the verified identity. */
  altNames: 'none' | 'verified';
  /** Whether the identity's name is itself one of the verified DNS names (a service's own name). */
  nameIsDnsName: boolean;
  /**
   * Whether nodes hold it: then it never names the cluster's API server or a wildcard, whoever
   * verified or approved the names (reserved-names.ts).
   */
  issuedToNodes: boolean;
  /**
   * Whether it is one node's own identity, which names the machine it was issued to when that is
   * verified (the incarnation extension, incarnation.ts): a renewal with it is then bound to that
   * machine, not to whichever machine bears the node's name later.
   */
  namesIncarnation: boolean;
  defaultLifetimeMs: number;
}

/** The profiles, by name (kops' certNames where kops has the same certificate). */
export const profiles = {
  kubelet: {
    description: 'kubelet client certificate (system:node:<name> in system:nodes)',
    usage: 'client',
    subjects: (name) => [{ commonName: `system:node:${name}`, organizations: ['system:nodes'] }],
    altNames: 'none',
    nameIsDnsName: false,
    issuedToNodes: true,
    namesIncarnation: true,
    defaultLifetimeMs: dayMs,
  },
  'kubelet-server': {
    description: 'kubelet serving certificate (names from verified facts only)',
    usage: 'server',
    // kops issues `CN=<node>` (first, so a request by public key gets it); a kubelet's own serving
    // CSR asks for the system:node form.
    subjects: (name) => [
      { commonName: name, organizations: [] },
      { commonName: `system:node:${name}`, organizations: ['system:nodes'] },
    ],
    altNames: 'verified',
    nameIsDnsName: false,
    issuedToNodes: true,
    namesIncarnation: true,
    defaultLifetimeMs: dayMs,
  },
  'kube-proxy': {
    description: 'kube-proxy client certificate (system:kube-proxy)',
    usage: 'client',
    subjects: () => [{ commonName: 'system:kube-proxy', organizations: [] }],
    altNames: 'none',
    nameIsDnsName: false,
    issuedToNodes: true,
    namesIncarnation: false,
    defaultLifetimeMs: dayMs,
  },
  'kube-router': {
    description: 'kube-router client certificate (system:kube-router)',
    usage: 'client',
    subjects: () => [{ commonName: 'system:kube-router', organizations: [] }],
    altNames: 'none',
    nameIsDnsName: false,
    issuedToNodes: true,
    namesIncarnation: false,
    defaultLifetimeMs: dayMs,
  },
  'etcd-client-cilium': {
    description: "Cilium's etcd client certificate (CN=cilium; kops signs it with etcd-clients-ca-cilium)",
    usage: 'client',
    subjects: () => [{ commonName: 'cilium', organizations: [] }],
    altNames: 'none',
    nameIsDnsName: false,
    issuedToNodes: true,
    namesIncarnation: false,
    defaultLifetimeMs: dayMs,
  },
  'kops-controller': {
    description: "the controller's own serving certificate (names given by the admin)",
    usage: 'server',
    subjects: (name) => [{ commonName: name, organizations: [] }],
    altNames: 'verified',
    nameIsDnsName: true,
    issuedToNodes: false,
    namesIncarnation: false,
    defaultLifetimeMs: 30 * dayMs,
  },
  // The control plane's certificates, as kOps' nodeup issues them on control-plane nodes (CA
  // `kubernetes-ca`): they are made by the admin (`pki issue`, `pki apply`), never by the bootstrap
  // paths, whose profile lists name node profiles only.
  'kube-apiserver': {
    description:
      "the API server's serving certificate (CN=kubernetes-master, as kOps; `pki apply` adds the kubernetes service names)",
    usage: 'server',
    subjects: () => [{ commonName: 'kubernetes-master', organizations: [] }],
    altNames: 'verified',
    nameIsDnsName: false,
    issuedToNodes: false,
    namesIncarnation: false,
    defaultLifetimeMs: 365 * dayMs,
  },
  'kube-controller-manager': {
    description: "kube-controller-manager's client certificate (system:kube-controller-manager)",
    usage: 'client',
    subjects: () => [{ commonName: 'system:kube-controller-manager', organizations: [] }],
    altNames: 'none',
    nameIsDnsName: false,
    issuedToNodes: false,
    namesIncarnation: false,
    defaultLifetimeMs: 365 * dayMs,
  },
  'kube-scheduler': {
    description: "kube-scheduler's client certificate (system:kube-scheduler)",
    usage: 'client',
    subjects: () => [{ commonName: 'system:kube-scheduler', organizations: [] }],
    altNames: 'none',
    nameIsDnsName: false,
    issuedToNodes: false,
    namesIncarnation: false,
    defaultLifetimeMs: 365 * dayMs,
  },
  // An administrator in system:masters, as `kops export kubecfg --admin` makes (CN=kubecfg-<user>)
  // and kubeadm's super-admin.conf: a statically clustered cluster has no other way to make its
  // first RBAC binding. Membership of system:masters bypasses RBAC and cannot be revoked short of
  // rotating the CA, so it lasts 18 h by default, as kOps' --admin.
  admin: {
    description: 'cluster administrator client certificate (O=system:masters, CN=<name>; 18h by default)',
    usage: 'client',
    subjects: (name) => [{ commonName: name, organizations: ['system:masters'] }],
    altNames: 'none',
    nameIsDnsName: false,
    issuedToNodes: false,
    namesIncarnation: false,
    defaultLifetimeMs: 18 * hourMs,
  },
} satisfies Record<string, Profile>;

export type ProfileName = keyof typeof profiles;

/** The profile names, for help texts and validation. */
export const profileNames = Object.keys(profiles) as ProfileName[];

/** Looks a profile up by name; an unknown name is an input error listing the known ones. */
export function profileNamed(name: string): Profile {
  if (!Object.hasOwn(profiles, name)) {
    throw new InvalidInputError(
      `unknown certificate profile "${name}": use one of ${profileNames.join(', ')}`,
    );
  }
  return profiles[name as ProfileName];
}

/** Who the certificate is for, as established by something trusted (cloud API, admin, approval). */
export interface VerifiedIdentity {
  /** Node name (or, for kops-controller, the service's DNS name). */
  name: string;
  dnsNames?: readonly string[];
  ipAddresses?: readonly string[];
  /**
   * The id of the machine's incarnation the cloud verified (`NodeFacts.incarnationId`), which the
   * profiles that name one write into the certificate; none when no authority knows one.
   */
  incarnationId?: string;
}

/** What is certified: a CSR, or a bare public key as DER SubjectPublicKeyInfo (kops' bootstrap sends those). */
export type CertificateRequest = ParsedCsr | { kind: 'public-key'; spki: Buffer };

/**
 * A request for a bare public key, given as a key object or DER SubjectPublicKeyInfo. Bytes from
 * elsewhere (a node's) are decoded by OpenSSL and certified as OpenSSL writes them again, never as
 * sent: nothing checks a bare key as a CSR's signature check does, and the CA must not sign bytes no
 * client can read (extra fields, a point off its curve) or that only some can. RequestRejectedError
 * `key` when OpenSSL cannot read them. A key object's SPKI is OpenSSL's own, so it costs nothing more.
 */
export function publicKeyRequest(key: KeyObject | Buffer): CertificateRequest {
  if (!Buffer.isBuffer(key)) return { kind: 'public-key', spki: spkiOf(key) };
  try {
    return { kind: 'public-key', spki: spkiOf(publicKeyFromSpki(key)) };
  } catch (err) {
    throw new RequestRejectedError('key', (err as Error).message, { cause: err });
  }
}

function describeRequestKey(request: CertificateRequest): KeyDescription {
  if (request.kind === 'csr') return request.key;
  let description: KeyDescription;
  try {
    description = describeSpki(request.spki);
  } catch (err) {
    throw new RequestRejectedError('key', `the public key is malformed: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const violation = keyPolicyViolation(description);
  if (violation) throw new RequestRejectedError('key', violation);
  return description;
}

/** Lifetime limits a deployment may configure: at least ten minutes, at most kops' 455 days. */
export interface LifetimeBounds {
  minMs: number;
  maxMs: number;
}

export const absoluteLifetimeBounds: LifetimeBounds = { minMs: 10 * minuteMs, maxMs: 455 * dayMs };

/** Checks configured bounds against the absolute ones. */
export function validateLifetimeBounds(bounds: LifetimeBounds): LifetimeBounds {
  const { minMs, maxMs } = absoluteLifetimeBounds;
  if (!(bounds.minMs >= minMs && bounds.maxMs <= maxMs && bounds.minMs <= bounds.maxMs)) {
    throw new InvalidInputError(
      `certificate lifetime bounds must satisfy 10m <= min <= max <= ${maxMs / hourMs}h (got min ${bounds.minMs}ms, max ${bounds.maxMs}ms)`,
    );
  }
  return bounds;
}

/** Options of one issuance. */
export interface IssueOptions {
  /** Requested lifetime; clamped to `bounds`. Defaults to the profile's. */
  lifetimeMs?: number;
  bounds?: LifetimeBounds;
  /**
   * The longest the certificate may be valid (a renewal's: the certificate it presents). When it is
   * shorter than the lifetime, the certificate gets exactly it, without the per-node spread, so that
   * renewal after renewal does not shorten it; below `bounds.minMs` the request is refused.
   */
  maxLifetimeMs?: number;
  now?: Date;
  /**
   * The cluster's API-server names and addresses, which certificates of profiles issued to nodes
   * never carry. Default: {@link defaultReservedNames}.
   */
  reserved?: ReservedNames;
}

/** A certificate just issued. */
export interface IssuedCertificate {
  profile: ProfileName;
  pem: string;
  der: Buffer;
  serialHex: string;
  subject: Subject;
  altNames: AltNames;
  notBefore: Date;
  notAfter: Date;
}

/** What a profile will put in the certificate for a request, once the request is validated. */
export interface CertificatePlan {
  subject: Subject;
  altNames: AltNames;
}

/** Checks a node or DNS name: a lower-case RFC 1123 subdomain, as Kubernetes requires of node names. */
export function validateDnsName(name: string, what = 'name'): string {
  if (!isDnsSubdomain(name)) {
    throw new InvalidInputError(
      `${what} "${name}" is not a valid DNS name: use lower-case letters, digits, "-" and ".", at most 253 characters`,
    );
  }
  return name;
}

function verifiedAltNames(profile: Profile, identity: VerifiedIdentity): AltNames {
  if (profile.altNames === 'none') return { dnsNames: [], ipAddresses: [] };
  const dnsNames = [...(profile.nameIsDnsName ? [identity.name] : []), ...(identity.dnsNames ?? [])].map(
    (d) => validateDnsName(d.toLowerCase(), 'DNS name'),
  );
  const ipAddresses = (identity.ipAddresses ?? []).map(canonicalIp);
  return { dnsNames: [...new Set(dnsNames)], ipAddresses: [...new Set(ipAddresses)] };
}

/** A subject as people read it: `O=system:nodes, CN=system:node:node-a`. */
export function subjectText(subject: Subject): string {
  return [...subject.organizations.map((o) => `O=${o}`), `CN=${subject.commonName}`].join(', ');
}

function sameSubject(a: Subject, b: Subject): boolean {
  return (
    a.commonName === b.commonName &&
    a.organizations.length === b.organizations.length &&
    a.organizations.every((o, i) => o === b.organizations[i])
  );
}

const allowedKeyUsages: readonly KeyUsage[] = ['digitalSignature', 'keyEncipherment'];

function planForCsr(
  profileName: ProfileName,
  profile: Profile,
  csr: ParsedCsr,
  allowed: Subject[],
  verified: AltNames,
): CertificatePlan {
  const requested: Subject = {
    commonName: csr.subject.commonName ?? '',
    organizations: csr.subject.organizations,
  };
  const extra = csr.subject.attributes.filter((a) => a.type !== 'CN' && a.type !== 'O');
  const subject = allowed.find((s) => sameSubject(s, requested));
  if (!subject || extra.length) {
    const wanted = allowed.map(subjectText);
    throw new RequestRejectedError(
      'subject',
      `${profileName}: the request's subject "${csr.subject.text}" is not allowed; expected ${wanted.map((w) => `"${w}"`).join(' or ')}`,
    );
  }
  const san = csr.extensions.subjectAltName;
  if (san && (san.emails.length || san.uris.length || san.other)) {
    throw new RequestRejectedError(
      'san',
      `${profileName}: email, URI and other subjectAltName types are not allowed`,
    );
  }
  const dnsNames = (san?.dnsNames ?? []).map((d) => d.toLowerCase());
  const ipAddresses = (san?.ipAddresses ?? []).map(canonicalIp);
  if (profile.altNames === 'none' && (dnsNames.length || ipAddresses.length)) {
    throw new RequestRejectedError(
      'san',
      `${profileName}: certificates carry no subjectAltName, but the request asks for ${[...dnsNames, ...ipAddresses].join(', ')}`,
    );
  }
  const unverified = [
    ...dnsNames.filter((d) => !verified.dnsNames.includes(d)),
    ...ipAddresses.filter((ip) => !verified.ipAddresses.includes(ip)),
  ];
  if (unverified.length) {
    throw new RequestRejectedError(
      'san',
      `${profileName}: the request asks for names that are not verified for it: ${unverified.join(', ')}`,
    );
  }
  const wantedUsage = profile.usage === 'client' ? 'clientAuth' : 'serverAuth';
  const badExtendedUsages = (csr.extensions.extKeyUsage ?? []).filter((u) => u !== wantedUsage);
  if (badExtendedUsages.length) {
    throw new RequestRejectedError(
      'extension',
      `${profileName}: extended key usages ${badExtendedUsages.join(', ')} are not allowed; only ${wantedUsage}`,
    );
  }
  const badUsages = (csr.extensions.keyUsage ?? []).filter((u) => !allowedKeyUsages.includes(u));
  if (badUsages.length) {
    throw new RequestRejectedError(
      'extension',
      `${profileName}: key usages ${badUsages.join(', ')} are not allowed`,
    );
  }
  // A request naming no names gets all verified ones; one naming some gets exactly those.
  const narrowed = dnsNames.length || ipAddresses.length;
  return {
    subject,
    altNames: narrowed
      ? { dnsNames: [...new Set(dnsNames)], ipAddresses: [...new Set(ipAddresses)] }
      : verified,
  };
}

/**
 * Validates a request against a profile and the verified identity and returns what the certificate
 * will contain; throws RequestRejectedError (with a reason) when the request does not fit.
 */
export function planCertificate(
  profileName: ProfileName,
  request: CertificateRequest,
  identity: VerifiedIdentity,
): CertificatePlan {
  const profile = profileNamed(profileName);
  validateDnsName(identity.name, 'node name');
  const allowed = profile.subjects(identity.name);
  const verified = verifiedAltNames(profile, identity);
  const plan =
    request.kind === 'csr'
      ? planForCsr(profileName, profile, request, allowed, verified)
      : { subject: allowed[0] as Subject, altNames: verified };
  if (
    profile.altNames === 'verified' &&
    !plan.altNames.dnsNames.length &&
    !plan.altNames.ipAddresses.length
  ) {
    throw new RequestRejectedError(
      'san',
      `${profileName}: a serving certificate needs at least one verified DNS name or IP address`,
    );
  }
  return plan;
}

/** Refuses, for the profiles nodes hold, a name or subjectAltName of the API server or a wildcard. */
function assertNodeMayHold(
  profileName: ProfileName,
  identity: VerifiedIdentity,
  plan: CertificatePlan,
  reserved: ReservedNames = defaultReservedNames,
): void {
  if (!profileNamed(profileName).issuedToNodes) return;
  assertNoReservedNames(
    [
      { what: `${profileName}: name`, dnsNames: [identity.name] },
      { what: `${profileName}: subjectAltName`, ...plan.altNames },
    ],
    reserved,
  );
}

/**
 * What a certificate of `profileName` for `identity` contains when the request names nothing (a key
 * made here): the wanted state `pki apply` compares with what is on disk. Refuses what issuing would
 * refuse, reserved names included.
 */
export function wantedCertificate(
  profileName: ProfileName,
  identity: VerifiedIdentity,
  reserved?: ReservedNames,
): CertificatePlan {
  // A bare public key contributes nothing to the plan but its key, which is checked at issuance.
  const plan = planCertificate(profileName, { kind: 'public-key', spki: Buffer.alloc(0) }, identity);
  assertNodeMayHold(profileName, identity, plan, reserved);
  return plan;
}

/** FNV-1a, 32 bits: a stable per-node number for spreading expirations. */
function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return hash;
}

/** How far back certificates start, so that nodes whose clocks lag still accept them (as Kubernetes). */
export const backdateMs = 5 * minuteMs;

/**
 * The validity window: backdated five minutes; the lifetime clamped to the bounds, then shortened
 * by a stable per-node 0–10 % (never below the minimum) so that nodes made together do not all
 * renew together; never beyond the CA certificate.
 */
export function validityFor(
  name: string,
  lifetimeMs: number,
  bounds: LifetimeBounds,
  now: Date,
  ca: CertificateAuthority,
): { notBefore: Date; notAfter: Date } {
  const clamped = Math.min(Math.max(lifetimeMs, bounds.minMs), bounds.maxMs);
  const spread = Math.floor((fnv1a(name) / 2 ** 32) * 0.1 * (clamped - bounds.minMs));
  const caCertificate = ca.signer.certificate.parsed;
  // The CA is checked when it is loaded; a server that runs past its expiry must refuse rather than
  // issue certificates that end before they start (or within moments).
  if (caCertificate.notAfter.getTime() - now.getTime() < bounds.minMs) {
    throw new ConfigError(
      `CA certificate "${caCertificate.subject.text}" expires on ${caCertificate.notAfter.toISOString()}, ` +
        `within the shortest lifetime issued (${bounds.minMs / minuteMs} min): rotate the CA`,
    );
  }
  const seconds = (ms: number) => Math.floor(ms / 1000) * 1000; // certificates carry whole seconds
  return {
    notBefore: new Date(seconds(Math.max(now.getTime() - backdateMs, caCertificate.notBefore.getTime()))),
    notAfter: new Date(seconds(Math.min(now.getTime() + clamped - spread, caCertificate.notAfter.getTime()))),
  };
}

/** A random 128-bit serial, from the shared pool of random bytes (src/random.ts). */
function randomSerial(): Buffer {
  for (;;) {
    const bytes = pooledRandomBytes(16);
    if (bytes.some((b) => b !== 0)) return unsignedInteger(bytes);
  }
}

// The extensions that depend only on the profile's usage and the key type, encoded once.
const usageExtensions = {
  client: extKeyUsageExtension(['clientAuth']),
  server: extKeyUsageExtension(['serverAuth']),
};
const keyUsages = {
  rsa: keyUsageExtension(['digitalSignature', 'keyEncipherment']),
  other: keyUsageExtension(['digitalSignature']),
};
const leafConstraints = basicConstraintsExtension(false);

/** A certificate planned and assembled, waiting for the CA's signature. */
interface PreparedIssuance {
  tbs: Buffer;
  finish(signature: Buffer): IssuedCertificate;
}

/** The lifetime and bounds a certificate is issued with, within `options.maxLifetimeMs`. */
function cappedLifetime(
  lifetimeMs: number,
  options: Pick<IssueOptions, 'bounds' | 'maxLifetimeMs'>,
): { lifetimeMs: number; bounds: LifetimeBounds } {
  const bounds = options.bounds ? validateLifetimeBounds(options.bounds) : absoluteLifetimeBounds;
  const cap = options.maxLifetimeMs;
  if (cap === undefined || cap >= Math.min(lifetimeMs, bounds.maxMs)) return { lifetimeMs, bounds };
  if (cap < bounds.minMs) {
    throw new RequestRejectedError(
      'lifetime',
      `the certificate it renews was valid for less than the shortest lifetime this server issues (${bounds.minMs / minuteMs} min)`,
    );
  }
  return { lifetimeMs: cap, bounds: { minMs: cap, maxMs: cap } };
}

/** Everything of {@link issueCertificate} but the signature. */
function prepareIssuance(
  ca: CertificateAuthority,
  profileName: ProfileName,
  request: CertificateRequest,
  identity: VerifiedIdentity,
  options: IssueOptions,
): PreparedIssuance {
  const profile = profileNamed(profileName);
  const plan = planCertificate(profileName, request, identity);
  assertNodeMayHold(profileName, identity, plan, options.reserved);
  const key = describeRequestKey(request);
  const { lifetimeMs, bounds } = cappedLifetime(options.lifetimeMs ?? profile.defaultLifetimeMs, options);
  const { notBefore, notAfter } = validityFor(
    identity.name,
    lifetimeMs,
    bounds,
    options.now ?? new Date(),
    ca,
  );
  const hasNames = plan.altNames.dnsNames.length > 0 || plan.altNames.ipAddresses.length > 0;
  const serial = randomSerial();
  const unsigned = unsignedCertificate(
    {
      serial,
      issuer: ca.signer.certificate.parsed.subjectDer,
      subject: encodeName(plan.subject),
      notBefore,
      notAfter,
      spki: request.spki,
      extensions: [
        // keyEncipherment only means something for RSA key transport.
        key.type === 'rsa' ? keyUsages.rsa : keyUsages.other,
        usageExtensions[profile.usage],
        leafConstraints,
        subjectKeyIdentifierExtension(key.keyIdentifier),
        ca.signer.authorityKeyIdentifier,
        ...(hasNames ? [subjectAltNameExtension(plan.altNames)] : []),
        ...(profile.namesIncarnation && identity.incarnationId !== undefined
          ? [incarnationExtension(identity.incarnationId)]
          : []),
      ],
    },
    ca.signer.scheme,
  );
  return {
    tbs: unsigned.tbs,
    finish: (signature) => {
      const der = unsigned.complete(signature);
      return {
        profile: profileName,
        pem: encodePem('CERTIFICATE', der),
        der,
        serialHex: serial
          .subarray(2)
          .toString('hex')
          .replace(/^(00)+(?=.)/, ''),
        subject: plan.subject,
        altNames: plan.altNames,
        notBefore,
        notAfter,
      };
    },
  };
}

/**
 * Issues a certificate of `profileName` for `request` and the verified `identity`, signed by the
 * CA's active signer. Throws RequestRejectedError when the request does not fit the profile.
 */
export function issueCertificate(
  ca: CertificateAuthority,
  profileName: ProfileName,
  request: CertificateRequest,
  identity: VerifiedIdentity,
  options: IssueOptions = {},
): IssuedCertificate {
  const prepared = prepareIssuance(ca, profileName, request, identity, options);
  return prepared.finish(sign(ca.signer.scheme.hash, prepared.tbs, ca.signer.key));
}

/** {@link issueCertificate} with the signature made on the crypto pool's thread (see {@link signAsync}). */
export async function issueCertificateAsync(
  ca: CertificateAuthority,
  profileName: ProfileName,
  request: CertificateRequest,
  identity: VerifiedIdentity,
  options: IssueOptions = {},
): Promise<IssuedCertificate> {
  const prepared = prepareIssuance(ca, profileName, request, identity, options);
  return prepared.finish(await signAsync(ca.signer.scheme, prepared.tbs, ca.signer.key));
}
