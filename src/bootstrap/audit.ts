/**
 * The audit trail: one structured record per bootstrap decision — who asked (request id, peer,
 * claimed name, kind of proof), what was decided, by which policy and why, for which verified node,
 * and the serial numbers issued — on a dedicated logger child marked `audit: true`, so a log pipeline
 * can route the trail apart from operational logs. Secrets never appear: a bootstrap token is
 * recorded by its id alone, and anything shaped like a token in a reason is cut to its id.
 */
import { type Logger, silentLogger } from '../log.ts';
import type { ProfileName } from '../pki/profiles.ts';
import type { AuditRecord, BootstrapRequest, ChainDecision } from './types.ts';

const tokenShape = /\b([a-z0-9]{6})\.[a-z0-9]{16}\b/g;

/** Replaces every `<id>.<secret>` in `text` by `<id>.[redacted]`. */
export function redactTokens(text: string): string {
  return text.replace(tokenShape, '$1.[redacted]');
}

/** What happened after the decision: the certificates issued, or the error that stopped issuance. */
export interface AuditOutcome {
  issued?: Partial<Record<ProfileName, string>>;
  error?: string;
}

/** Builds the record of one decision (pure). */
export function auditRecordOf(
  request: BootstrapRequest,
  chain: ChainDecision,
  outcome: AuditOutcome = {},
  now: Date = new Date(),
): AuditRecord {
  const { decision } = chain;
  const facts = decision.verdict === 'approve' || decision.verdict === 'queue' ? decision.facts : undefined;
  const evidence: Record<string, string> = {};
  if (request.proof.kind === 'bootstrap-token') evidence['tokenId'] = request.proof.token.split('.')[0] ?? '';
  for (const [key, value] of Object.entries(facts?.evidence ?? {})) evidence[key] = redactTokens(value);
  const reasons = decision.reasons.map(redactTokens);
  if (outcome.error !== undefined) reasons.push(redactTokens(outcome.error));
  return {
    time: now.toISOString(),
    requestId: request.id,
    remoteAddress: request.remoteAddress,
    ...(request.claimedNodeName === undefined
      ? {}
      : { claimedNodeName: redactTokens(request.claimedNodeName) }),
    proof: request.proof.kind,
    verdict: outcome.error === undefined ? decision.verdict : 'error',
    ...(chain.decidedBy === undefined ? {} : { decidedBy: chain.decidedBy }),
    reasons,
    ...(facts === undefined ? {} : { nodeName: facts.nodeName }),
    ...(facts?.instanceGroup === undefined ? {} : { instanceGroup: facts.instanceGroup }),
    ...(Object.keys(evidence).length === 0 ? {} : { evidence }),
    ...(outcome.issued === undefined ? {} : { issued: outcome.issued }),
  };
}

/** Writes audit records to a child of the process logger marked `audit: true`. */
export class AuditTrail {
  readonly #logger: Logger;

  constructor(logger: Logger = silentLogger) {
    this.#logger = logger.child({ audit: true });
  }

  /** Records one decision and its outcome; returns the record written. */
  record(request: BootstrapRequest, chain: ChainDecision, outcome: AuditOutcome = {}): AuditRecord {
    const record = auditRecordOf(request, chain, outcome);
    this.#logger.info({ record }, `bootstrap ${record.verdict}`);
    return record;
  }
}
