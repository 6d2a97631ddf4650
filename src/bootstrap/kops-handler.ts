/**
 * kops compatibility: `POST /bootstrap` answers nodeup's `bootstrap.kops.k8s.io/v1alpha1` requests as
 * kops-controller does (reference kops-controller.md §3.3), in its order: the identity proof is
 * verified by the policy chain BEFORE the body is parsed as JSON; a Ready Node of the verified name
 * gets 409 (nodeup then exits quietly); each requested key is checked against `certNames` and the
 * CA keypair ids; answers use kops' shapes (`Certs`, capital C) and its short plain-text errors, with
 * the details in the log and the audit trail only. A dependency that fails on the way (a policy's
 * cloud or apiserver call, the Node read, the state store) is a 503 with Retry-After, never a 403 or
 * a 500: nodeup retries, and the request is decided once the dependency answers.
 */
import { InvalidInputError, KopsError, type UnavailableError } from '../errors.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import { decodePem } from '../pki/pem.ts';
import {
  type CertificateRequest,
  type IssuedCertificate,
  type ProfileName,
  planCertificate,
  publicKeyRequest,
  validateDnsName,
} from '../pki/profiles.ts';
import { parseAuthorization } from './authorization.ts';
import { evaluateChain } from './chain.ts';
import { auditDetailOf, type BootstrapContext, newRequestId, report, reportFault } from './context.ts';
import { dependencyFault, isDependencyFault, isTransientFailure, policyOf } from './dependency.ts';
import { retryAfterOf } from './http.ts';
import { identityOf, issueForFacts, type NodeIssueOptions, pemsOf, serialsOf } from './issue.ts';
import type { Answer, CertificatesInput } from './native-handler.ts';
import { assertNodeNotRegistered } from './node-guard.ts';
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
}

