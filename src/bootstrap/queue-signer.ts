/**
 * The signer of queued bootstrap requests (leader only): watches the CSRs of
 * {@link bootstrapSignerName}, and for each one an admin Approved that is not yet signed it checks
 * the seal, re-parses and re-validates every request against the sealed facts (no name of the API
 * server, whatever was approved), checks again that no Ready Node holds the name, and issues.
 * Approval alone is never enough (as in Kubernetes' csrsigning): a request that fails a check is
 * marked Failed with the reason, via `/status`. An admin's denial is written to the audit trail as it
 * happens. Two kinds of undecided CSR are marked Failed before anyone decides, each audited: one this
 * controller did not seal (anyone who may create CSRs can name our signer, with evidence of their
 * choosing; `kubectl get csr` then shows it Failed, not Pending), and one left undecided for longer
 * than the pending TTL (it frees its place in the queue, and the waiting node is told it expired).
 */
import type { CertificatesV1Api, KubeConfig, V1CertificateSigningRequest } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { formatDuration } from '../config/duration.ts';
import { describeError, KopsError } from '../errors.ts';
import { fromApiException } from '../kube/api-errors.ts';
import { runController } from '../kube/controller.ts';
import { readCsr } from '../kube/csr.ts';
import { type Logger, silentLogger } from '../log.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import { clipped } from '../quote.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { redactTokens } from './audit.ts';
import { issueForFacts, type NodeIssueOptions, pemsOf, serialsOf } from './issue.ts';
import { assertNodeNotRegistered, type NodeReader } from './node-guard.ts';
import {
  bootstrapCsrInformer,
  bootstrapSignerName,
  defaultPendingTtlMs,
  expiredReason,
  hasValidSeal,
  isUndecided,
  queueAnnotations,
  readQueuedRequest,
  sealKeyOf,
} from './queue.ts';
import type { AuditRecord } from './types.ts';

/** Options of {@link queueSigner}. */
export interface QueueSignerOptions {
  kubeConfig: KubeConfig;
  certificates: CertificatesV1Api;
  ca: CertificateAuthority;
  readNode: NodeReader;
  issueOptions?: NodeIssueOptions;
  /** Called with one record per signing decision (issued or failed). */
  audit?: (record: AuditRecord) => void;
  /** Called with the seconds an issuance took. */
  onIssued?: (seconds: number) => void;
  /** How long a request may wait undecided before it is expired (default {@link defaultPendingTtlMs}). */
  pendingTtlMs?: number;
  /** How often undecided requests are checked for expiry (default: a minute, or the TTL if shorter). */
  expirySweepMs?: number;
  /** The clock, in ms since the epoch (tests move it). */
  now?: () => number;
  registry?: Registry;
  logger?: Logger;
}

/** The Failed reason of a CSR under our signer that this controller did not seal. */
export const sealInvalidReason = 'SealInvalid';

function has(csr: V1CertificateSigningRequest, type: string): boolean {
  return (csr.status?.conditions ?? []).some((c) => c.type === type && c.status === 'True');
}

/**
 * The longest text a record takes from a CSR (an annotation, a condition's words): the audit trail's
 * own bound (maxAuditTextLength in audit.ts), applied here as well since the sink does not cut every
 * field, and the signer's log lines repeat some.
 */
const maxCsrText = 512;

/**
 * What a condition says about the human decision: its reason and message. A CSR never records who
 * approved or denied it; the API server's audit log does.
 */
function conditionText(csr: V1CertificateSigningRequest, type: string): string {
  const condition = (csr.status?.conditions ?? []).find((c) => c.type === type && c.status === 'True');
  const text = [condition?.reason, condition?.message].filter(Boolean).join(': ') || 'no reason given';
  // Redacted before it is cut: a token across the cut would keep most of its secret.
  return clipped(redactTokens(text), maxCsrText);
}

/**
 * The audit fields every record about a queued request carries, from its annotations, each redacted
 * and cut to {@link maxCsrText}; the claimed name whole, which the audit sink redacts, hashes as
 * claimed and cuts. The seal does not cover these four: whoever may update the CSR may rewrite them.
 */
