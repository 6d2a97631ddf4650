/**
 * The native bootstrap API (docs/bootstrap-api.md): `POST /v1/certificates` and
 * `GET /v1/requests/<id>?wait=`. A request is parsed and its CSRs checked (proof of possession, key
 * policy) before any policy runs; the chain decides; the certificates are then planned against the
 * VERIFIED facts, so a CSR for another node's name or for addresses not verified is refused; a Ready
 * Node of that name is refused (409); when the deciding policy names a callback-challenge endpoint,
 * the node must answer there the challenge its request carries before anything is issued or queued
 * (403 otherwise); and every decision goes to the audit trail. A dependency that
 * fails on the way (a policy's cloud or apiserver call, the guard's Node read, the queue's CSR write)
 * is audited as an `error` and answered 503 with Retry-After at the edge: the node retries.
 */
import { InvalidInputError, KopsError } from '../errors.ts';
import { isJsonObject } from '../json-object.ts';
import { bundlePem } from '../pki/ca.ts';
import { type CryptoPool, sharedCryptoPool } from '../pki/crypto-pool.ts';
import { type ParsedCsr, parseCsrAsync, RequestRejectedError } from '../pki/csr.ts';
import { type CertificateRequest, type ProfileName, validateDnsName } from '../pki/profiles.ts';
import { nativeApiVersion } from '../protocol/bootstrap-api.ts';
import { parseToken } from '../protocol/bootstrap-token.ts';
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
  type Dependency,
  dependencyFault,
  isDependencyFault,
  isTransientFailure,
  policyOf,
} from './dependency.ts';
import { assertNoReservedNamesIn, issueForFacts, pemsOf, serialsOf } from './issue.ts';
import { assertNodeNotRegistered } from './node-guard.ts';
import { renewalScope } from './policies/renewal.ts';
import { type QueueState, readBudgetReason } from './queue.ts';
import type { AuditRecord, BootstrapRequest, NodeFacts } from './types.ts';

/** Profiles a node may ask for through the native API; `kubelet` is required. */
export const nativeProfiles: readonly ProfileName[] = ['kubelet', 'kubelet-server'];

/** Longest long-poll, in seconds. */
export const maxWaitSeconds = 60;

/** An HTTP answer: status, JSON body, extra headers. */
export interface Answer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

/** A received `POST /v1/certificates`. */
export interface CertificatesInput {
  body: Buffer;
  authorization: string | undefined;
  remoteAddress: string;
  receivedAt: Date;
}

const allowedFields = new Set(['apiVersion', 'nodeName', 'certificateSigningRequests', 'challenge']);

/** Native-API settings of the handler. */
export interface NativeOptions {
  /** Calls back into nodes whose policy sets `challengeEndpoint`; without it such requests are refused. */
  challenger?: CallbackChallenger;
}

function invalid(message: string): InvalidInputError {
  return new InvalidInputError(message, { details: { reason: 'invalid-request' } });
}

/**
 * Parses and checks the JSON body into a BootstrapRequest (400 for anything malformed); CSR
 * signatures are verified off the event loop, on `pool`'s threads.
 */