function text(status: number, message: string): Answer {
  return { status, body: `${message}\n` };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** One requested key, checked: its profile, the CA that signs it and the certificate request. */
interface KopsCertificate {
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
  return { profile: spec.profile, ca, request: publicKeyRequest(spki as Buffer) };
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

/** `POST /bootstrap`. */
export async function kopsBootstrap(
  context: BootstrapContext,
  options: KopsOptions,
  input: CertificatesInput,
): Promise<Answer> {
  if (input.body.length === 0) return text(400, 'empty request body');
  const now = () => context.now?.() ?? new Date();
  let request: BootstrapRequest;
  try {
    request = kopsProofRequest(input);
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
  const audit = (record: Omit<AuditRecord, 'time' | 'requestId' | 'remoteAddress' | 'proof'>) =>
    report(context, {
      time: now().toISOString(),
      requestId: request.id,
      remoteAddress: request.remoteAddress,
      proof: request.proof.kind,
      ...record,
    });
  /** A dependency fault: audited and counted; nodeup is answered 503 with when to ask again. */
  const unavailable = (
    fault: UnavailableError,
    record: Omit<AuditRecord, 'time' | 'requestId' | 'remoteAddress' | 'proof' | 'verdict' | 'reasons'>,
  ): Answer => {
    reportFault(
      context,
      {
        time: now().toISOString(),
        requestId: request.id,
        remoteAddress: request.remoteAddress,
        proof: request.proof.kind,
        ...record,
      },
      fault,
    );
    return {
      status: 503,
      body: `${fault.message}\n`,
      headers: { 'retry-after': String(retryAfterOf(fault)) },
    };
  };

  let chain: Awaited<ReturnType<typeof evaluateChain>>;
  try {
    chain = await evaluateChain(context.policies, request, { now });
  } catch (err) {
    if (!isDependencyFault(err)) throw err;
    return unavailable(err, { decidedBy: policyOf(err) });
  }
  const { decision, decidedBy } = chain;
  if (decision.verdict !== 'approve') {
    const reasons =
      decision.verdict === 'queue'
        ? [
            'the kops protocol has no pending state; queued approval is available through /v1/certificates',
            ...decision.reasons,
          ]
        : decision.reasons;
    audit({ decidedBy, verdict: 'deny', reasons, ...auditDetailOf(decision) });
    context.logger.info({ requestId: request.id, decidedBy, reasons }, 'kops bootstrap: token not verified');
    return text(403, 'failed to verify token');
  }
  const facts: NodeFacts = decision.facts;
  const factsAudit = {
    nodeName: facts.nodeName,
    instanceGroup: facts.instanceGroup,
    evidence: facts.evidence,
  };
  try {
    await assertNodeNotRegistered(context.readNode, facts.nodeName);
  } catch (err) {
    if (err instanceof KopsError && err.kind === 'conflict') {
      audit({ decidedBy: 'node-guard', verdict: 'deny', reasons: [err.message], ...factsAudit });
      return text(409, 'node already registered');
    }
    if (!isDependencyFault(err)) throw err;
    return unavailable(err, { decidedBy: 'node-guard', ...factsAudit });
  }

  let body: unknown;
  try {
    body = JSON.parse(input.body.toString('utf8'));
  } catch (err) {
    return text(400, `failed to decode: ${(err as Error).message}`);
  }
  if (!isRecord(body)) return text(400, 'failed to decode: the request is not a JSON object');
  if (body['apiVersion'] !== kopsApiVersion) return text(400, 'unexpected APIVersion');
  const certs = isRecord(body['certs']) ? body['certs'] : {};
  const keypairIds = isRecord(body['keypairIDs']) ? body['keypairIDs'] : {};

  let nodeConfig: KopsNodeConfig | undefined;
  if (body['includeNodeConfig'] === true) {
    try {
      if (!options.nodeConfig)
        throw new InvalidInputError('this server has no state store to read node configuration from');
      nodeConfig = await options.nodeConfig(validateDnsName(facts.instanceGroup ?? '', 'instance group'));
    } catch (err) {
      // The state store failing is not the request's fault: the node asks again.
      if (isTransientFailure(err))
        return unavailable(dependencyFault('state-store', err), {
          decidedBy: 'node-config',
          ...factsAudit,
        });
      context.logger.warn(
        { err: (err as Error).message, node: facts.nodeName },
        'kops bootstrap: no node config',
      );
      return text(400, 'failed to build node config');
    }
  }

  const wanted: KopsCertificate[] = [];
  const profileByName: Record<string, ProfileName> = {};
  for (const [name, pem] of Object.entries(certs)) {
    try {
      const certificate = certificateRequestOf(name, pem, options, keypairIds, context);
      wanted.push(certificate);
      profileByName[name] = certificate.profile;
    } catch (err) {
      return text(400, `failed to issue ${JSON.stringify(name)}: ${(err as Error).message}`);
    }
  }
  let issued: Partial<Record<ProfileName, IssuedCertificate>>;
  try {
    issued = await issueBySigner(wanted, facts, { lifetimeMs: kopsLifetimeMs, ...context.issueOptions });
  } catch (err) {
    audit({ decidedBy: 'profile-check', verdict: 'deny', reasons: [(err as Error).message], ...factsAudit });
    return text(400, `failed to issue: ${(err as Error).message}`);
  }
  context.metrics?.issued((now().getTime() - request.receivedAt.getTime()) / 1000);
  audit({
    decidedBy,
    verdict: 'approve',
    reasons: [`approved by ${decidedBy}`],
    issued: serialsOf(issued),
    ...factsAudit,
  });
  const pems = pemsOf(issued);
  return {
    status: 200,
    body: {
      Certs: Object.fromEntries(
        Object.entries(profileByName).map(([name, profile]) => [name, pems[profile]]),
      ),
      ...(nodeConfig ? { nodeConfig } : {}),
    },
  };
}

/** kops issues node certificates for 455 days (its nodes do not renew them through the CSR API). */
export const kopsLifetimeMs = 455 * 24 * 3_600_000;
