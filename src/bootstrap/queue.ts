/**
 * The queue for requests a human must approve: the Kubernetes CSR API. A queued bootstrap request
 * becomes a CertificateSigningRequest with the signer {@link bootstrapSignerName}, so admins use
 * `kubectl certificate approve|deny` (or `kops-controller requests`) and the state survives any
 * restart of the controller: the CSR object is the pending request, and its name is the poll handle.
 *
 * - The name is derived from the kubelet key and the claimed node name, so a node that retries finds
 *   its own request again instead of piling up new ones.
 * - Because the key is public, anyone can compute that name and create a CSR under it first. A CSR
 *   found under the name is therefore reused only if it holds the same public key AND carries a seal
 *   that only the controller can make (HMAC keyed from the CA key) over its name, request and
 *   evidence; otherwise the request is refused. The signer checks the seal again before signing.
 * - The evidence (claimed name, remote address, proof kind, the facts to certify) sits in
 *   annotations, for the human who decides and for the signer that issues exactly those facts.
 * - What the admin is asked to approve is visible where they look: spec.request is the request that
 *   carries the names (the serving one, when asked for), so `kubectl describe csr` decodes its
 *   subject and every SAN, and the summary annotation spells out every certificate approving issues
 *   and what was verified. Nothing is queued that could not be issued: a request naming the API
 *   server or a wildcard, or not fitting its profile, is refused before a CSR exists.
 * - The queue is bounded: at most `maxPending` undecided requests in all and `maxPendingPerSource`
 *   from one source; beyond, a new request gets 429 with Retry-After. The signer expires undecided
 *   requests after a TTL (queue-signer.ts).
 * - Polls are answered from a watch of the CSRs. A name it does not hold is read from the API
 *   server under a small budget (a long-poll first gives another replica's create a moment to
 *   arrive through the watch): a watch may lag, so a current one's "not there" is confirmed while the
 *   budget lasts, and stands alone past it; a watch that is not current cannot answer, so past the
 *   budget the poll is the queue's own 429. Anyone can spend the budget, so past it a long-poll
 *   waits on the watch for the rest of its wait, and only then is the watch's "not there" its
 *   answer. Polls of made-up ids cost the API server at most the budget's reads. A name this
 *   replica has just created is read past the budget once a second at most: those reads are
 *   bounded by the queue's own creations, not by its requester's polls.
 */

