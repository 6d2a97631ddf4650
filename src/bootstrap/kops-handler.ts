/**
 * kops compatibility: `POST /bootstrap` answers nodeup's `bootstrap.kops.k8s.io/v1alpha1` requests in
 * the order nodeup relies on: the identity proof is verified by the policy chain BEFORE the body is
 * parsed as JSON, so an unproven caller never gets its JSON read; a Ready Node of the verified name
 * gets 409 (nodeup then exits quietly); when the deciding policy names a callback-challenge endpoint
 * (the callback clouds), the node must answer the challenge its body carries there before anything
 * else is read or issued (kops' 400 "callback failed" otherwise); each requested key is checked against `certNames` and the
 * CA keypair ids; answers use kops' shapes (`Certs`, capital C) and its short plain-text errors, with
 * the details in the log and the audit trail only. A dependency that fails on the way (a policy's
 * cloud or apiserver call, the Node read, the state store) is a 503 with Retry-After, never a 403 or
 * a 500: nodeup retries, and the request is decided once the dependency answers. A request the
 * profiles refuse is kops' 400; the server failing while it signs is not the node's fault: a 503 with
 * Retry-After when it cannot sign now (the crypto threads unavailable), else a 500.
 *
 * A renewal (`x-kops-renewal`) is bounded by the certificate it presents (policies/renewal.ts,
 * `renewalScope`): a name that is not the node's own certificate (kube-proxy, kube-router,
 * etcd-client-cilium), or a serving certificate without verified addresses, is refused (403) before
 * anything is issued; what it is issued is valid no longer than the presented certificate was —
 * kops' 455 days for a kops node's certificate, never 455 days for a short one.
 */
import { describeError, InvalidInputError, KopsError, type UnavailableError } from '../errors.ts';
import { isJsonObject } from '../json-object.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import { RequestRejectedError } from '../pki/csr.ts';
import { decodePem } from '../pki/pem.ts';
import {
  absoluteLifetimeBounds,
  type CertificateRequest,
  type IssuedCertificate,
  type ProfileName,
  planCertificate,
  publicKeyRequest,
  validateDnsName,
} from '../pki/profiles.ts';
import { parseChallengeField } from '../protocol/challenge.ts';
import { parseAuthorization } from './authorization.ts';
import { evaluateChain } from './chain.ts';
import type { CallbackChallenger } from './challenge-caller.ts';
import { callbackVerdict } from './challenge-step.ts';
import {
  auditDetailOf,
  type BootstrapContext,
  newRequestId,
  pausedGuardFault,
  report,
  reportFault,
} from './context.ts';
import {
  defaultRetryAfterSeconds,
  dependencyFault,
  isDependencyFault,
  isTransientFailure,
  policyOf,
} from './dependency.ts';
import { retryAfterOf } from './http.ts';
import { identityOf, issueForFacts, type NodeIssueOptions, pemsOf, serialsOf } from './issue.ts';
import type { Answer, CertificatesInput } from './native-handler.ts';
import { assertNodeNotRegistered } from './node-guard.ts';
import { renewalScope } from './policies/renewal.ts';
import type { AuditRecord, BootstrapRequest, NodeFacts } from './types.ts';

/** The apiVersion of nodeup's bootstrap requests. */
export const kopsApiVersion = 'bootstrap.kops.k8s.io/v1alpha1';

/** The cert names kops generates by default (`certNames` in the kops-controller config). */
export const defaultKopsCertNames = ['kubelet', 'kubelet-server', 'kube-proxy'];

/** kops cert names this implementation can issue, with the profile and the signing CA (keyset) of each. */
const certNameSpecs: Record<string, { profile: ProfileName; signer: string }> = {
  kubelet: { profile: 'kubelet', signer: 'kubernetes-ca' },
  'kubelet-server': { profile: 'kubelet-server', signer: 'kubernetes-ca' },
  'kube-proxy': { profile: 'kube-proxy', signer: 'kubernetes-ca' },
  'kube-router': { profile: 'kube-router', signer: 'kubernetes-ca' },
  'etcd-client-cilium': { profile: 'etcd-client-cilium', signer: 'etcd-clients-ca-cilium' },
};

