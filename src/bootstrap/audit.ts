/**
 * The audit trail: the bootstrap handlers build one {@link AuditRecord} per decision (who asked,
 * what was decided, by which policy and why, the verified node, the serials issued); this module
 * writes each to a dedicated logger child marked `audit: true`, so a log pipeline can route the trail
 * apart from operational logs. Secrets never appear: a bootstrap token is recorded by its id alone,
 * and anything shaped like a token in any field is cut to its id before the record is written. Nor
 * does its size depend on the caller: every text is cut to {@link maxAuditTextLength} characters.
 */
import { createHash } from 'node:crypto';
import { type Logger, silentLogger } from '../log.ts';
import { clipped } from '../quote.ts';
import type { AuditSink } from './context.ts';
import type { AuditRecord } from './types.ts';

/**
 * A token's shape anywhere in a text, run together with other letters or digits too (`n<id>.<secret>0`
 * is a valid DNS name holding a whole token): a text that merely has the shape loses a little of
 * itself (node names keep their hash, {@link nameField}), a secret is never written.
 */
const tokenShape = /([a-z0-9]{6})\.[a-z0-9]{16}/g;

/** Replaces every `<id>.<secret>` in `text` by `<id>.[redacted]`. */
export function redactTokens(text: string): string {
  return text.replace(tokenShape, '$1.[redacted]');
}

/**
 * The longest text a record keeps (a reason, a detail, a claimed name, an evidence value). Call sites
 * quote and cut what a request chose (src/quote.ts); this is the bound for the ones that do not, since
 * a denial's reason can repeat an unverified proof field and the `Authorization` header allows 16 KiB.
 * Every record is written synchronously on the request path, by whoever asks.
 */
const maxAuditTextLength = 512;

/** Redacted first, then cut: a token across the cut would otherwise leave part of its secret. */
function safeText(text: string): string {
  return clipped(redactTokens(text), maxAuditTextLength);
}

/**
 * A node name as written (`field`, the claimed or the verified one). A name can be token-shaped
 * (`abcdef.0123456789abcdef` is a valid DNS name), and redacting it would leave every such name
 * reading alike, a prober's way to be anonymous in the trail; but a token passed where a name goes
 * must not be written either. So a name that redaction changed also gets its SHA-256 (`<field>Sha256`):
 * whoever investigates can tell which name was asked for by hashing the candidates, and a token's
 * 16-character secret cannot be found from the hash.
 */
function nameField(field: 'claimedNodeName' | 'nodeName', name: string | undefined): Partial<AuditRecord> {
  if (name === undefined) return {};
  // Redacted once, then cut (as safeText does): the regular expression runs once per name and record.
  const redacted = redactTokens(name);
  const safe = clipped(redacted, maxAuditTextLength);
  if (redacted === name) return { [field]: safe };
  return { [field]: safe, [`${field}Sha256`]: createHash('sha256').update(name).digest('hex') };
}

/**
 * The record as written: every token-shaped string redacted, every text at most
 * {@link maxAuditTextLength} characters (pure; the input is not changed).
 */
export function redactAuditRecord(record: AuditRecord): AuditRecord {
  const evidence = record.evidence
    ? Object.fromEntries(Object.entries(record.evidence).map(([k, v]) => [k, safeText(v)]))
    : undefined;
  return {
    ...record,
    reasons: record.reasons.map(safeText),
    ...(record.detail === undefined ? {} : { detail: record.detail.map(safeText) }),
    ...nameField('claimedNodeName', record.claimedNodeName),
    ...nameField('nodeName', record.nodeName),
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