export async function parseCertificatesRequest(
  input: CertificatesInput,
  pool: CryptoPool = sharedCryptoPool(),
): Promise<BootstrapRequest> {
  const proof = parseAuthorization(input.authorization);
  let json: unknown;
  try {
    json = JSON.parse(input.body.toString('utf8'));
  } catch (err) {
    throw invalid(`the body is not JSON: ${(err as Error).message}`);
  }
  if (!isJsonObject(json)) throw invalid('the body must be a JSON object');
  const fields = json as Record<string, unknown>;
  const unknown = Object.keys(fields).filter((k) => !allowedFields.has(k));
  if (unknown.length)
    throw invalid(`unknown fields: ${unknown.map((k) => JSON.stringify(k.slice(0, 64))).join(', ')}`);
  if (fields['apiVersion'] !== nativeApiVersion) throw invalid(`apiVersion must be "${nativeApiVersion}"`);
  const csrs = fields['certificateSigningRequests'];
  if (!isJsonObject(csrs)) {
    throw invalid('certificateSigningRequests must be an object of profile name to PEM');
  }
  const certificates: Partial<Record<ProfileName, CertificateRequest>> = {};
  for (const [profile, pem] of Object.entries(csrs as Record<string, unknown>)) {
    if (!nativeProfiles.includes(profile as ProfileName)) {
      throw invalid(
        `certificateSigningRequests: unknown profile "${profile.slice(0, 64)}"; use ${nativeProfiles.join(', ')}`,
      );
    }
    if (typeof pem !== 'string') throw invalid(`certificateSigningRequests.${profile} must be a PEM string`);
    try {
      certificates[profile as ProfileName] = await parseCsrAsync(pem, pool);
    } catch (err) {
      // A crypto thread that stopped (503, the node asks again) or answered wrongly is the server's fault.
      if (err instanceof KopsError && (err.kind === 'unavailable' || err.kind === 'internal')) throw err;
      // Whatever else the parser throws, the cause is the input: it is answered as malformed, never as a 5xx.
      const details = err instanceof KopsError ? err.details : { reason: 'malformed' };
      throw new InvalidInputError(`${profile}: ${(err as Error).message}`, { cause: err, details });
    }
  }
  const kubelet = certificates.kubelet as ParsedCsr | undefined;
  if (!kubelet) throw invalid('certificateSigningRequests.kubelet is required');
  const commonName = kubelet.subject.commonName ?? '';
  const nodeName = fields['nodeName'];
  if (nodeName !== undefined && typeof nodeName !== 'string') throw invalid('nodeName must be a string');
  const claimed =
    nodeName ?? (commonName.startsWith('system:node:') ? commonName.slice('system:node:'.length) : '');
  validateDnsName(claimed, 'nodeName');
  // The token where the name goes (a flag mixed up): whatever policy then decides (the bootstrap-token
  // policy, the queue), the secret would become the name of a CSR, a certificate and a Node, and of
  // every log line about them. Refused before anything records the name.
  const secret = proof.kind === 'bootstrap-token' ? parseToken(proof.token)?.secret : undefined;
  if (secret && claimed.includes(secret)) {
    throw invalid(
      "the node name holds the bootstrap token's secret: give the token as the token and the machine's own name as the node name",
    );
  }
  const challenge = fields['challenge'] === undefined ? undefined : parseChallengeField(fields['challenge']);
  return {
    id: newRequestId(),
    body: input.body,
    claimedNodeName: claimed,
    certificates,
    proof,
    ...(challenge ? { challenge } : {}),
    remoteAddress: input.remoteAddress,
    receivedAt: input.receivedAt,
  };
}

function auditOf(request: BootstrapRequest, now: Date): Omit<AuditRecord, 'verdict' | 'reasons'> {
  return {
    time: now.toISOString(),
    requestId: request.id,
    remoteAddress: request.remoteAddress,
    claimedNodeName: request.claimedNodeName,
    proof: request.proof.kind,
  };
}

function denied(reasons: string[]): Answer {
  return { status: 403, body: { status: 'denied', reasons } };
}

/** The answer for a queue state (also used by the poll). */
export function answerOfQueueState(context: BootstrapContext, state: QueueState): Answer {
  switch (state.state) {
    case 'issued':
      return {
        status: 200,
        body: {
          status: 'issued',
          nodeName: state.nodeName,
          ...(state.facts.instanceGroup ? { instanceGroup: state.facts.instanceGroup } : {}),
          certificates: state.certificates,
          caBundle: bundlePem(context.ca),
          apiServer: context.apiServer,
        },
      };
    case 'denied':
      return denied(state.reasons);
    case 'pending':
      return {
        status: 202,
        body: {
          status: 'pending',
          requestId: state.name,
          poll: `/v1/requests/${state.name}`,
          reasons: state.reasons,
        },
      };
  }
}

/**
 * Runs the guard and the callback challenge, then issues for approved facts; refusals of the
 * profile check are denials.
 */
async function issue(
  context: BootstrapContext,
  options: NativeOptions,
  request: BootstrapRequest,
  approved: NodeFacts,
  decidedBy: string,
): Promise<Answer> {
  // A renewal is this node, proven with its current key: being registered and Ready is expected.
  if (!approved.renewalOf) await guard(context, request, approved.nodeName, approved.firstJoinOnly);
  const facts = await callback(context, options, request, approved, decidedBy);
  if (isAnswer(facts)) return facts;
  const now = context.now?.() ?? new Date();
  const base = {
    ...auditOf(request, now),
    decidedBy,
    nodeName: facts.nodeName,
    instanceGroup: facts.instanceGroup,
    evidence: facts.evidence,
  };
  // A renewal is valid no longer than the certificate it presents (a short-lived kubelet certificate
  // must not renew into the longer native lifetime).
  const maxLifetimeMs = renewalScope(request, facts)?.maxLifetimeMs;
  let issued: Awaited<ReturnType<typeof issueForFacts>>;
  try {
    issued = await issueForFacts(context.ca, request.certificates, facts, {
      ...context.issueOptions,
      ...(maxLifetimeMs === undefined ? {} : { maxLifetimeMs }),
    });
  } catch (err) {
    if (!(err instanceof RequestRejectedError)) throw err;
    const reasons = [`the request does not fit the verified identity: ${err.message}`];
    report(context, { ...base, decidedBy: 'profile-check', verdict: 'deny', reasons });
    return denied(reasons);
  }
  context.metrics?.issued(((context.now?.() ?? new Date()).getTime() - request.receivedAt.getTime()) / 1000);
  report(context, {
    ...base,
    verdict: 'approve',
    reasons: [`approved by ${decidedBy}`],
    issued: serialsOf(issued),
  });
  return answerOfQueueState(context, {
    state: 'issued',
    name: request.id,
    nodeName: facts.nodeName,
    facts,
    certificates: pemsOf(issued),
  });
}