/** The node configuration nodeup asks for with `includeNodeConfig`. */
export interface KopsNodeConfig {
  nodeupConfig: string;
  nodeSecrets?: Record<string, string>;
}

/** kops-specific settings of the handler. */
export interface KopsOptions {
  /** Cert names nodes may ask for (`server.certNames`). */
  certNames: readonly string[];
  /**
   * The other CAs of `server.signingCAs`, found by name (e.g. `etcd-clients-ca-cilium`); the
   * context's CA signs the `kubernetes-ca` certificates. A cert name whose CA is absent is refused.
   */
  otherSigners?: readonly CertificateAuthority[];
  /** Reads the nodeup config of an instance group; without it, `includeNodeConfig` is refused. */
  nodeConfig?: (instanceGroup: string) => Promise<KopsNodeConfig>;
  /**
   * Reads the secrets kops gives nodes with their config (`dockerconfig` from `secretStore`; id to
   * base64, src/statestore/secrets.ts); without it the answer carries none.
   */
  nodeSecrets?: () => Promise<Record<string, string>>;
  /** Calls back into nodes whose policy sets `challengeEndpoint`; without it such requests are refused. */
  challenger?: CallbackChallenger;
}

function text(status: number, message: string): Answer {
  return { status, body: `${message}\n` };
}

/** One requested key, checked: its profile, the CA that signs it and the certificate request. */
interface KopsCertificate {
  name: string;
  profile: ProfileName;
  ca: CertificateAuthority;
  request: CertificateRequest;
}

/** Checks one requested key and turns it into a certificate request; throws with kops' wording. */
function certificateRequestOf(
  name: string,
  pem: unknown,
  options: KopsOptions,
  keypairIds: Record<string, unknown>,
  context: BootstrapContext,
): KopsCertificate {
  if (typeof pem !== 'string') throw new InvalidInputError('the public key must be a PEM string');
  const [spki] = decodePem(pem, 'RSA PUBLIC KEY', 'public key');
  if (!options.certNames.includes(name)) throw new InvalidInputError('key name not enabled');
  const spec = Object.hasOwn(certNameSpecs, name) ? certNameSpecs[name] : undefined;
  if (!spec) throw new InvalidInputError('unexpected key name');
  const ca =
    spec.signer === 'kubernetes-ca'
      ? context.ca
      : options.otherSigners?.find((other) => other.name === spec.signer);
  if (!ca) throw new InvalidInputError(`no signing CA ${spec.signer} (add it to server.signingCAs)`);
  const wanted = keypairIds[ca.name];
  const ours = ca.signer.certificate.keypairId;
  if (Object.keys(keypairIds).length > 0 && wanted !== ours) {
    throw new InvalidInputError(
      `request's keypair ID ${JSON.stringify(wanted ?? '')} for ${ca.name} didn't match issuer's "${ours}"`,
    );
  }
  return { name, profile: spec.profile, ca, request: publicKeyRequest(spki as Buffer) };
}

/** Issues each CA's share of the requested certificates for the verified facts. */
async function issueBySigner(
  wanted: readonly KopsCertificate[],
  facts: NodeFacts,
  options: NodeIssueOptions,
): Promise<Partial<Record<ProfileName, IssuedCertificate>>> {
  const byCa = new Map<CertificateAuthority, Partial<Record<ProfileName, CertificateRequest>>>();
  for (const { profile, ca, request } of wanted) byCa.set(ca, { ...byCa.get(ca), [profile]: request });
  // Every request is checked against its profile before anything is signed, as issueForFacts does.
  for (const { profile, request } of wanted) planCertificate(profile, request, identityOf(facts));
  const issued = await Promise.all(
    [...byCa].map(([ca, requests]) => issueForFacts(ca, requests, facts, options)),
  );
  return Object.assign({}, ...issued);
}

/**
 * The request `/bootstrap` judges: a kops nodeup body is judged on its proof alone, before the body
 * is parsed, so it names no certificates yet.
 */
export function kopsProofRequest(input: CertificatesInput): BootstrapRequest {
  return {
    id: newRequestId(),
    body: input.body,
    certificates: {},
    proof: parseAuthorization(input.authorization),
    remoteAddress: input.remoteAddress,
    receivedAt: input.receivedAt,
  };
}

