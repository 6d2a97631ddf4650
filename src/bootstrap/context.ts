/**
 * What the bootstrap handlers need, injected: the CA, the policy chain, the Node lookup for the
 * impersonation guard, the queue, and where decisions are reported (audit trail and metrics).
 */
import type { UnavailableError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import { pooledRandomBytes } from '../random.ts';
import { PausedCallError } from './circuit-breaker.ts';
import {
  type DependencyFaultError,
  type DependencyOutages,
  dependencyOf,
  faultDetail,
  faultLogMessage,
  isDependencyFault,
} from './dependency.ts';
import type { NodeIssueOptions } from './issue.ts';
import type { NodeReader } from './node-guard.ts';
import type { CsrQueue } from './queue.ts';
import type { AuditRecord, BootstrapPolicy, BootstrapRequest, PolicyDecision } from './types.ts';

/** Receives one audit record per decision; the audit module (src/bootstrap/audit.ts) provides one. */
export type AuditSink = (record: AuditRecord) => void;

/** Where the handlers report what they decide and how long issuance takes. */
export interface BootstrapMetricsSink {
  /** One request decided: the deciding policy (or the check that refused it) and the verdict. */
  decision(policy: string, verdict: AuditRecord['verdict']): void;
  /** Seconds from the request's arrival to its certificates being issued. */
  issued(seconds: number): void;
  /** Requests waiting in the queue for a human. */
  queueDepth(pending: number): void;
  /** One request answered 503 because `dependency` failed (dependency.ts). */
  dependencyFailure(dependency: string): void;
  /** One of those requests was answered without calling `dependency`: its circuit is open (circuit-breaker.ts). */
  dependencyPaused(dependency: string): void;
}

/** The handlers' dependencies. */
export interface BootstrapContext {
  /** The cluster CA that signs node certificates. */
  ca: CertificateAuthority;
  policies: readonly BootstrapPolicy[];
  readNode: NodeReader;
  /**
   * Asked before the policies spend anything on a request (an STS replay, a cloud read): the fault to
   * answer with when the impersonation guard could not judge it now (node-guard.ts guardPause).
   */
  guardPaused?: () => Promise<DependencyFaultError | undefined>;
  /** The CSR-API queue; without it a `queue` verdict is a denial. */
  queue?: CsrQueue;
  /** The API server URL the answers tell nodes to use. */
  apiServer: string;
  audit?: AuditSink;
  metrics?: BootstrapMetricsSink;
  issueOptions?: NodeIssueOptions;
  now?: () => Date;
  logger: Logger;
  /**
   * This server's dependency outages (serveBootstrap makes one): a fault's wait grows with its
   * outage, and its warning is written once per dependency and window. Without it every fault is
   * written and keeps its own wait.
   */
  outages?: DependencyOutages;
}

/** A fresh request id: 128 random bits, hex (unique, not secret: it names the request in the audit trail). */
export function newRequestId(): string {
  return pooledRandomBytes(16).toString('hex');
}

/** The operator-only detail of a denial, as audit record fields (none for other verdicts). */
export function auditDetailOf(decision: PolicyDecision): { detail?: string[] } {
  return decision.verdict === 'deny' && decision.auditDetail ? { detail: decision.auditDetail } : {};
}

/**
 * Records a dependency fault that stopped a request: an audit record with verdict `error` (the reason
 * the node is told, and for the operator only what failed underneath), the metrics, and a warning
 * (once per dependency and window with {@link BootstrapContext.outages}). Returns the fault to answer
 * with: its wait grown with the outage.
 */
export function reportFault(
  context: BootstrapContext,
  record: Omit<AuditRecord, 'verdict' | 'reasons' | 'detail'>,
  fault: UnavailableError,
): UnavailableError {
  const dependency = dependencyOf(fault);
  context.metrics?.dependencyFailure(dependency);
  if (fault.cause instanceof PausedCallError) context.metrics?.dependencyPaused(dependency);
  const fields = { requestId: record.requestId, decidedBy: record.decidedBy };
  let told = fault;
  if (context.outages && isDependencyFault(fault)) told = context.outages.failed(fault, fields);
  else context.logger.warn({ ...fields, dependency, err: faultDetail(fault) }, faultLogMessage);
  report(context, { ...record, verdict: 'error', reasons: [told.message], detail: [faultDetail(told)] });
  return told;
}

/**
 * The fault of a request the impersonation guard cannot judge now, asked before its policies run;
 * none for a renewal, which the guard does not judge (the node is registered by then).
 */
export async function pausedGuardFault(
  context: BootstrapContext,
  request: BootstrapRequest,
): Promise<DependencyFaultError | undefined> {
  if (request.proof.kind === 'node-renewal') return undefined;
  return context.guardPaused?.();
}

/** Records a decision in the audit trail and the metrics. */
export function report(context: BootstrapContext, record: AuditRecord): void {
  context.metrics?.decision(record.decidedBy ?? 'none', record.verdict);
  try {
    context.audit?.(record);
  } catch (err) {
    context.logger.error({ err, requestId: record.requestId }, 'audit sink failed');
  }
}