import { createHash, createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import type { CertificatesV1Api, KubeConfig, V1CertificateSigningRequest } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { withDeadline } from '../deadline.ts';
import { ConflictError, describeError, ForbiddenError, NotFoundError, RateLimitedError } from '../errors.ts';
import { isJsonObject } from '../json-object.ts';
import { fromApiException } from '../kube/api-errors.ts';
import { csrCollectionPath } from '../kube/csr.ts';
import { Informer, kubeList, kubeWatch } from '../kube/informer.ts';
import { type KubeHttps, kubeAnswerError, kubeHttps, kubeJson } from '../kube/kube-https.ts';
import { type Logger, silentLogger } from '../log.ts';
import { SourceConnectionCounter } from '../net/hardened-server.ts';
import { sourceOf } from '../net/source.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import { type ParsedCsr, parseCsr } from '../pki/csr.ts';
import { encodePem } from '../pki/pem.ts';
import { type CertificatePlan, type ProfileName, profiles, subjectText } from '../pki/profiles.ts';
import { defaultReservedNames, type ReservedNames } from '../pki/reserved-names.ts';
import { type BucketLimit, TokenBucket } from '../runtime/token-bucket.ts';
import { planForFacts } from './issue.ts';
import { watchIsCurrent } from './node-guard.ts';
import { addressesAreVerified, nameIsVerified } from './policies/queue.ts';
import type { BootstrapRequest, NodeFacts } from './types.ts';

/** The signerName of queued bootstrap requests; only this controller signs for it. */
export const bootstrapSignerName = 'kops.k8s.io/node-bootstrap';

/** Annotation keys on queued CSRs. */
export const queueAnnotations = {
  claimedNode: 'bootstrap.kops.k8s.io/claimed-node-name',
  remoteAddress: 'bootstrap.kops.k8s.io/remote-address',
  proof: 'bootstrap.kops.k8s.io/proof',
  requestId: 'bootstrap.kops.k8s.io/request-id',
  /** JSON NodeFacts: exactly what will be certified once approved. */
  facts: 'bootstrap.kops.k8s.io/facts',
  /** JSON map of further profiles (e.g. kubelet-server) to their CSR PEM. */
  extraRequests: 'bootstrap.kops.k8s.io/extra-requests',
  seal: 'bootstrap.kops.k8s.io/seal',
  /** JSON map of further profiles to the certificate PEM the signer issued. */
  extraCertificates: 'bootstrap.kops.k8s.io/extra-certificates',
  /**
   * What approving issues, in words (`kubectl describe csr` shows it): every certificate with its
   * subject and names, and what was verified. Not sealed: a display, never read back.
   */
  summary: 'bootstrap.kops.k8s.io/summary',
  /**
   * JSON list of the reasons the deciding policy queued the request with (what is unverified, what
   * a human must check): the pending answer and the poll repeat them to the node, as the audit
   * record has them. Names and addresses only, nothing secret. Not sealed: only shown, never decides.
   */
  reasons: 'bootstrap.kops.k8s.io/reasons',
} as const;

/** How many requests may wait for a decision: in all, and from one source. */
export interface QueueLimits {
  maxPending: number;
  maxPendingPerSource: number;
}

/** Enough for a large batch of machines joining at once; a flood from one address stops at 10. */
export const defaultQueueLimits: QueueLimits = { maxPending: 1000, maxPendingPerSource: 10 };

/**
 * How long an undecided request waits before the signer expires it: longer than `join` waits by
 * default (1 h), so a node still waiting is not expired under it, and well before Kubernetes' CSR
 * cleaner deletes pending CSRs (24 h) without a trace in our audit trail. A request nobody waits for
 * any more is only a hazard: approved late, it certifies whoever holds its key.
 */
export const defaultPendingTtlMs = 2 * 3_600_000;

/**
 * The Retry-After of a full queue: a slot frees only when a human decides or a request expires, so
 * the node is asked to come back in a minute rather than in seconds.
 */
export const queueFullRetryAfterSeconds = 60;

/** How long the node's request waits for the API server to create its CSR (default). */
const defaultCreateTimeoutMs = 5_000;

/**
 * How long the node's request waits for the API server to read one CSR (default): a poll of a
 * request the cache does not hold, and a retry whose CSR exists (409). The same 5 s as the create.
 */
const defaultReadTimeoutMs = 5_000;

/**
 * How long after this replica created a CSR a poll of it is read past a current cache, at once and
 * whatever is left of the read budget (once a second at most): the create's answer may reach the node (and its poll come
 * back) before the watch delivers the CSR here.
 */
export const recentlyCreatedMs = 10_000;

/** Such a name is read outside the budget at most this often (the rest of its polls draw on it). */
const createdNameReadIntervalMs = 1_000;

/**
 * How long a long-poll of a name a current watch does not hold waits for the watch to deliver it
 * before reading it: another replica or worker created it and answered the node a moment before this
 * watch delivers it, and the watch usually does within this, at no read.
 */
export const absentPollGraceMs = 3_000;

/**
 * Long-polls of one source (an address, an IPv6 /64) that may wait on the watch past the read budget
 * at once. A node polls its one request; a made-up id parked for a whole wait holds a connection, so
 * past this a source's polls are answered as they were before parking existed (the watch's word) and
 * cannot fill the per-source connection cap (64) with polls alone.
 */
export const maxParkedPollsPerSource = 8;

/**
 * Reads of one CSR past the cache that polls may cause, in all (per process), names created here in
 * the last seconds aside: anyone's poll of a made-up id would otherwise be a read.
 */
export const defaultQueueReadBudget: BucketLimit = { burst: 20, perSecond: 2 };

/**
 * The reason of the 429 a poll gets when the read budget is spent and the watch is not current: the
 * queue's own limit, as its caps are, not the API server failing.
 */
export const readBudgetReason = 'queue-read-budget';

/**
 * How a lookup of a name the cache does not hold was answered: by a current watch alone (not found;
 * the read budget was spent), by a read of the API server, or refused because the read budget was
 * spent and the watch is not current.
 */
export type QueueMissSource = 'watch' | 'api' | 'refused';

/** What a look past the cache gives when no read is allowed: not an answer yet. */
const unread = Symbol('unread');

/** The reasons of the queue's own 429s: the overall cap, and the cap of one source. */
export const queueFullReasons = { overall: 'queue-full', source: 'source-queue-full' } as const;

/** The label that lets admins select the queued requests of one node. */
export const nodeLabel = 'bootstrap.kops.k8s.io/node';

/** Where a queued request stands. */
export type QueueState =
  | { state: 'pending'; name: string; nodeName: string; reasons: string[] }
  | {
      state: 'issued';
      name: string;
      nodeName: string;
      facts: NodeFacts;
      certificates: Partial<Record<ProfileName, string>>;
    }
  | { state: 'denied'; name: string; nodeName: string; reasons: string[] };

/** A queued CSR read back and checked: its seal verified, its requests parsed. */
export interface QueuedRequest {
  name: string;
  facts: NodeFacts;
  requests: Partial<Record<ProfileName, ParsedCsr>>;
  /** The profile whose request is spec.request, and whose certificate goes to status.certificate. */
  specProfile: ProfileName;
  object: V1CertificateSigningRequest;
}

/**
 * The profile whose CSR is spec.request: the serving request when there is one, since it carries
 * the names and `kubectl describe csr` decodes spec.request; else the kubelet client's.
 */
function specProfileOf(profileNames: readonly string[]): ProfileName {
  return profileNames.includes('kubelet-server') ? 'kubelet-server' : 'kubelet';
}

/**
 * The same choice read back from the sealed extra-requests: the one profile they do not hold. Extra
 * requests that hold the serving request (spec.request then being the client's) read back as `kubelet`.
 */
function specProfileOfExtra(extraProfiles: readonly string[]): ProfileName {
  return extraProfiles.includes('kubelet') ? 'kubelet-server' : 'kubelet';
}

/** The deterministic CSR name for a key and a claimed node name. */
export function queuedCsrName(spki: Buffer, claimedNodeName: string): string {
  const digest = createHash('sha256')
    .update(`${spki.toString('base64url')}|${claimedNodeName}|${bootstrapSignerName}`)
    .digest('hex');
  return `kops-bootstrap-${digest.slice(0, 40)}`;
}

/** The seal key: derived from the CA key, so every replica holding the CA can seal and check. */
export function sealKeyOf(ca: CertificateAuthority): Buffer {
  const material = ca.signer.key.export({ type: 'pkcs8', format: 'der' });
  return Buffer.from(hkdfSync('sha256', material, 'kops-controller', 'bootstrap queue seal v1', 32));
}

function sealOf(key: Buffer, name: string, request: string, facts: string, extra: string): string {
  return createHmac('sha256', key)
    .update(JSON.stringify([name, request, facts, extra]))
    .digest('base64url');
}

function conditionOf(csr: V1CertificateSigningRequest, type: string) {
  return csr.status?.conditions?.find((c) => c.type === type && c.status === 'True');
}

function annotationOf(csr: V1CertificateSigningRequest, key: string): string {
  return csr.metadata?.annotations?.[key] ?? '';
}

/** Whether the CSR was made by this controller and not altered since: its seal verifies. */
export function hasValidSeal(csr: V1CertificateSigningRequest, sealKey: Buffer): boolean {
  if (csr.spec?.signerName !== bootstrapSignerName) return false;
  const expected = Buffer.from(
    sealOf(
      sealKey,
      csr.metadata?.name ?? '',
      csr.spec.request ?? '',
      annotationOf(csr, queueAnnotations.facts),
      annotationOf(csr, queueAnnotations.extraRequests),
    ),
  );
  const actual = Buffer.from(annotationOf(csr, queueAnnotations.seal));
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

function parseJsonRecord(text: string, what: string): Record<string, unknown> {
  const value: unknown = JSON.parse(text || '{}');
  if (!isJsonObject(value)) {
    throw new ForbiddenError(`the ${what} annotation is not a JSON object`);
  }
  return value as Record<string, unknown>;
}

/**
 * Reads a queued CSR back: checks the seal (ForbiddenError if it was not made by this controller or
 * was altered) and re-parses every request, so the signer certifies exactly what was sealed.
 */
export function readQueuedRequest(csr: V1CertificateSigningRequest, sealKey: Buffer): QueuedRequest {
  const name = csr.metadata?.name ?? '';
  if (!hasValidSeal(csr, sealKey)) {
    throw new ForbiddenError(
      `certificate signing request ${name} was not created by kops-controller or was altered since (its seal does not verify)`,
    );
  }
  const facts = parseJsonRecord(annotationOf(csr, queueAnnotations.facts), 'facts') as unknown as NodeFacts;
  const { specProfile, requests } = requestsOf(csr);
  return { name, facts, requests, specProfile, object: csr };
}

/** Every request of a queued CSR, parsed (and so signature-checked), and which one spec.request is. */
function requestsOf(csr: V1CertificateSigningRequest): {
  specProfile: ProfileName;
  requests: Partial<Record<ProfileName, ParsedCsr>>;
} {
  const extra = parseJsonRecord(annotationOf(csr, queueAnnotations.extraRequests), 'extra-requests');
  const specProfile = specProfileOfExtra(Object.keys(extra));
  const requests: Partial<Record<ProfileName, ParsedCsr>> = {
    [specProfile]: parseCsr(Buffer.from(csr.spec?.request ?? '', 'base64')),
  };
  for (const [profile, pem] of Object.entries(extra))
    requests[profile as ProfileName] = parseCsr(String(pem));
  return { specProfile, requests };
}

function pemOfBase64(base64: string | undefined): string {
  return Buffer.from(base64 ?? '', 'base64').toString('utf8');
}

/** Where a queued CSR stands, as the poll answer reports it. */
export function stateOf(csr: V1CertificateSigningRequest, sealKey: Buffer): QueueState {
  const queued = readQueuedRequest(csr, sealKey);
  const base = { name: queued.name, nodeName: queued.facts.nodeName };
  const denied = conditionOf(csr, 'Denied') ?? conditionOf(csr, 'Failed');
  if (denied?.type === 'Failed' && denied.reason === expiredReason) {
    return { state: 'denied', ...base, reasons: [`expired: ${denied.message ?? 'not decided in time'}`] };
  }
  if (denied) {
    const reasons = [
      `${denied.type === 'Denied' ? 'denied' : 'signing failed'}: ${denied.reason ?? 'no reason given'}`,
    ];
    if (denied.message) reasons.push(denied.message);
    return { state: 'denied', ...base, reasons };
  }
  if (csr.status?.certificate) {
    const extra = parseJsonRecord(
      annotationOf(csr, queueAnnotations.extraCertificates),
      'extra-certificates',
    );
    return {
      state: 'issued',
      ...base,
      facts: queued.facts,
      certificates: {
        [queued.specProfile]: pemOfBase64(csr.status.certificate),
        ...(Object.fromEntries(Object.entries(extra).map(([k, v]) => [k, String(v)])) as Partial<
          Record<ProfileName, string>
        >),
      },
    };
  }
  const approved = conditionOf(csr, 'Approved');
  if (approved) return { state: 'pending', ...base, reasons: ['approved; the certificate is being signed'] };
  const queuedWith = queuedReasonsOf(csr);
  return {
    state: 'pending',
    ...base,
    // The audit record's reasons: the policy's, then the name an admin approves.
    reasons: queuedWith.length
      ? [...queuedWith, `queued as ${queued.name}`]
      : [`waiting for approval: kubectl certificate approve ${queued.name}`],
  };
}

/** The reasons the request was queued with (none for a CSR queued before they were recorded). */
function queuedReasonsOf(csr: V1CertificateSigningRequest): string[] {
  try {
    const value: unknown = JSON.parse(annotationOf(csr, queueAnnotations.reasons) || '[]');
    return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
  } catch {
    return [];
  }
}

/** The Failed reason with which the signer expires an undecided request. */
export const expiredReason = 'Expired';

/** One certificate approving a queued request issues, as people read it. */
export interface QueuedCertificate {
  profile: ProfileName;
  usage: 'client' | 'server';
  subject: string;
  dnsNames: string[];
  ipAddresses: string[];
}

function certificatesOfPlans(plans: Partial<Record<ProfileName, CertificatePlan>>): QueuedCertificate[] {
  return (Object.entries(plans) as [ProfileName, CertificatePlan][]).map(([profile, plan]) => ({
    profile,
    usage: profiles[profile].usage,
    subject: subjectText(plan.subject),
    dnsNames: [...plan.altNames.dnsNames],
    ipAddresses: [...plan.altNames.ipAddresses],
  }));
}

/** What the summary says: who asks, for which certificates, and what of it was verified. */
export interface QueuedSummary {
  nodeName: string;
  remoteAddress: string;
  proof: string;
  nameVerified: boolean;
  addressesVerified: boolean;
  certificates: readonly QueuedCertificate[];
}

/**
 * The summary as lines, one name per line so that no line is cut (kubectl shortens long annotation
 * lines): every certificate approving issues, every SAN, and plainly what is only claimed.
 */
export function summaryLines(summary: QueuedSummary): string[] {
  const lines = [
    `approving issues to ${summary.remoteAddress} (proof: ${summary.proof}):`,
    ...certificateLines(summary.certificates),
  ];
  lines.push(
    summary.nameVerified
      ? `node name ${summary.nodeName} was verified by the approval policy`
      : `node name ${summary.nodeName} is claimed by the requester, NOT verified`,
  );
  if (summary.certificates.some((c) => c.dnsNames.length || c.ipAddresses.length)) {
    lines.push(
      summary.addressesVerified
        ? 'the addresses were verified by the approval policy'
        : 'the addresses are requested by the requester, NOT verified',
    );
  }
  return lines;
}

/** Each certificate's profile, kind and subject, then each of its names on a line of its own. */
export function certificateLines(certificates: readonly QueuedCertificate[]): string[] {
  return certificates.flatMap((certificate) => {
    const names = [
      ...certificate.dnsNames.map((name) => `DNS ${name}`),
      ...certificate.ipAddresses.map((address) => `IP ${address}`),
    ];
    return [
      `${certificate.profile}: ${certificate.usage === 'client' ? 'client' : 'serving'} certificate ${certificate.subject}`,
      ...(names.length ? names : ['no subjectAltName']).map((name) => `  ${name}`),
    ];
  });
}

/** The usages of the certificates a request yields, for spec.usages. */
function usagesOf(profileNames: readonly ProfileName[]): string[] {
  const kinds = new Set(profileNames.map((profile) => profiles[profile].usage));
  const usages = ['digital signature', 'key encipherment'];
  if (kinds.has('client')) usages.push('client auth');
  if (kinds.has('server')) usages.push('server auth');
  return usages;
}

/**
 * Builds the CSR object for a queued request (the request carrying the names in the spec, the rest
 * sealed in annotations). Everything is checked first, as the signer will check it: no name of the
 * API server or wildcard (RequestRejectedError `reserved-name`), and every request fits its profile
 * and the facts; so nothing is queued that an approval could not issue.
 */
export function queuedCsrObject(
  request: BootstrapRequest,
  facts: NodeFacts,
  sealKey: Buffer,
  reserved: ReservedNames = defaultReservedNames,
): V1CertificateSigningRequest {
  const kubelet = request.certificates.kubelet;
  if (kubelet?.kind !== 'csr') {
    throw new ForbiddenError('only requests with a kubelet certificate signing request can be queued');
  }
  const csrs = Object.fromEntries(
    Object.entries(request.certificates).filter(([, csr]) => csr?.kind === 'csr'),
  ) as Partial<Record<ProfileName, ParsedCsr>>;
  const plans = planForFacts(csrs, facts, reserved);
  const profileNames = Object.keys(csrs) as ProfileName[];
  const specProfile = specProfileOf(profileNames);
  const name = queuedCsrName(kubelet.spki, request.claimedNodeName ?? facts.nodeName);
  const pemOf = (profile: ProfileName) => encodePem('CERTIFICATE REQUEST', (csrs[profile] as ParsedCsr).der);
  const spec = Buffer.from(pemOf(specProfile)).toString('base64');
  const extraRequests = JSON.stringify(
    Object.fromEntries(profileNames.filter((p) => p !== specProfile).map((p) => [p, pemOf(p)])),
  );
  const factsJson = JSON.stringify(facts);
  const summary = summaryLines({
    nodeName: facts.nodeName,
    remoteAddress: request.remoteAddress,
    proof: request.proof.kind,
    nameVerified: nameIsVerified(facts),
    addressesVerified: addressesAreVerified(facts),
    certificates: certificatesOfPlans(plans),
  });
  return {
    apiVersion: 'certificates.k8s.io/v1',
    kind: 'CertificateSigningRequest',
    metadata: {
      name,
      labels: /^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$/.test(facts.nodeName)
        ? { [nodeLabel]: facts.nodeName }
        : {},
      annotations: {
        [queueAnnotations.claimedNode]: request.claimedNodeName ?? '',
        [queueAnnotations.remoteAddress]: request.remoteAddress,
        [queueAnnotations.proof]: request.proof.kind,
        [queueAnnotations.requestId]: request.id,
        [queueAnnotations.facts]: factsJson,
        [queueAnnotations.extraRequests]: extraRequests,
        [queueAnnotations.seal]: sealOf(sealKey, name, spec, factsJson, extraRequests),
        [queueAnnotations.summary]: summary.join('\n'),
      },
    },
    spec: { request: spec, signerName: bootstrapSignerName, usages: usagesOf(profileNames) },
  };
}

/** A queued CSR as people read it, for `requests list|show`. */
export interface QueuedCsrView extends QueuedSummary {
  name: string;
  claimedNode: string;
  instanceGroup: string;
  evidence: Record<string, string>;
  /** Who created the CSR, as the API server recorded it (spec.username: no requester can set it). */
  createdBy: string;
  createdByGroups: string[];
  /** Why the certificates could not be worked out; those listed are then the raw requests. */
  problem?: string;
}

function factsAnnotationOf(csr: V1CertificateSigningRequest): Partial<NodeFacts> {
  try {
    return parseJsonRecord(annotationOf(csr, queueAnnotations.facts), 'facts') as Partial<NodeFacts>;
  } catch {
    return {};
  }
}

function stringRecord(value: unknown): Record<string, string> {
  if (!isJsonObject(value)) return {};
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, String(v)]));
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.map(String) : [];
}