/** The audit fields a denial, a fault or an issue adds once the policy chain has verified the facts. */
type FactsAudit = Pick<AuditRecord, 'nodeName' | 'instanceGroup' | 'evidence'>;

function factsAuditOf(facts: NodeFacts): FactsAudit {
  return { nodeName: facts.nodeName, instanceGroup: facts.instanceGroup, evidence: facts.evidence };
}

/** What a step adds to an audit record; the trail fills in the request's own fields. */
type StepRecord = Omit<AuditRecord, 'time' | 'requestId' | 'remoteAddress' | 'proof'>;

/** Where one request's decisions and faults are recorded, stamped with its id, address and proof. */
interface Trail {
  audit(record: StepRecord): void;
  /** A dependency fault: audited and counted; nodeup is answered 503 with when to ask again. */
  unavailable(fault: UnavailableError, record: Omit<StepRecord, 'verdict' | 'reasons'>): Answer;
  /**
   * The server itself failed, not the request: audited `error` with the cause; 503 with when to ask
   * again when the failure is transient (the crypto threads unavailable), else kops' 500.
   */
  serverFault(err: unknown, record: Omit<StepRecord, 'verdict' | 'reasons'>): Answer;
}

/** The body nodeup sends, once decoded: the keys it wants certified and whether it wants its config. */
interface KopsBody {
  certs: Record<string, unknown>;
  keypairIds: Record<string, unknown>;
  includeNodeConfig: boolean;
  /** The `challenge` field as sent, decoded only when the policy calls for the callback. */
  challenge: unknown;
}

/** Each step returns its result or the answer that ends the request; objects with a status are answers. */
function isAnswer(value: object): value is Answer {
  return 'status' in value;
}

/**
 * `POST /bootstrap`, in kops' order: proof, policy chain, node guard, body, callback challenge, node
 * config, certificates.
 */
export async function kopsBootstrap(
  context: BootstrapContext,
  options: KopsOptions,
  input: CertificatesInput,
): Promise<Answer> {
  if (input.body.length === 0) return text(400, 'empty request body');
  const now = () => context.now?.() ?? new Date();
  const request = proofRequestOrDenial(context, input, now);
  if (isAnswer(request)) return request;
  const trail = trailOf(context, request, now);
  // Before the proof costs STS or a cloud read: a request the guard could not judge now only retries.
  const paused = await pausedGuardFault(context, request);
  if (paused) return trail.unavailable(paused, { decidedBy: 'node-guard' });
  const approval = await approvalOrDenial(context, request, trail, now);
  if (isAnswer(approval)) return approval;
  const { decidedBy } = approval;
  const guarded = await guardAgainstRegisteredNode(context, approval.facts, trail);
  if (guarded) return guarded;
  const body = decodeKopsBody(input.body);
  if (isAnswer(body)) return body;
  const renewal = renewalLimitOrDenial(context, request, approval.facts, body, trail);
  if (isAnswer(renewal)) return renewal;
  const facts = await callbackOrDenial(options, approval.facts, body, decidedBy ?? 'unknown', trail);
  if (isAnswer(facts)) return facts;
  const factsAudit = factsAuditOf(facts);
  let nodeConfig: KopsNodeConfig | undefined;
  if (body.includeNodeConfig) {
    const read = await readNodeConfig(context, options, facts, trail);
    if (isAnswer(read)) return read;
    nodeConfig = read;
  }
  const wanted = checkCertificates(body, options, context);
  if (isAnswer(wanted)) return wanted;
  if (wanted.length === 0) {
    // kops answers a request for its node config alone; nothing is issued, so nothing is timed.
    trail.audit({
      decidedBy,
      verdict: 'approve',
      reasons: [`approved by ${decidedBy}; no certificate was asked for`],
      ...factsAudit,
    });
    return certificatesAnswer(wanted, {}, nodeConfig);
  }
  let issued: Partial<Record<ProfileName, IssuedCertificate>>;
  try {
    issued = await issueBySigner(wanted, facts, issueOptionsOf(context, renewal.maxLifetimeMs));
  } catch (err) {
    // Only the request not fitting its profiles is the node's 400; the server failing is not.
    if (!(err instanceof RequestRejectedError || err instanceof InvalidInputError))
      return trail.serverFault(err, { decidedBy: 'issue', ...factsAudit });
    trail.audit({
      decidedBy: 'profile-check',
      verdict: 'deny',
      reasons: [err.message],
      ...factsAudit,
    });
    return text(400, `failed to issue: ${err.message}`);
  }
  context.metrics?.issued((now().getTime() - request.receivedAt.getTime()) / 1000);
  trail.audit({
    decidedBy,
    verdict: 'approve',
    reasons: [`approved by ${decidedBy}`],
    issued: serialsOf(issued),
    ...factsAudit,
  });
  return certificatesAnswer(wanted, issued, nodeConfig);
}

