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
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
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
 * What a condition says about the human decision: its reason and message. A CSR never records who
 * approved or denied it; the API server's audit log does.
 */
function conditionText(csr: V1CertificateSigningRequest, type: string): string {
  const condition = (csr.status?.conditions ?? []).find((c) => c.type === type && c.status === 'True');
  return [condition?.reason, condition?.message].filter(Boolean).join(': ') || 'no reason given';
}

/** The audit fields every record about a queued request carries, from its annotations. */
function auditBaseOf(csr: V1CertificateSigningRequest) {
  const annotations = csr.metadata?.annotations ?? {};
  return {
    time: new Date().toISOString(),
    requestId: annotations[queueAnnotations.requestId] ?? (csr.metadata?.name as string),
    remoteAddress: annotations[queueAnnotations.remoteAddress] ?? '',
    claimedNodeName: annotations[queueAnnotations.claimedNode],
    proof: (annotations[queueAnnotations.proof] ?? 'none') as AuditRecord['proof'],
  };
}

/**
 * The audit record of an admin's denial, when `csr` is one of ours that has just become Denied.
 * Only the transition is recorded, so a restart or a new leader listing old denials repeats none;
 * a denial made while no leader runs goes unrecorded here (the API server's audit log has it).
 */
export function denialRecord(
  before: V1CertificateSigningRequest,
  csr: V1CertificateSigningRequest,
): AuditRecord | undefined {
  if (csr.spec?.signerName !== bootstrapSignerName || has(before, 'Denied') || !has(csr, 'Denied')) {
    return undefined;
  }
  return {
    ...auditBaseOf(csr),
    decidedBy: 'admin',
    verdict: 'deny',
    reasons: [`denied by an admin: ${conditionText(csr, 'Denied')}`],
  };
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

/** The signer as a leader-only component of the controller runtime. */
export function queueSigner(options: QueueSignerOptions): LeaderComponent {
  const logger = (options.logger ?? silentLogger).child({ component: 'bootstrap-signer' });
  const sealKey = sealKeyOf(options.ca);
  const ttlMs = options.pendingTtlMs ?? defaultPendingTtlMs;
  const now = options.now ?? Date.now;

  /** What is to be done about a CSR of our signer before anyone decides it, if anything. */
  function undecidedAction(csr: V1CertificateSigningRequest): 'refuse-unsealed' | 'expire' | undefined {
    if (csr.spec?.signerName !== bootstrapSignerName || !isUndecided(csr)) return undefined;
    if (!hasValidSeal(csr, sealKey)) return 'refuse-unsealed';
    return now() - createdMs(csr) > ttlMs ? 'expire' : undefined;
  }

  async function markFailed(
    csr: V1CertificateSigningRequest,
    reason: string,
    message: string,
  ): Promise<void> {
    const name = csr.metadata?.name as string;
    const at = new Date();
    const body: V1CertificateSigningRequest = {
      ...csr,
      status: {
        ...csr.status,
        conditions: [
          ...(csr.status?.conditions ?? []),
          { type: 'Failed', status: 'True', reason, message, lastUpdateTime: at, lastTransitionTime: at },
        ],
      },
    };
    try {
      await options.certificates.replaceCertificateSigningRequestStatus({ name, body });
    } catch (err) {
      throw fromApiException(err, `mark certificate signing request ${name} Failed`);
    }
  }

  async function sign(csr: V1CertificateSigningRequest): Promise<void> {
    const name = csr.metadata?.name as string;
    const started = performance.now();
    const auditBase = { ...auditBaseOf(csr), decidedBy: 'queue' };
    let certificates: Record<string, string | undefined>;
    let specProfile: string;
    let record: AuditRecord;
    try {
      const queued = readQueuedRequest(csr, sealKey);
      specProfile = queued.specProfile;
      await assertNodeNotRegistered(options.readNode, queued.facts.nodeName);
      const issued = await issueForFacts(options.ca, queued.requests, queued.facts, options.issueOptions);
      certificates = pemsOf(issued);
      record = {
        ...auditBase,
        verdict: 'approve',
        reasons: [`approved by an admin (${conditionText(csr, 'Approved')}); signed ${name}`],
        nodeName: queued.facts.nodeName,
        instanceGroup: queued.facts.instanceGroup,
        evidence: queued.facts.evidence,
        issued: serialsOf(issued),
      };
    } catch (err) {
      if (err instanceof KopsError && err.kind === 'unavailable') throw err;
      const message = describeError(err);
      logger.warn({ csr: name, reason: message }, 'approved request failed validation; marking it Failed');
      await markFailed(csr, 'SignerValidationFailure', message);
      options.audit?.({ ...auditBase, verdict: 'deny', reasons: [`signing refused: ${message}`] });
      return;
    }
    const { [specProfile]: primary, ...extra } = certificates;
    // The extra certificates go first: the status certificate is what pollers take as "done".
    const annotated: V1CertificateSigningRequest = {
      ...csr,
      metadata: {
        ...csr.metadata,
        annotations: {
          ...csr.metadata?.annotations,
          [queueAnnotations.extraCertificates]: JSON.stringify(extra),
        },
      },
    };
    try {
      const updated = await options.certificates.replaceCertificateSigningRequest({ name, body: annotated });
      await options.certificates.replaceCertificateSigningRequestStatus({
        name,
        body: {
          ...updated,
          status: { ...updated.status, certificate: Buffer.from(primary ?? '').toString('base64') },
        },
      });
    } catch (err) {
      throw fromApiException(err, `write the certificate of ${name}`);
    }
    options.onIssued?.((performance.now() - started) / 1000);
    options.audit?.(record);
    logger.info(
      { csr: name, node: record.nodeName, serials: record.issued },
      'signed approved bootstrap request',
    );
  }

  /** Marks an undecided CSR Failed before anyone decides it, and audits why. */
  async function refuseUndecided(
    csr: V1CertificateSigningRequest,
    action: 'refuse-unsealed' | 'expire',
  ): Promise<void> {
    const name = csr.metadata?.name as string;
    if (action === 'expire') {
      const message = `not approved or denied within ${formatDuration(ttlMs)} (bootstrap.queue.pendingTTL); the node must ask again`;
      await markFailed(csr, expiredReason, message);
      options.audit?.({
        ...auditBaseOf(csr),
        decidedBy: 'queue-expiry',
        verdict: 'deny',
        reasons: [`expired: ${message}`],
      });
      logger.info({ csr: name }, 'queued bootstrap request expired');
      return;
    }
    // The annotations are the creator's own words: the record names the CSR and who created it.
    const creator = csr.spec?.username || 'an unknown user';
    const message =
      'not created by kops-controller (or by it under an earlier CA key), or altered since: its seal does not verify, so it is never signed';
    await markFailed(csr, sealInvalidReason, message);
    options.audit?.({
      time: new Date(now()).toISOString(),
      requestId: name,
      remoteAddress: '',
      proof: 'none',
      decidedBy: 'queue-signer',
      verdict: 'deny',
      reasons: [`${name} under signer ${bootstrapSignerName} was created by ${creator} and is ${message}`],
    });
    logger.warn({ csr: name, creator }, 'a bootstrap CSR not made by kops-controller was marked Failed');
  }

  /** Writes an admin's denial of one of ours to the audit trail as it happens. */
  function recordDenial(before: V1CertificateSigningRequest, csr: V1CertificateSigningRequest): void {
    const record = denialRecord(before, csr);
    if (!record) return;
    options.audit?.(record);
    logger.info({ csr: csr.metadata?.name, reasons: record.reasons }, 'queued bootstrap request denied');
  }

  return {
    name: 'bootstrap-signer',
    async start(signal: AbortSignal): Promise<void> {
      const informer = bootstrapCsrInformer(options.kubeConfig, { logger, registry: options.registry });
      informer.addHandlers({ update: recordDenial });
      await runController(
        {
          name: 'bootstrap-signer',
          informer,
          key: (csr) => csr.metadata?.name as string,
          filter: (csr) => needsSigning(csr) || undecidedAction(csr) !== undefined,
          reconcile: async (name) => {
            // Read fresh, not from the cache: the cache may lag behind this signer's own last write.
            const csr = await readCsr(options.certificates, name);
            if (!csr) return;
            const action = undecidedAction(csr);
            if (action) await refuseUndecided(csr, action);
            else if (needsSigning(csr)) await sign(csr);
          },
          // Expiry is a matter of time, not of a change: the cached undecided requests are looked at again.
          watch: (enqueue) => {
            const sweep = setInterval(() => {
              for (const csr of informer.list()) if (undecidedAction(csr) === 'expire') enqueue(csr);
            }, options.expirySweepMs ?? Math.min(60_000, ttlMs));
            sweep.unref();
            return () => clearInterval(sweep);
          },
          registry: options.registry,
          logger,
        },
        signal,
      );
    },
  };
}