/**
 * Nothing reserved: a view shows every name a certificate would carry, reserved or not; refusing
 * them is the server's and the signer's part, with the cluster's own reserved set.
 */
const showEveryName: ReservedNames = { dnsNames: new Set(), ipAddresses: new Set() };

/**
 * What a queued CSR asks for, worked out as the signer would (the same planning against its facts),
 * but WITHOUT the seal, which only the controller can check: so the view names who created the CSR,
 * and `nameVerified` is true only on the controller's own verified mark. When the requests do not
 * parse or plan (a forged or altered object), the raw requested subjects and names are listed with
 * the problem.
 */
export function viewOfQueuedCsr(csr: V1CertificateSigningRequest): QueuedCsrView {
  const facts = factsAnnotationOf(csr);
  const nodeName = typeof facts.nodeName === 'string' ? facts.nodeName : '';
  const evidence = stringRecord(facts.evidence);
  let certificates: QueuedCertificate[] = [];
  let problem: string | undefined;
  let requests: Partial<Record<ProfileName, ParsedCsr>> = {};
  try {
    requests = requestsOf(csr).requests;
    const plans = planForFacts(
      requests,
      { nodeName, dnsNames: strings(facts.dnsNames), ipAddresses: strings(facts.ipAddresses), evidence },
      showEveryName,
    );
    certificates = certificatesOfPlans(plans);
  } catch (err) {
    problem = describeError(err);
    certificates = (Object.entries(requests) as [ProfileName, ParsedCsr][]).map(([profile, parsed]) => ({
      profile,
      usage: profiles[profile]?.usage ?? 'client',
      subject: parsed.subject.text,
      dnsNames: parsed.extensions.subjectAltName?.dnsNames ?? [],
      ipAddresses: parsed.extensions.subjectAltName?.ipAddresses ?? [],
    }));
  }
  return {
    name: csr.metadata?.name ?? '',
    nodeName,
    claimedNode: annotationOf(csr, queueAnnotations.claimedNode),
    remoteAddress: annotationOf(csr, queueAnnotations.remoteAddress),
    proof: annotationOf(csr, queueAnnotations.proof),
    instanceGroup: typeof facts.instanceGroup === 'string' ? facts.instanceGroup : '',
    evidence,
    nameVerified: nameIsVerified({ evidence }),
    addressesVerified: addressesAreVerified({ evidence }),
    certificates,
    createdBy: csr.spec?.username ?? '',
    createdByGroups: csr.spec?.groups ?? [],
    ...(problem === undefined ? {} : { problem }),
  };
}