function auditBaseOf(csr: V1CertificateSigningRequest) {
  const annotations = csr.metadata?.annotations ?? {};
  // Redacted before it is cut: a token across the cut would keep most of its secret.
  const cut = (text: string) => clipped(redactTokens(text), maxCsrText);
  const claimed = annotations[queueAnnotations.claimedNode];
  return {
    time: new Date().toISOString(),
    requestId: cut(annotations[queueAnnotations.requestId] ?? (csr.metadata?.name as string)),
    remoteAddress: cut(annotations[queueAnnotations.remoteAddress] ?? ''),
    claimedNodeName: claimed,
    proof: cut(annotations[queueAnnotations.proof] ?? 'none') as AuditRecord['proof'],
  };
}

/**
 * The audit record of an admin's denial, when `csr` is one of ours that has just become Denied.
 * Only the transition is recorded, so a restart or a new leader listing old denials repeats none;
 * a denial made while no leader runs goes unrecorded here (the API server's audit log has it).
 * It says whether the CSR's seal holds: anyone who may create CSRs can name our signer, and what
 * such a CSR's annotations say is its creator's word; a sealed one names the node of its facts.
 */
export function denialRecord(
  before: V1CertificateSigningRequest,
  csr: V1CertificateSigningRequest,
  sealKey: Buffer,
): AuditRecord | undefined {
  if (csr.spec?.signerName !== bootstrapSignerName || has(before, 'Denied') || !has(csr, 'Denied')) {
    return undefined;
  }
  const nodeName = sealedNodeName(csr, sealKey);
  return {
    ...auditBaseOf(csr),
    decidedBy: 'admin',
    verdict: 'deny',
    reasons: [
      `denied by an admin: ${conditionText(csr, 'Denied')}`,
      nodeName === undefined
        ? "its seal does not verify: kops-controller did not queue it (or it was altered since); its request id, address, claimed name and proof are its creator's word"
        : 'its seal verifies: kops-controller queued it',
    ],
    ...(nodeName === undefined ? {} : { nodeName }),
  };
}

/** The node a CSR's sealed facts name; undefined when its seal does not verify. */
function sealedNodeName(csr: V1CertificateSigningRequest, sealKey: Buffer): string | undefined {
  if (!hasValidSeal(csr, sealKey)) return undefined;
  try {
    const facts: unknown = JSON.parse(csr.metadata?.annotations?.[queueAnnotations.facts] ?? '');
    const name = (facts as { nodeName?: unknown } | null)?.nodeName;
    return typeof name === 'string' ? clipped(name, maxCsrText) : undefined;
  } catch {
    return undefined;
  }
}

/** When a CSR was created, in ms since the epoch (NaN if unknown). */
function createdMs(csr: V1CertificateSigningRequest): number {
  const created = csr.metadata?.creationTimestamp;
  return created === undefined ? Number.NaN : new Date(created).getTime();
}

/** Whether the signer has work on this CSR: ours, Approved, not Denied or Failed, not yet signed. */
export function needsSigning(csr: V1CertificateSigningRequest): boolean {
  return (
    csr.spec?.signerName === bootstrapSignerName &&
    has(csr, 'Approved') &&
    !has(csr, 'Denied') &&
    !has(csr, 'Failed') &&
    !csr.status?.certificate
  );
}

/** What issuing a queued request produced, ready to be written to its CSR. */
interface Issued {
  /** The PEMs issued, by profile. */
  certificates: Record<string, string | undefined>;
  /** The profile whose certificate goes to `status.certificate`. */
  specProfile: string;
  record: AuditRecord;
}

/** The audit fields of every signing decision about `csr`. */
type SigningAuditBase = ReturnType<typeof auditBaseOf> & { decidedBy: string };

/** `csr` with a Failed condition added. */
function withFailedCondition(
  csr: V1CertificateSigningRequest,
  reason: string,
  message: string,
): V1CertificateSigningRequest {
  const at = new Date();
  return {
    ...csr,
    status: {
      ...csr.status,
      conditions: [
        ...(csr.status?.conditions ?? []),
        { type: 'Failed', status: 'True', reason, message, lastUpdateTime: at, lastTransitionTime: at },
      ],
    },
  };
}

/** `csr` annotated with the certificates of the profiles other than the spec's. */
function withExtraCertificates(
  csr: V1CertificateSigningRequest,
  extra: Record<string, string | undefined>,
): V1CertificateSigningRequest {
  return {
    ...csr,
    metadata: {
      ...csr.metadata,
      annotations: {
        ...csr.metadata?.annotations,
        [queueAnnotations.extraCertificates]: JSON.stringify(extra),
      },
    },
  };
}