/** Reads the identity proof from the Authorization header; one that cannot be read is audited and refused. */
function proofRequestOrDenial(
  context: BootstrapContext,
  input: CertificatesInput,
  now: () => Date,
): BootstrapRequest | Answer {
  try {
    return kopsProofRequest(input);
  } catch (err) {
    report(context, {
      time: now().toISOString(),
      requestId: newRequestId(),
      remoteAddress: input.remoteAddress,
      proof: 'none',
      decidedBy: 'authorization',
      verdict: 'deny',
      reasons: [(err as Error).message],
    });
    return text(403, 'failed to verify token');
  }
}

function trailOf(context: BootstrapContext, request: BootstrapRequest, now: () => Date): Trail {
  const stamp = () => ({
    time: now().toISOString(),
    requestId: request.id,
    remoteAddress: request.remoteAddress,
    proof: request.proof.kind,
  });
  return {
    audit: (record) => report(context, { ...stamp(), ...record }),
    unavailable: (fault, record) => {
      const told = reportFault(context, { ...stamp(), ...record }, fault);
      return {
        status: 503,
        body: `${told.message}\n`,
        headers: { 'retry-after': String(retryAfterOf(told)) },
      };
    },
    serverFault: (err, record) => {
      const transient = isTransientFailure(err);
      const reason = transient
        ? 'nothing was issued: the server cannot sign now; the node was told to retry'
        : 'nothing was issued: the server failed';
      report(context, {
        ...stamp(),
        ...record,
        verdict: 'error',
        reasons: [reason],
        detail: [describeError(err)],
      });
      context.logger[transient ? 'warn' : 'error'](
        { requestId: request.id, decidedBy: record.decidedBy, err: describeError(err) },
        `kops bootstrap: ${reason}`,
      );
      if (!transient) return text(500, 'internal error');
      const seconds = retryAfterOf(err) ?? defaultRetryAfterSeconds();
      return {
        status: 503,
        body: `the server cannot issue certificates now; retry in ${seconds} s\n`,
        headers: { 'retry-after': String(seconds) },
      };
    },
  };
}

/**
 * Runs the policy chain on the proof alone. Anything but an approval is 403: the kops protocol has no
 * pending state, so a queued request is refused here and the audit trail says where queueing exists.
 */
async function approvalOrDenial(
  context: BootstrapContext,
  request: BootstrapRequest,
  trail: Trail,
  now: () => Date,
): Promise<{ facts: NodeFacts; decidedBy: string | undefined } | Answer> {
  let chain: Awaited<ReturnType<typeof evaluateChain>>;
  try {
    chain = await evaluateChain(context.policies, request, { now });
  } catch (err) {
    if (!isDependencyFault(err)) throw err;
    return trail.unavailable(err, { decidedBy: policyOf(err) });
  }
  const { decision, decidedBy } = chain;
  if (decision.verdict === 'approve') return { facts: decision.facts, decidedBy };
  const reasons = [...decision.reasons];
  if (decision.verdict === 'queue') {
    reasons.unshift(
      'the kops protocol has no pending state; queued approval is available through /v1/certificates',
    );
  }
  trail.audit({ decidedBy, verdict: 'deny', reasons, ...auditDetailOf(decision) });
  // Debug only, as the native handler's: the audit record (info) already carries these reasons, and
  // an unauthenticated caller chooses how many denials, and what they repeat, reach the log.
  context.logger.debug({ requestId: request.id, decidedBy, reasons }, 'kops bootstrap: token not verified');
  return text(403, 'failed to verify token');
}