/** Options of a {@link CsrQueue}. */
export interface CsrQueueOptions {
  certificates: CertificatesV1Api;
  /** For the informer that serves polls from a cache. */
  kubeConfig: KubeConfig;
  ca: CertificateAuthority;
  /** The caps on undecided requests (default {@link defaultQueueLimits}). */
  limits?: Partial<QueueLimits>;
  /** The names no queued request may ask for (default: defaultReservedNames). */
  reserved?: ReservedNames;
  /** How long a submission waits for the API server to create its CSR (default 5 s). */
  createTimeoutMs?: number;
  /**
   * How long a read of one CSR past the cache may take (default 5 s): a poll of a request the cache
   * does not hold, a retry whose CSR exists. Past it the node is told to retry (503).
   */
  readTimeoutMs?: number;
  /** Queue depth (pending requests) is reported here, when given. */
  onDepth?: (pending: number) => void;
  /** Each lookup of a name the cache does not hold is reported here, by how it was answered. */
  onMiss?: (source: QueueMissSource) => void;
  /** The reads past the cache that lookups may make (default {@link defaultQueueReadBudget}). */
  readBudget?: BucketLimit;
  /** Monotonic milliseconds, for the read budget and what was created recently (tests move it). */
  now?: () => number;
  registry?: Registry;
  logger?: Logger;
}