function isAnswer(value: object): value is Answer {
  return 'status' in value;
}

/**
 * The callback challenge when the deciding policy names an endpoint: the facts, with the callback in
 * their evidence, once the node answered; a 403 denial when it did not (the detail for the audit
 * trail only); a dependency fault, audited and thrown on (503), when its server could not be reached.
 */
async function callback(
  context: BootstrapContext,
  options: NativeOptions,
  request: BootstrapRequest,
  facts: NodeFacts,
  decidedBy: string,
): Promise<NodeFacts | Answer> {
  const base = {
    ...auditOf(request, context.now?.() ?? new Date()),
    decidedBy: 'callback-challenge',
    nodeName: facts.nodeName,
    instanceGroup: facts.instanceGroup,
    evidence: facts.evidence,
  };
  const verdict = await faultsReported(context, base, () =>
    callbackVerdict(options.challenger, facts, () => request.challenge, decidedBy),
  );
  if (verdict.answered) return { ...facts, evidence: { ...facts.evidence, ...verdict.evidence } };
  const reasons = ['the callback challenge failed'];
  report(context, { ...base, verdict: 'deny', reasons, detail: [verdict.detail] });
  return denied(reasons);
}

/** The impersonation guard, audited when it refuses or cannot read the Node. */
async function guard(
  context: BootstrapContext,
  request: BootstrapRequest,
  nodeName: string,
  firstJoinOnly = false,
): Promise<void> {
  try {
    await assertNodeNotRegistered(context.readNode, nodeName, { anyState: firstJoinOnly });
  } catch (err) {
    const base = { ...auditOf(request, context.now?.() ?? new Date()), decidedBy: 'node-guard', nodeName };
    if (err instanceof KopsError && err.kind === 'conflict') {
      report(context, { ...base, verdict: 'deny', reasons: [err.message] });
    } else if (isDependencyFault(err)) {
      throw reportFault(context, base, err);
    }
    throw err;
  }
}

/**
 * Runs `work`; a dependency fault it throws — or, when `dependency` is given, a transient failure,
 * which is `dependency`'s — is audited and counted, then thrown on to the edge (503, Retry-After).
 * An error that carries its own `reason` is an answer, not a failure (the queue's 429 when it is
 * full), and is passed on as it is.
 */
async function faultsReported<T>(
  context: BootstrapContext,
  record: Omit<AuditRecord, 'verdict' | 'reasons' | 'detail'>,
  work: () => Promise<T>,
  dependency?: Dependency,
): Promise<T> {
  try {
    return await work();
  } catch (err) {
    const answered = err instanceof KopsError && typeof err.details?.['reason'] === 'string';
    const fault = isDependencyFault(err)
      ? err
      : dependency && isTransientFailure(err) && !answered
        ? dependencyFault(dependency, err)
        : undefined;
    if (!fault) throw err;
    throw reportFault(context, { ...record, decidedBy: record.decidedBy ?? policyOf(fault) }, fault);
  }
}

