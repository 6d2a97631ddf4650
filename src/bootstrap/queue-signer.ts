/**
 * The signer of queued bootstrap requests (leader only): watches the CSRs of
 * {@link bootstrapSignerName}, and for each one an admin Approved that is not yet signed it checks
 * the seal, re-parses and re-validates every request against the sealed facts, checks again that no
 * Ready Node holds the name, and issues. Approval alone is never enough (as in Kubernetes' csrsigning):
 * a request that fails a check is marked Failed with the reason, via `/status`. An admin's denial is
 * written to the audit trail as it happens.
 */
import type { CertificatesV1Api, KubeConfig, V1CertificateSigningRequest } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { describeError, KopsError } from '../errors.ts';
import { fromApiException } from '../kube/api-errors.ts';
import { WorkQueue } from '../kube/workqueue.ts';
import { type Logger, silentLogger } from '../log.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import type { IssueOptions } from '../pki/profiles.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { issueForFacts, pemsOf, serialsOf } from './issue.ts';
import { assertNodeNotRegistered, type NodeReader } from './node-guard.ts';
import {
  bootstrapCsrInformer,
  bootstrapSignerName,
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
  issueOptions?: IssueOptions;
  /** Called with one record per signing decision (issued or failed). */
  audit?: (record: AuditRecord) => void;
  /** Called with the seconds an issuance took. */
  onIssued?: (seconds: number) => void;
  registry?: Registry;
  logger?: Logger;
}

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

  async function readCsr(name: string): Promise<V1CertificateSigningRequest | undefined> {
    try {
      return await options.certificates.readCertificateSigningRequest({ name });
    } catch (err) {
      const error = fromApiException(err, `read certificate signing request ${name}`);
      if (error.kind === 'not-found') return undefined;
      throw error;
    }
  }

  async function markFailed(
    csr: V1CertificateSigningRequest,
    reason: string,
    message: string,
  ): Promise<void> {
    const name = csr.metadata?.name as string;
    const now = new Date();
    const body: V1CertificateSigningRequest = {
      ...csr,
      status: {
        ...csr.status,
        conditions: [
          ...(csr.status?.conditions ?? []),
          { type: 'Failed', status: 'True', reason, message, lastUpdateTime: now, lastTransitionTime: now },
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
    let record: AuditRecord;
    try {
      const queued = readQueuedRequest(csr, sealKey);
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
    const { kubelet, ...extra } = certificates;
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
          status: { ...updated.status, certificate: Buffer.from(kubelet ?? '').toString('base64') },
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

  return {
    name: 'bootstrap-signer',
    async start(signal: AbortSignal): Promise<void> {
      const informer = bootstrapCsrInformer(options.kubeConfig, { logger, registry: options.registry });
      const queue = new WorkQueue({ name: 'bootstrap-signer', registry: options.registry, logger });
      const enqueue = (csr: V1CertificateSigningRequest) => {
        if (needsSigning(csr)) queue.add(csr.metadata?.name as string);
      };
      const recordDenial = (before: V1CertificateSigningRequest, csr: V1CertificateSigningRequest) => {
        const record = denialRecord(before, csr);
        if (!record) return;
        options.audit?.(record);
        logger.info({ csr: csr.metadata?.name, reasons: record.reasons }, 'queued bootstrap request denied');
      };
      informer.addHandlers({
        add: enqueue,
        update: (before, csr) => {
          recordDenial(before, csr);
          enqueue(csr);
        },
      });
      queue.start(async (name) => {
        // Read fresh, not from the cache: the cache may lag behind this signer's own last write.
        const csr = await readCsr(name);
        if (csr && needsSigning(csr)) await sign(csr);
      });
      informer.start();
      if (!signal.aborted)
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
      await queue.shutdown({ drain: false });
      await informer.stop();
    },
  };
}