/** Whether a CSR waits for a decision: not approved, denied or failed, and not signed. */
export function isUndecided(csr: V1CertificateSigningRequest): boolean {
  return !csr.status?.conditions?.length && !csr.status?.certificate;
}

/** The informer over the CSRs of {@link bootstrapSignerName}, shared by the queue and the signer. */
export function bootstrapCsrInformer(
  kubeConfig: KubeConfig,
  options: { logger?: Logger; registry?: Registry } = {},
): Informer<V1CertificateSigningRequest> {
  const fieldSelector = `spec.signerName=${bootstrapSignerName}`;
  return new Informer<V1CertificateSigningRequest>({
    name: 'bootstrap-csrs',
    path: csrCollectionPath,
    kind: 'CertificateSigningRequest',
    list: kubeList(kubeConfig, csrCollectionPath),
    watch: kubeWatch(kubeConfig),
    fieldSelector,
    logger: options.logger,
    registry: options.registry,
  });
}

/** The server's side of the queue: submit, look up, and long-poll queued requests. */
export class CsrQueue {
  readonly #options: CsrQueueOptions;
  readonly #sealKey: Buffer;
  readonly #informer: Informer<V1CertificateSigningRequest>;
  readonly #waiters = new Map<string, Set<() => void>>();
  /** Long-polls parked past the read budget, by source ({@link maxParkedPollsPerSource}). */
  readonly #parked = new SourceConnectionCounter({
    maxConnections: Number.POSITIVE_INFINITY,
    maxConnectionsPerSource: maxParkedPollsPerSource,
  });
  /** The undecided requests this controller sealed, by name, with the source each counts against. */
  readonly #pending = new Map<string, string>();
  readonly #pendingBySource = new Map<string, number>();
  readonly #limits: QueueLimits;
  readonly #reserved: ReservedNames;
  readonly #logger: Logger;
  /** CSR reads past the cache, over the pooled API client, with their deadline. */
  readonly #reads: KubeHttps;
  /** What lookups may read past the cache. */
  readonly #readBudget: TokenBucket;
  readonly #now: () => number;
  /**
   * Names this queue created, with when, for {@link recentlyCreatedMs}, and when one was last read
   * outside the budget; oldest first.
   */
  readonly #created = new Map<string, { at: number; readAt?: number }>();

  constructor(options: CsrQueueOptions) {
    this.#options = options;
    this.#reads = kubeHttps(options.kubeConfig, { timeoutMs: options.readTimeoutMs ?? defaultReadTimeoutMs });
    this.#sealKey = sealKeyOf(options.ca);
    this.#now = options.now ?? (() => performance.now());
    this.#readBudget = new TokenBucket(options.readBudget ?? defaultQueueReadBudget, this.#now());
    this.#limits = { ...defaultQueueLimits, ...options.limits };
    this.#reserved = options.reserved ?? defaultReservedNames;
    this.#logger = options.logger ?? silentLogger;
    this.#informer = bootstrapCsrInformer(options.kubeConfig, {
      logger: this.#logger,
      registry: options.registry,
    });
    const changed = (csr: V1CertificateSigningRequest, deleted = false) => {
      const name = csr.metadata?.name ?? '';
      this.#observe(name, deleted ? undefined : csr);
      this.#wake(name);
    };
    this.#informer.addHandlers({
      add: (csr) => changed(csr),
      update: (_old, csr) => changed(csr),
      delete: (csr) => changed(csr, true),
    });
  }

  /**
   * Counts `csr` as pending or not. Kept per event, so the depth and the caps cost O(1) per change
   * even with thousands queued. Only requests this controller sealed count: CSRs that anyone with
   * CSR rights can create under our signer cannot fill the queue or a victim's share of it.
   */
  #observe(name: string, csr: V1CertificateSigningRequest | undefined): void {
    const pending = csr && isUndecided(csr) && hasValidSeal(csr, this.#sealKey);
    this.#count(name, pending ? sourceOf(annotationOf(csr, queueAnnotations.remoteAddress)) : undefined);
  }

  /** Records `name` as pending from `source`, or (undefined) as not pending. */
  #count(name: string, source: string | undefined): void {
    const before = this.#pending.get(name);
    if (before === source) return;
    if (before !== undefined) {
      const left = (this.#pendingBySource.get(before) ?? 1) - 1;
      if (left > 0) this.#pendingBySource.set(before, left);
      else this.#pendingBySource.delete(before);
      this.#pending.delete(name);
    }
    if (source !== undefined) {
      this.#pending.set(name, source);
      this.#pendingBySource.set(source, (this.#pendingBySource.get(source) ?? 0) + 1);
    }
    this.#options.onDepth?.(this.#pending.size);
  }

  /** Refuses a new request beyond the caps: 429 with Retry-After, the reason saying which cap. */
  #admit(source: string): void {
    const retryAfterSeconds = queueFullRetryAfterSeconds;
    const { maxPending, maxPendingPerSource } = this.#limits;
    if (this.#pending.size >= maxPending) {
      throw new RateLimitedError(
        `${this.#pending.size} bootstrap requests already wait for approval, the most the queue holds ` +
          `(bootstrap.queue.maxPending); retry in ${retryAfterSeconds} s`,
        { reason: queueFullReasons.overall, retryAfterSeconds },
      );
    }
    const fromSource = this.#pendingBySource.get(source) ?? 0;
    if (fromSource >= maxPendingPerSource) {
      throw new RateLimitedError(
        `${fromSource} bootstrap requests from ${source} already wait for approval, the most one source may ` +
          `have waiting (bootstrap.queue.maxPendingPerSource); retry in ${retryAfterSeconds} s`,
        { reason: queueFullReasons.source, retryAfterSeconds },
      );
    }
  }

  /** Starts the informer. */
  start(): void {
    this.#informer.start();
  }

  /** Whether the informer has listed once (a readiness condition). */
  hasSynced(): boolean {
    return this.#informer.hasSynced();
  }

  /**
   * Whether the CSR watch is current, so that a name it does not hold may be answered as not found:
   * the impersonation guard's rule for the Node watch (synced, a stream open and heard from lately).
   */
  isCurrent(): boolean {
    const informer = this.#informer;
    return watchIsCurrent({
      hasSynced: () => informer.hasSynced(),
      watchSilenceMs: () => informer.watchSilenceMs(),
      get: () => undefined,
    });
  }

  /** Stops the informer and releases every long-poll. */
  async stop(): Promise<void> {
    await this.#informer.stop();
    for (const name of [...this.#waiters.keys()]) this.#wake(name);
  }

  /** How many queued requests wait for a decision. */
  pendingCount(): number {
    return this.#pending.size;
  }

  /**
   * Queues a request for a human, or finds the same request queued earlier (a retry). A CSR under the
   * deterministic name that holds another key, or that this controller did not seal, is refused.
   * `reasons` are the deciding policy's, kept on the CSR for the pending answers and the poll.
   */
  async submit(
    request: BootstrapRequest,
    facts: NodeFacts,
    reasons: readonly string[] = [],
  ): Promise<QueueState> {
    const object = queuedCsrObject(request, facts, this.#sealKey, this.#reserved);
    const name = object.metadata?.name as string;
    if (reasons.length)
      (object.metadata?.annotations ?? {})[queueAnnotations.reasons] = JSON.stringify(reasons);
    // A retry of a request already waiting takes no new slot; a new one is counted before it is
    // created, so that concurrent submissions cannot all pass the caps.
    const retry = this.#pending.has(name);
    if (!retry) {
      const source = sourceOf(request.remoteAddress);
      this.#admit(source);
      this.#count(name, source);
    }
    try {
      // A create that times out may still have been written: the node's retry finds it as a conflict.
      await withDeadline(
        this.#options.certificates.createCertificateSigningRequest({ body: object }),
        this.#options.createTimeoutMs ?? defaultCreateTimeoutMs,
        `create certificate signing request ${name}`,
      );
      this.#createdNow(name);
      this.#logger.info({ csr: name, node: facts.nodeName }, 'request queued for approval');
      return stateOf(object, this.#sealKey);
    } catch (err) {
      const error = fromApiException(err, `create certificate signing request ${name}`);
      if (error.kind !== 'conflict') {
        if (!retry) this.#count(name, undefined);
        throw error;
      }
    }
    const existing = await this.#read(name);
    this.#observe(name, existing);
    if (!existing)
      throw new ConflictError(`certificate signing request ${name} vanished while being created; retry`);
    // Found by its create here: the node's next poll may come before the watch delivers it.
    this.#createdNow(name);
    // spec.request may be the serving request: compare the kubelet client key the seal covers.
    const existingKey = this.#kubeletKeyOf(existing);
    const ourKey = request.certificates.kubelet?.spki as Buffer;
    if (!existingKey?.equals(ourKey)) {
      throw new ConflictError(
        `a certificate signing request named ${name} already exists but holds another public key or was not created by kops-controller; ` +
          `an admin must inspect it (kubectl get csr ${name} -o yaml) and delete it`,
        { reason: 'csr-name-taken' },
      );
    }
    return stateOf(existing, this.#sealKey);
  }

  /**
   * The CSR called `name` as the API server has it now, or undefined once it is deleted: read past
   * the cache, with a deadline (TimeoutError past it; UnavailableError, RateLimitedError… for a
   * failed read), so an API server that never answers holds no node's request for longer.
   */
  async #read(name: string): Promise<V1CertificateSigningRequest | undefined> {
    const action = `read certificate signing request ${name}`;
    const path = `/apis/certificates.k8s.io/v1/certificatesigningrequests/${encodeURIComponent(name)}`;
    const answer = await this.#reads({ action, method: 'GET', path });
    if (answer.status === 404) return undefined;
    if (answer.status !== 200) throw kubeAnswerError(answer, action);
    return kubeJson<V1CertificateSigningRequest>(answer, action);
  }

  /** Remembers that this queue created `name` now, and forgets what was created long enough ago. */
  #createdNow(name: string): void {
    const now = this.#now();
    this.#created.delete(name);
    this.#created.set(name, { at: now });
    for (const [old, { at }] of this.#created) {
      if (now - at <= recentlyCreatedMs) break;
      this.#created.delete(old);
    }
  }

  #createdRecently(name: string): boolean {
    const created = this.#created.get(name);
    return created !== undefined && this.#now() - created.at <= recentlyCreatedMs;
  }

  /**
   * Whether a name created here moments ago may be read now outside the budget: once a second at
   * most, so that its reads are bounded by the queue's creations, not by how often its requester
   * (who knows its name) polls it.
   */
  #takeCreatedRead(name: string, now: number): boolean {
    const created = this.#created.get(name);
    if (!created || now - created.at > recentlyCreatedMs) return false;
    if (created.readAt !== undefined && now - created.readAt < createdNameReadIntervalMs) return false;
    created.readAt = now;
    return true;
  }

  /**
   * Whether a long-poll of `name` should first wait for the watch: absent from a current one, and not
   * created here moments ago (that name is read at once, the node having been answered already).
   */
  #absentFromCurrentWatch(name: string): boolean {
    return !this.#informer.get(name) && !this.#createdRecently(name) && this.isCurrent();
  }

  /**
   * The CSR called `name`: from the cache; for a name it does not hold, read (a name this queue
   * created moments ago, once a second; any other, if the read budget allows); {@link unread} when no
   * read is allowed, the watch's word being all there is.
   */
  async #look(name: string): Promise<V1CertificateSigningRequest | undefined | typeof unread> {
    const cached = this.#informer.get(name);
    if (cached) return cached;
    const now = this.#now();
    if (!this.#takeCreatedRead(name, now) && !this.#readBudget.tryTake(now)) return unread;
    this.#options.onMiss?.('api');
    return this.#read(name);
  }

  /**
   * Whether a current watch's "not there" may answer for `name`: never for a name created here
   * moments ago, which it may not have delivered yet.
   */
  #watchAnswers(name: string): boolean {
    return this.isCurrent() && !this.#createdRecently(name);
  }

  /**
   * The answer for a name no read may look up: not found (undefined) when the watch may answer and
   * `byWatch` allows it; otherwise RateLimitedError with Retry-After, the queue's own limit.
   */
  #unreadAnswer(name: string, byWatch: boolean): undefined {
    if (byWatch && this.#watchAnswers(name)) {
      this.#options.onMiss?.('watch');
      return undefined;
    }
    this.#options.onMiss?.('refused');
    const retryAfterSeconds = Math.max(1, Math.ceil(this.#readBudget.msUntilToken(this.#now()) / 1000));
    throw new RateLimitedError(
      `too many reads of bootstrap requests the CSR watch does not hold; retry in ${retryAfterSeconds} s`,
      { reason: readBudgetReason, retryAfterSeconds },
    );
  }

  /**
   * The CSR called `name`, as {@link CsrQueue.#look} finds it; past the budget, undefined when the
   * watch may answer, whose answer it is; otherwise RateLimitedError with Retry-After.
   */
  async #find(name: string): Promise<V1CertificateSigningRequest | undefined> {
    const found = await this.#look(name);
    return found === unread ? this.#unreadAnswer(name, true) : found;
  }

  /** Where `csr` (found under `name`) stands; NotFoundError when there is none, or it is not ours. */
  #stateOfFound(name: string, csr: V1CertificateSigningRequest | undefined): QueueState {
    if (!csr || !hasValidSeal(csr, this.#sealKey)) {
      throw new NotFoundError(`no pending bootstrap request ${name}; it was never made, or was deleted`, {
        reason: 'unknown-request',
      });
    }
    return stateOf(csr, this.#sealKey);
  }

  /**
   * Where the queued request `name` stands; NotFoundError for unknown names and foreign CSRs,
   * RateLimitedError when it would need a read past the cache, the read budget is spent and the
   * watch is not current.
   */
  async lookup(name: string): Promise<QueueState> {
    return this.#stateOfFound(name, await this.#find(name));
  }

  /**
   * Waits up to `waitMs` for `name` to be issued or denied (an approval alone is still pending: the
   * signer has yet to sign); resolves with the state then. A name a current watch does not hold is
   * waited for up to {@link absentPollGraceMs} (within `waitMs`) before it is read; when no read is
   * allowed, for the rest of `waitMs`, and only then does the watch's "not there" answer.
   */
  async wait(name: string, waitMs: number, signal?: AbortSignal, source?: string): Promise<QueueState> {
    // Monotonic: a step of the wall clock must neither hold the poll nor end it at once.
    const deadline = performance.now() + waitMs;
    let graced = false;
    // Waited on the watch for the rest of the wait, no read being allowed: once at most.
    let parked = false;
    // Found once: a "not there" after that is the watch's delete, which answers at once.
    let found = false;
    // Gives this poll's place among its source's parked polls back.
    let unpark = () => {};
    for (;;) {
      // Subscribed before each look, so a change arriving in between is not missed.
      let wake = () => {};
      const woken = new Promise<void>((resolve) => {
        wake = resolve;
      });
      // The poll's own end (its wait is up, or it was given up), as opposed to a change of `name`.
      let ended = false;
      const end = () => {
        ended = true;
        wake();
      };
      const waiters = this.#waiters.get(name) ?? new Set();
      this.#waiters.set(name, waiters);
      waiters.add(wake);
      let timer: NodeJS.Timeout | undefined;
      try {
        const left = deadline - performance.now();
        if (!graced && left > 0 && !signal?.aborted && this.#absentFromCurrentWatch(name)) {
          // Created elsewhere a moment ago, or never: its ADDED wakes us, and no read is needed.
          graced = true;
          signal?.addEventListener('abort', end, { once: true });
          timer = setTimeout(end, Math.min(absentPollGraceMs, left));
          await woken;
          continue;
        }
        const looked = await this.#look(name);
        const rest = deadline - performance.now();
        if (
          looked === unread &&
          !found &&
          !parked &&
          rest > 0 &&
          !signal?.aborted &&
          this.#watchAnswers(name) &&
          (source === undefined || this.#parked.admit(source) === 'admitted')
        ) {
          // Anyone can keep the budget spent with made-up ids: were the watch's "not there" the answer
          // now, a stranger would decide that a request the watch has yet to deliver (created on
          // another replica, this watch lagging) is unknown. Its ADDED still wakes us; a made-up id
          // costs a parked poll, which the connection caps bound, and no read.
          parked = true;
          if (source !== undefined) unpark = () => this.#parked.release(source);
          signal?.addEventListener('abort', end, { once: true });
          timer = setTimeout(end, rest);
          await woken;
          continue;
        }
        // Released before its wait is up (the client gone, the server closing), a poll is told to come
        // back rather than that the name is unknown: that is for the end of its wait.
        const state = this.#stateOfFound(
          name,
          looked === unread ? this.#unreadAnswer(name, rest <= 0 || !signal?.aborted) : looked,
        );
        found = true;
        if (state.state !== 'pending' || rest <= 0 || signal?.aborted) return state;
        signal?.addEventListener('abort', end, { once: true });
        timer = setTimeout(end, rest);
        await woken;
        // Nothing has changed `name` since that look: another would only repeat it, or read the
        // API server again for a name a lagging watch still lacks.
        if (ended) return state;
      } finally {
        unpark();
        unpark = () => {};
        clearTimeout(timer);
        signal?.removeEventListener('abort', end);
        waiters.delete(wake);
        if (waiters.size === 0) this.#waiters.delete(name);
      }
    }
  }

  #wake(name: string): void {
    for (const done of [...(this.#waiters.get(name) ?? [])]) done();
  }

  /** The kubelet client key of a CSR this controller sealed; undefined for any other CSR. */
  #kubeletKeyOf(csr: V1CertificateSigningRequest): Buffer | undefined {
    if (!hasValidSeal(csr, this.#sealKey)) return undefined;
    try {
      return readQueuedRequest(csr, this.#sealKey).requests.kubelet?.spki;
    } catch {
      return undefined;
    }
  }
}