/**
 * A Ready Node of the verified name is 409 (nodeup then exits quietly), unless the request renews
 * that node's certificate with its current key; no answer lets the request go on.
 */
async function guardAgainstRegisteredNode(
  context: BootstrapContext,
  facts: NodeFacts,
  trail: Trail,
): Promise<Answer | undefined> {
  if (facts.renewalOf) return undefined;
  try {
    await assertNodeNotRegistered(context.readNode, facts.nodeName, {
      anyState: facts.firstJoinOnly === true,
    });
    return undefined;
  } catch (err) {
    if (err instanceof KopsError && err.kind === 'conflict') {
      trail.audit({
        decidedBy: 'node-guard',
        verdict: 'deny',
        reasons: [err.message],
        ...factsAuditOf(facts),
      });
      return text(409, 'node already registered');
    }
    if (!isDependencyFault(err)) throw err;
    return trail.unavailable(err, { decidedBy: 'node-guard', ...factsAuditOf(facts) });
  }
}

/**
 * A renewal's bounds (policies/renewal.ts, `renewalScope`), checked on the names the body asks for
 * before anything is issued: a name that is not the node's own certificate, or a serving
 * certificate without verified addresses, is refused (403, audited); so is a presented certificate
 * shorter-lived than anything this server issues. Otherwise the longest lifetime it may be issued
 * (unbounded for a request that renews nothing).
 */
function renewalLimitOrDenial(
  context: BootstrapContext,
  request: BootstrapRequest,
  facts: NodeFacts,
  body: KopsBody,
  trail: Trail,
): { maxLifetimeMs: number } | Answer {
  let scope: ReturnType<typeof renewalScope>;
  try {
    scope = renewalScope(request, facts);
  } catch (err) {
    return trail.serverFault(err, { decidedBy: 'renewal', ...factsAuditOf(facts) });
  }
  if (!scope) return { maxLifetimeMs: Number.POSITIVE_INFINITY };
  const refuse = (reason: string, answer: string): Answer => {
    trail.audit({
      decidedBy: 'renewal',
      verdict: 'deny',
      reasons: [`renewal refused: ${reason}`],
      ...factsAuditOf(facts),
    });
    return text(403, answer);
  };
  for (const name of Object.keys(body.certs)) {
    // A name this server does not know is left to kops' own 400 ("unexpected key name").
    const spec = Object.hasOwn(certNameSpecs, name) ? certNameSpecs[name] : undefined;
    const refusal = spec && scope.refusal(spec.profile);
    if (refusal) return refuse(`${name}: ${refusal}`, `failed to issue ${JSON.stringify(name)}: ${refusal}`);
  }
  const shortest = context.issueOptions?.bounds?.minMs ?? absoluteLifetimeBounds.minMs;
  if (scope.maxLifetimeMs < shortest) {
    const reason = `the certificate it renews was valid for less than the shortest lifetime this server issues (${shortest / 60_000} min)`;
    return refuse(reason, `failed to issue: ${reason}`);
  }
  return { maxLifetimeMs: scope.maxLifetimeMs };
}

/**
 * How the certificates are issued: for kops' 455 days (or the configured lifetime), spread per node;
 * a renewal whose presented certificate was valid for less, for exactly that (not spread again, so
 * that renewal after renewal does not shorten it).
 */
function issueOptionsOf(context: BootstrapContext, maxLifetimeMs: number): NodeIssueOptions {
  const options = context.issueOptions ?? {};
  // renewalLimitOrDenial made sure it is no shorter than the shortest this server issues.
  return { ...options, lifetimeMs: options.lifetimeMs ?? kopsLifetimeMs, maxLifetimeMs };
}

/** Decodes nodeup's JSON body, parsed only after the proof has been verified. */
function decodeKopsBody(raw: Buffer): KopsBody | Answer {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch (err) {
    return text(400, `failed to decode: ${(err as Error).message}`);
  }
  if (!isJsonObject(body)) return text(400, 'failed to decode: the request is not a JSON object');
  if (body['apiVersion'] !== kopsApiVersion) return text(400, 'unexpected APIVersion');
  return {
    certs: isJsonObject(body['certs']) ? body['certs'] : {},
    keypairIds: isJsonObject(body['keypairIDs']) ? body['keypairIDs'] : {},
    includeNodeConfig: body['includeNodeConfig'] === true,
    challenge: body['challenge'] ?? undefined,
  };
}