/** `POST /v1/certificates`. */
export async function submitCertificates(
  context: BootstrapContext,
  input: CertificatesInput,
  options: NativeOptions = {},
): Promise<Answer> {
  const request = await parseCertificatesRequest(input);
  // Refused whatever a policy would say: no node certificate may name the API server.
  assertNoReservedNamesIn(
    request.certificates,
    { nodeName: request.claimedNodeName },
    context.issueOptions?.reserved,
  );
  const now = () => context.now?.() ?? new Date();
  // Before the proof costs STS or a cloud read: a request the guard could not judge now only retries.
  const paused = await pausedGuardFault(context, request);
  if (paused) throw reportFault(context, { ...auditOf(request, now()), decidedBy: 'node-guard' }, paused);
  const chain = await faultsReported(context, auditOf(request, now()), () =>
    evaluateChain(context.policies, request, { now }),
  );
  const { decision, decidedBy } = chain;
  // Debug only: every decision's audit record (info) already carries these fields, and a second
  // line per join is a synchronous write on the request path.
  context.logger.debug(
    {
      requestId: request.id,
      claimed: request.claimedNodeName,
      proof: request.proof.kind,
      verdict: decision.verdict,
      decidedBy,
    },
    'bootstrap request decided',
  );
  switch (decision.verdict) {
    case 'approve':
      return issue(context, options, request, decision.facts, decidedBy ?? 'unknown');
    case 'queue': {
      const queued = queuedFacts(request, decision.facts);
      const base = {
        ...auditOf(request, now()),
        decidedBy,
        nodeName: queued.nodeName,
        evidence: queued.evidence,
      };
      const queue = context.queue;
      if (!queue) {
        const reasons = [
          'the queue is not available on this server (no CSR API access)',
          ...decision.reasons,
        ];
        report(context, { ...base, verdict: 'deny', reasons });
        return denied(reasons);
      }
      await guard(context, request, queued.nodeName, queued.firstJoinOnly);
      // A human approves only a node that proved it is at the cloud's address, as an issue would.
      const facts = await callback(context, options, request, queued, decidedBy ?? 'unknown');
      if (isAnswer(facts)) return facts;
      let state: QueueState;
      try {
        state = await faultsReported(
          context,
          { ...base, decidedBy: 'queue' },
          () => queue.submit(request, facts, decision.reasons),
          'kubernetes-api',
        );
      } catch (err) {
        // The queue's own refusals (the request does not fit, the queue is full, the name is held)
        // are denials to audit; a fault was reported as one above.
        if (err instanceof KopsError && !isDependencyFault(err) && err.kind !== 'internal') {
          report(context, { ...base, verdict: 'deny', reasons: [err.message] });
        }
        throw err;
      }
      report(context, {
        ...base,
        verdict: 'queue',
        reasons: [...decision.reasons, `queued as ${state.name}`],
      });
      return answerOfQueueState(context, state);
    }
    default:
      report(context, {
        ...auditOf(request, now()),
        decidedBy,
        verdict: 'deny',
        reasons: decision.reasons,
        ...auditDetailOf(decision),
      });
      return denied(decision.reasons);
  }
}

/**
 * The facts a human approves for a queued request: those a policy verified, else the claimed name.
 * When they hold no address, a serving certificate gets the addresses its CSR asks for, marked as
 * requested by the node: the human's approval is what verifies them, and the signer certifies
 * exactly the sealed facts, nothing more.
 */
export function queuedFacts(request: BootstrapRequest, facts: NodeFacts | undefined): NodeFacts {
  const base: NodeFacts = facts ?? {
    nodeName: request.claimedNodeName as string,
    dnsNames: [],
    ipAddresses: [],
    evidence: { verified: 'false' },
  };
  const serving = request.certificates['kubelet-server'];
  const san = serving?.kind === 'csr' ? serving.extensions.subjectAltName : undefined;
  if (base.dnsNames.length || base.ipAddresses.length || !san) return base;
  return {
    ...base,
    dnsNames: san.dnsNames,
    ipAddresses: san.ipAddresses,
    evidence: { ...base.evidence, addresses: 'requested by the node; verified by the approver' },
  };
}

/** `GET /v1/requests/<id>?wait=<seconds>`; `source`, the poller's, bounds its long-polls parked on the watch. */
export async function pollRequest(
  context: BootstrapContext,
  id: string,
  waitParameter: string | null,
  signal: AbortSignal,
  source?: string,
): Promise<Answer> {
  if (!context.queue) throw invalid('this server has no queue; there is nothing to poll');
  if (!/^kops-bootstrap-[0-9a-f]{40}$/.test(id)) throw invalid('the request id is malformed');
  const wait = waitParameter === null ? 0 : Number(waitParameter);
  if (!Number.isFinite(wait) || wait < 0) throw invalid('wait must be a number of seconds');
  let state: QueueState;
  try {
    state = await context.queue.wait(id, Math.min(wait, maxWaitSeconds) * 1000, signal, source);
  } catch (err) {
    // The queue's own limit on reads past its watch, as its caps are (429 with its reason and
    // Retry-After): the API server has not failed, so it is neither counted nor logged as if it had.
    if (err instanceof KopsError && err.reasonCode === readBudgetReason) throw err;
    if (!isTransientFailure(err)) throw err;
    // Not a decision, so no audit record: the node polls again after Retry-After, which grows with
    // the outage as a submission's does.
    context.metrics?.dependencyFailure('kubernetes-api');
    const fault = dependencyFault('kubernetes-api', err);
    throw context.outages?.failed(fault, { poll: id }) ?? fault;
  }
  return answerOfQueueState(context, state);
}