/** The signer as a leader-only component of the controller runtime. */
export function queueSigner(options: QueueSignerOptions): LeaderComponent {
  return new QueueSigner(options);
}

class QueueSigner implements LeaderComponent {
  readonly name = 'bootstrap-signer';
  readonly #options: QueueSignerOptions;
  readonly #logger: Logger;
  readonly #sealKey: ReturnType<typeof sealKeyOf>;
  readonly #ttlMs: number;
  readonly #now: () => number;

  constructor(options: QueueSignerOptions) {
    this.#options = options;
    this.#logger = (options.logger ?? silentLogger).child({ component: 'bootstrap-signer' });
    this.#sealKey = sealKeyOf(options.ca);
    this.#ttlMs = options.pendingTtlMs ?? defaultPendingTtlMs;
    this.#now = options.now ?? Date.now;
  }

  async start(signal: AbortSignal): Promise<void> {
    const informer = bootstrapCsrInformer(this.#options.kubeConfig, {
      logger: this.#logger,
      registry: this.#options.registry,
    });
    informer.addHandlers({ update: (before, csr) => this.#recordDenial(before, csr) });
    await runController(
      {
        name: 'bootstrap-signer',
        informer,
        key: (csr) => csr.metadata?.name as string,
        filter: (csr) => needsSigning(csr) || this.#undecidedAction(csr) !== undefined,
        reconcile: (name) => this.#reconcile(name),
        // Expiry is a matter of time, not of a change: the cached undecided requests are looked at again.
        watch: (enqueue) => {
          const sweep = setInterval(() => {
            for (const csr of informer.list()) if (this.#undecidedAction(csr) === 'expire') enqueue(csr);
          }, this.#options.expirySweepMs ?? Math.min(60_000, this.#ttlMs));
          sweep.unref();
          return () => clearInterval(sweep);
        },
        registry: this.#options.registry,
        logger: this.#logger,
      },
      signal,
    );
  }

  /** Refuses an undecided CSR that must not wait, or signs an approved one. */
  async #reconcile(name: string): Promise<undefined> {
    // Read fresh, not from the cache: the cache may lag behind this signer's own last write.
    const csr = await readCsr(this.#options.certificates, name);
    if (!csr) return;
    const action = this.#undecidedAction(csr);
    if (action === 'expire') await this.#expire(csr);
    else if (action === 'refuse-unsealed') await this.#refuseUnsealed(csr);
    else if (needsSigning(csr)) await this.#sign(csr);
  }

  /** What is to be done about a CSR of our signer before anyone decides it, if anything. */
  #undecidedAction(csr: V1CertificateSigningRequest): 'refuse-unsealed' | 'expire' | undefined {
    if (csr.spec?.signerName !== bootstrapSignerName || !isUndecided(csr)) return undefined;
    if (!hasValidSeal(csr, this.#sealKey)) return 'refuse-unsealed';
    return this.#now() - createdMs(csr) > this.#ttlMs ? 'expire' : undefined;
  }

  async #markFailed(csr: V1CertificateSigningRequest, reason: string, message: string): Promise<void> {
    const name = csr.metadata?.name as string;
    const body = withFailedCondition(csr, reason, message);
    try {
      await this.#options.certificates.replaceCertificateSigningRequestStatus({ name, body });
    } catch (err) {
      throw fromApiException(err, `mark certificate signing request ${name} Failed`);
    }
  }

  /** Signs an approved request whose checks all pass; one that fails a check is marked Failed. */
  async #sign(csr: V1CertificateSigningRequest): Promise<void> {
    const started = performance.now();
    const auditBase = { ...auditBaseOf(csr), decidedBy: 'queue' };
    let issued: Issued;
    try {
      issued = await this.#issue(csr, auditBase);
    } catch (err) {
      await this.#refuseSigning(csr, auditBase, err);
      return;
    }
    await this.#writeCertificates(csr, issued);
    this.#options.onIssued?.((performance.now() - started) / 1000);
    this.#options.audit?.(issued.record);
    this.#logger.info(
      { csr: csr.metadata?.name, node: issued.record.nodeName, serials: issued.record.issued },
      'signed approved bootstrap request',
    );
  }

  /** Re-validates the sealed request, checks no Ready Node holds its name, and issues. */
  async #issue(csr: V1CertificateSigningRequest, auditBase: SigningAuditBase): Promise<Issued> {
    const { readNode, ca, issueOptions } = this.#options;
    const queued = readQueuedRequest(csr, this.#sealKey);
    await assertNodeNotRegistered(readNode, queued.facts.nodeName);
    const issued = await issueForFacts(ca, queued.requests, queued.facts, issueOptions);
    return {
      certificates: pemsOf(issued),
      specProfile: queued.specProfile,
      record: {
        ...auditBase,
        verdict: 'approve',
        reasons: [`approved by an admin (${conditionText(csr, 'Approved')}); signed ${csr.metadata?.name}`],
        nodeName: queued.facts.nodeName,
        instanceGroup: queued.facts.instanceGroup,
        evidence: queued.facts.evidence,
        issued: serialsOf(issued),
      },
    };
  }

  /** Marks Failed, and audits, a request that failed a check; a dependency fault is thrown to be retried. */
  async #refuseSigning(
    csr: V1CertificateSigningRequest,
    auditBase: SigningAuditBase,
    err: unknown,
  ): Promise<void> {
    if (err instanceof KopsError && err.kind === 'unavailable') throw err;
    const message = describeError(err);
    this.#logger.warn(
      { csr: csr.metadata?.name, reason: message },
      'approved request failed validation; marking it Failed',
    );
    await this.#markFailed(csr, 'SignerValidationFailure', message);
    this.#options.audit?.({ ...auditBase, verdict: 'deny', reasons: [`signing refused: ${message}`] });
  }

  /** Writes the extra certificates to an annotation, then the spec profile's to `status.certificate`. */
  async #writeCertificates(csr: V1CertificateSigningRequest, issued: Issued): Promise<void> {
    const name = csr.metadata?.name as string;
    const { [issued.specProfile]: primary, ...extra } = issued.certificates;
    const { certificates } = this.#options;
    // The extra certificates go first: the status certificate is what pollers take as "done".
    try {
      const updated = await certificates.replaceCertificateSigningRequest({
        name,
        body: withExtraCertificates(csr, extra),
      });
      await certificates.replaceCertificateSigningRequestStatus({
        name,
        body: {
          ...updated,
          status: { ...updated.status, certificate: Buffer.from(primary ?? '').toString('base64') },
        },
      });
    } catch (err) {
      throw fromApiException(err, `write the certificate of ${name}`);
    }
  }

  /** Marks Failed, and audits, a request left undecided longer than the pending TTL. */
  async #expire(csr: V1CertificateSigningRequest): Promise<void> {
    const message = `not approved or denied within ${formatDuration(this.#ttlMs)} (bootstrap.queue.pendingTTL); the node must ask again`;
    await this.#markFailed(csr, expiredReason, message);
    this.#options.audit?.({
      ...auditBaseOf(csr),
      decidedBy: 'queue-expiry',
      verdict: 'deny',
      reasons: [`expired: ${message}`],
    });
    this.#logger.info({ csr: csr.metadata?.name }, 'queued bootstrap request expired');
  }

  /** Marks Failed, and audits, an undecided request this controller did not seal. */
  async #refuseUnsealed(csr: V1CertificateSigningRequest): Promise<void> {
    const name = csr.metadata?.name as string;
    // The annotations are the creator's own words: the record names the CSR and who created it.
    const creator = csr.spec?.username || 'an unknown user';
    const message =
      'not created by kops-controller (or by it under an earlier CA key), or altered since: its seal does not verify, so it is never signed';
    await this.#markFailed(csr, sealInvalidReason, message);
    this.#options.audit?.({
      time: new Date(this.#now()).toISOString(),
      requestId: name,
      remoteAddress: '',
      proof: 'none',
      decidedBy: 'queue-signer',
      verdict: 'deny',
      reasons: [`${name} under signer ${bootstrapSignerName} was created by ${creator} and is ${message}`],
    });
    this.#logger.warn(
      { csr: name, creator },
      'a bootstrap CSR not made by kops-controller was marked Failed',
    );
  }

  /** Writes an admin's denial of one of ours to the audit trail as it happens. */
  #recordDenial(before: V1CertificateSigningRequest, csr: V1CertificateSigningRequest): void {
    const record = denialRecord(before, csr, this.#sealKey);
    if (!record) return;
    this.#options.audit?.(record);
    this.#logger.info(
      { csr: csr.metadata?.name, reasons: record.reasons },
      'queued bootstrap request denied',
    );
  }
}