/**
 * The callback challenge, when the deciding policy names an endpoint: the facts (with the callback
 * in their evidence) once the node answered; kops' 400 "callback failed" when it did not or could
 * not (the detail goes to the audit trail only); 503 when its server could not be reached.
 */
async function callbackOrDenial(
  options: KopsOptions,
  facts: NodeFacts,
  body: KopsBody,
  decidedBy: string,
  trail: Trail,
): Promise<NodeFacts | Answer> {
  let verdict: Awaited<ReturnType<typeof callbackVerdict>>;
  try {
    verdict = await callbackVerdict(
      options.challenger,
      facts,
      () => (body.challenge === undefined ? undefined : parseChallengeField(body.challenge)),
      decidedBy,
    );
  } catch (err) {
    if (!isDependencyFault(err)) throw err;
    return trail.unavailable(err, { decidedBy: 'callback-challenge', ...factsAuditOf(facts) });
  }
  if (verdict.answered) return { ...facts, evidence: { ...facts.evidence, ...verdict.evidence } };
  trail.audit({
    decidedBy: 'callback-challenge',
    verdict: 'deny',
    reasons: ['callback failed'],
    detail: [verdict.detail],
    ...factsAuditOf(facts),
  });
  return text(400, 'callback failed');
}

/** Reads the nodeup config of the verified instance group, and the node secrets, for `includeNodeConfig`. */
async function readNodeConfig(
  context: BootstrapContext,
  options: KopsOptions,
  facts: NodeFacts,
  trail: Trail,
): Promise<KopsNodeConfig | Answer> {
  try {
    if (!options.nodeConfig)
      throw new InvalidInputError('this server has no state store to read node configuration from');
    const config = await options.nodeConfig(validateDnsName(facts.instanceGroup ?? '', 'instance group'));
    const secrets = (await options.nodeSecrets?.()) ?? {};
    // kops omits the map when it is empty.
    return Object.keys(secrets).length ? { ...config, nodeSecrets: secrets } : config;
  } catch (err) {
    // The state store failing, or refusing the controller's own credentials (rotated, or a permission
    // missing), is not the request's fault: the node asks again while the operator fixes it.
    if (isTransientFailure(err) || isRefusalOfOwnCredentials(err))
      return trail.unavailable(dependencyFault('state-store', err), {
        decidedBy: 'node-config',
        ...factsAuditOf(facts),
      });
    context.logger.warn(
      { err: (err as Error).message, node: facts.nodeName },
      'kops bootstrap: no node config',
    );
    return text(400, 'failed to build node config');
  }
}

function isRefusalOfOwnCredentials(err: unknown): boolean {
  return err instanceof KopsError && (err.kind === 'unauthenticated' || err.kind === 'forbidden');
}

/** Checks every requested key; the first that fails is a 400 naming it. */
function checkCertificates(
  body: KopsBody,
  options: KopsOptions,
  context: BootstrapContext,
): KopsCertificate[] | Answer {
  const wanted: KopsCertificate[] = [];
  for (const [name, pem] of Object.entries(body.certs)) {
    try {
      wanted.push(certificateRequestOf(name, pem, options, body.keypairIds, context));
    } catch (err) {
      return text(400, `failed to issue ${JSON.stringify(name)}: ${(err as Error).message}`);
    }
  }
  return wanted;
}

/** kops' answer: each requested name's certificate under `Certs`, and the node config when asked for. */
function certificatesAnswer(
  wanted: readonly KopsCertificate[],
  issued: Partial<Record<ProfileName, IssuedCertificate>>,
  nodeConfig: KopsNodeConfig | undefined,
): Answer {
  const pems = pemsOf(issued);
  const body: { Certs: Record<string, string | undefined>; nodeConfig?: KopsNodeConfig } = {
    Certs: Object.fromEntries(wanted.map(({ name, profile }) => [name, pems[profile]])),
  };
  if (nodeConfig) body.nodeConfig = nodeConfig;
  return { status: 200, body };
}

/** kops issues node certificates for 455 days (its nodes do not renew them through the CSR API). */
export const kopsLifetimeMs = 455 * 24 * 3_600_000;
