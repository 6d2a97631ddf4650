/**
 * The audit trail: the bootstrap handlers build one {@link AuditRecord} per decision (who asked,
 * what was decided, by which policy and why, the verified node, the serials issued); this module
 * writes each to a dedicated logger child marked `audit: true`, so a log pipeline can route the trail
 * apart from operational logs. Secrets never appear: a bootstrap token is recorded by its id alone,
 * and anything shaped like a token in any field is cut to its id before the record is written.
 */
import { type Logger, silentLogger } from '../log.ts';
import type { AuditSink } from './context.ts';
import type { AuditRecord } from './types.ts';

const tokenShape = /\b([a-z0-9]{6})\.[a-z0-9]{16}\b/g;

/** Replaces every `<id>.<secret>` in `text` by `<id>.[redacted]`. */
export function redactTokens(text: string): string {
  return text.replace(tokenShape, '$1.[redacted]');
}

/** The record with every token-shaped string redacted (pure; the input is not changed). */
export function redactAuditRecord(record: AuditRecord): AuditRecord {
  const evidence = record.evidence
    ? Object.fromEntries(Object.entries(record.evidence).map(([k, v]) => [k, redactTokens(v)]))
    : undefined;
  return {
    ...record,
    reasons: record.reasons.map(redactTokens),
    ...(record.detail === undefined ? {} : { detail: record.detail.map(redactTokens) }),
    ...(record.claimedNodeName === undefined
      ? {}
      : { claimedNodeName: redactTokens(record.claimedNodeName) }),
    ...(evidence === undefined ? {} : { evidence }),
  };
}

/** An audit sink writing each record, redacted, as one JSON line on a child logger marked `audit: true`. */
export function auditSink(logger: Logger = silentLogger): AuditSink {
  const audit = logger.child({ audit: true });
  return (record) => {
    const safe = redactAuditRecord(record);
    audit.info({ record: safe }, `bootstrap ${safe.verdict}`);
  };
}
