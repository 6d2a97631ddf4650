/**
 * What the API does to each kind on create and update, after decoding and before storing: the
 * `PrepareFor*` resets (status on the main resource, spec on subresources, requester stamping on
 * CSRs) and the validation that answers 422 Invalid. Raw store writes skip the resets, so tests can
 * seed any state, but never the validation.
 */
import 'reflect-metadata';
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { Pkcs10CertificateRequest } from '@peculiar/x509';
import { isRecord, jsonEqual, type KubeObject, type SimUser, timestamp } from './objects.ts';
import type { ResourceType } from './resources.ts';
import { labelKeyProblem, labelValueProblem } from './selectors.ts';
import type { FieldError } from './status.ts';

/** Which part of an object a write addresses; `raw` is a direct store write that keeps every field. */
export type WriteTarget = 'raw' | 'main' | 'status' | 'approval';

const dnsSubdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const dnsLabel = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const configKey = /^[-._a-zA-Z0-9]+$/;
const subdomainMessage =
  "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const labelMessage =
  "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/** Why a name is not valid for a type, or undefined. */
export function nameProblem(type: ResourceType, name: string): string | undefined {
  if (type.plural === 'namespaces') {
    if (name.length > 63) return 'must be no more than 63 characters';
    return dnsLabel.test(name) ? undefined : labelMessage;
  }
  if (type.plural === 'certificatesigningrequests') {
    if (name === '.' || name === '..') return `may not be '${name}'`;
    if (name.includes('/')) return "may not contain '/'";
    if (name.includes('%')) return "may not contain '%'";
    return undefined;
  }
  if (name.length > 253) return 'must be no more than 253 characters';
  return dnsSubdomain.test(name) ? undefined : subdomainMessage;
}

function validateStringMap(map: unknown, field: string, checkValues: boolean, errors: FieldError[]): void {
  if (map === undefined || map === null) return;
  if (!isRecord(map)) {
    errors.push({ type: 'Invalid', field, value: map, detail: 'must be a map of strings' });
    return;
  }
  for (const [key, value] of Object.entries(map)) {
    const keyProblem = labelKeyProblem(key);
    if (keyProblem) errors.push({ type: 'Invalid', field, value: key, detail: keyProblem });
    if (typeof value !== 'string') {
      errors.push({ type: 'Invalid', field: `${field}.${key}`, value, detail: 'must be a string' });
    } else if (checkValues) {
      const valueProblem = labelValueProblem(value);
      if (valueProblem) errors.push({ type: 'Invalid', field, value, detail: valueProblem });
    }
  }
}

function validateMetadata(type: ResourceType, obj: KubeObject, errors: FieldError[]): void {
  const meta = obj.metadata;
  if (!meta.name) {
    errors.push({ type: 'Required', field: 'metadata.name', detail: 'name or generateName is required' });
  } else {
    const problem = nameProblem(type, meta.name);
    if (problem) errors.push({ type: 'Invalid', field: 'metadata.name', value: meta.name, detail: problem });
  }
  if (type.namespaced && !meta.namespace) {
    errors.push({ type: 'Required', field: 'metadata.namespace' });
  }
  if (!type.namespaced && meta.namespace) {
    errors.push({ type: 'Forbidden', field: 'metadata.namespace', detail: 'not allowed on this type' });
  }
  validateStringMap(meta.labels, 'metadata.labels', true, errors);
  validateStringMap(meta.annotations, 'metadata.annotations', false, errors);
  // ValidateAnnotations (apimachinery pkg/api/validation/objectmeta.go): keys and values together
  // at most TotalAnnotationSizeLimitB, 256 KiB.
  if (isRecord(meta.annotations)) {
    let bytes = 0;
    for (const [key, value] of Object.entries(meta.annotations))
      bytes += Buffer.byteLength(key) + (typeof value === 'string' ? Buffer.byteLength(value) : 0);
    if (bytes > maxAnnotationBytes) {
      errors.push({
        type: 'TooLong',
        field: 'metadata.annotations',
        detail: `may not be more than ${maxAnnotationBytes} bytes`,
      });
    }
  }
}

/** TotalAnnotationSizeLimitB. */
const maxAnnotationBytes = 256 * 1024;

/** core.MaxSecretSize: what a ConfigMap's or a Secret's values may total, in bytes. */
const maxConfigDataBytes = 1024 * 1024;

/**
 * The bytes a value counts for in the size limit: what Go's `len` sees after decoding, so base64
 * fields (`binaryData`, a Secret's `data`) count decoded and strings count as UTF-8.
 */
function dataBytes(value: unknown, base64: boolean): number {
  if (typeof value !== 'string') return 0;
  return base64 ? Buffer.from(value, 'base64').length : Buffer.byteLength(value, 'utf8');
}

/**
 * ConfigMaps and Secrets: key syntax, `immutable`, and the 1 MiB limit on all values together
 * (ValidateConfigMap / ValidateSecret in kubernetes pkg/apis/core/validation). A ConfigMap over it
 * reports the whole object (`field.NewPath("")`, printed `[]`), a Secret reports `data`.
 */
function validateConfigData(
  plural: 'configmaps' | 'secrets',
  obj: KubeObject,
  old: KubeObject | undefined,
  errors: FieldError[],
): void {
  let totalBytes = 0;
  for (const field of ['data', 'binaryData']) {
    const map = obj[field];
    if (map === undefined) continue;
    if (!isRecord(map)) {
      errors.push({ type: 'Invalid', field, value: map, detail: 'must be a map of strings' });
      continue;
    }
    const base64 = field === 'binaryData' || plural === 'secrets';
    for (const [key, value] of Object.entries(map)) {
      totalBytes += dataBytes(value, base64);
      if (!configKey.test(key)) {
        errors.push({
          type: 'Invalid',
          field: `${field}[${key}]`,
          value: key,
          detail:
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        });
      }
    }
  }
  if (totalBytes > maxConfigDataBytes) {
    errors.push({
      type: 'TooLong',
      field: plural === 'secrets' ? 'data' : '[]',
      detail: `may not be more than ${maxConfigDataBytes} bytes`,
    });
  }
  // ValidateSecretUpdate: a Secret's type never changes (an absent one defaults to Opaque first).
  if (plural === 'secrets' && old && (obj['type'] ?? 'Opaque') !== (old['type'] ?? 'Opaque')) {
    errors.push({ type: 'Invalid', field: 'type', value: obj['type'], detail: 'field is immutable' });
  }
  if (old?.['immutable'] === true) {
    if (!jsonEqual(obj['data'], old['data']) || !jsonEqual(obj['binaryData'], old['binaryData'])) {
      errors.push({ type: 'Forbidden', field: 'data', detail: 'field is immutable when `immutable` is set' });
    }
    if (obj['immutable'] !== true) {
      errors.push({
        type: 'Forbidden',
        field: 'immutable',
        detail: 'field is immutable when `immutable` is set',
      });
    }
  }
}

function validatePod(obj: KubeObject, errors: FieldError[]): void {
  const spec = obj['spec'];
  const containers = isRecord(spec) ? spec['containers'] : undefined;
  if (!Array.isArray(containers) || containers.length === 0) {
    errors.push({ type: 'Required', field: 'spec.containers' });
    return;
  }
  containers.forEach((c, i) => {
    if (!isRecord(c) || !c['name']) errors.push({ type: 'Required', field: `spec.containers[${i}].name` });
    if (!isRecord(c) || !c['image']) errors.push({ type: 'Required', field: `spec.containers[${i}].image` });
  });
}

const taintEffects = ['NoSchedule', 'PreferNoSchedule', 'NoExecute'];

function validateNode(
  obj: KubeObject,
  old: KubeObject | undefined,
  target: WriteTarget,
  errors: FieldError[],
): void {
  validatePodCidrs(obj, old, target, errors);
  const taints = isRecord(obj['spec']) ? obj['spec']['taints'] : undefined;
  if (!Array.isArray(taints)) return;
  taints.forEach((t, i) => {
    const field = `spec.taints[${i}]`;
    const key = isRecord(t) ? t['key'] : undefined;
    if (typeof key !== 'string' || key === '') {
      errors.push({ type: 'Required', field: `${field}.key` });
    } else if (labelKeyProblem(key)) {
      errors.push({ type: 'Invalid', field: `${field}.key`, value: key, detail: labelKeyProblem(key) });
    }
    const effect = isRecord(t) ? t['effect'] : undefined;
    if (!effect) {
      errors.push({ type: 'Required', field: `${field}.effect` });
    } else if (!taintEffects.includes(effect as string)) {
      errors.push({
        type: 'NotSupported',
        field: `${field}.effect`,
        value: effect,
        detail: `supported values: ${taintEffects.map((e) => `"${e}"`).join(', ')}`,
      });
    }
  });
}

/** The IP family of a CIDR as Go's net.ParseCIDR reads it (4 or 6), or 0 when it is not one. */
function cidrFamily(value: unknown): 0 | 4 | 6 {
  if (typeof value !== 'string') return 0;
  const slash = value.indexOf('/');
  if (slash < 0) return 0;
  const family = isIP(value.slice(0, slash));
  const bits = value.slice(slash + 1);
  if (family === 0 || !/^\d{1,3}$/.test(bits) || Number(bits) > (family === 4 ? 32 : 128)) return 0;
  return family as 4 | 6;
}

function podCidrsOf(obj: KubeObject | undefined): unknown[] {
  const spec = obj?.['spec'];
  const cidrs = isRecord(spec) ? spec['podCIDRs'] : undefined;
  return Array.isArray(cidrs) ? cidrs : [];
}

/**
 * `spec.podCIDRs` as kubernetes pkg/apis/core/validation/validation.go checks it: in ValidateNode,
 * each a CIDR ("must be valid CIDR"), more than one only as a dual-stack pair, no duplicates; in
 * ValidateNodeUpdate (also what a /status write runs), once set it never changes: 422 Forbidden
 * `node updates may not change podCIDR except from "" to valid`.
 */
function validatePodCidrs(
  obj: KubeObject,
  old: KubeObject | undefined,
  target: WriteTarget,
  errors: FieldError[],
): void {
  const cidrs = podCidrsOf(obj);
  const families = cidrs.map(cidrFamily);
  families.forEach((family, i) => {
    if (family === 0)
      errors.push({
        type: 'Invalid',
        field: `spec.podCIDRs[${i}]`,
        value: cidrs,
        detail: 'must be valid CIDR',
      });
  });
  if (cidrs.length > 1) {
    const dualStack = families.includes(4) && families.includes(6);
    if (!dualStack || cidrs.length > 2) {
      errors.push({
        type: 'Invalid',
        field: 'spec.podCIDRs',
        value: cidrs,
        detail: 'may specify no more than one CIDR for each IP family',
      });
    }
    cidrs.forEach((cidr, i) => {
      if (cidrs.indexOf(cidr) < i)
        errors.push({ type: 'Duplicate', field: `spec.podCIDRs[${i}]`, value: cidr });
    });
  }
  if (!old || target === 'raw') return;
  const before = podCidrsOf(old);
  if (before.length > 0 && (before.length !== cidrs.length || before.some((cidr, i) => cidr !== cidrs[i]))) {
    errors.push({
      type: 'Forbidden',
      field: 'spec.podCIDRs',
      detail: 'node updates may not change podCIDR except from "" to valid',
    });
  }
}

/**
 * The v1 → internal conversion of a NodeSpec (kubernetes pkg/apis/core/v1/conversion.go): the
 * internal type has only `podCIDRs`; a non-empty `podCIDRs` wins, else `podCIDR` becomes it, and
 * `podCIDR` is written back as its first entry. A write whose `podCIDR` disagrees is not refused: its
 * `podCIDR` is dropped.
 */
function convertPodCidrs(obj: KubeObject): void {
  const spec = obj['spec'];
  if (!isRecord(spec)) return;
  const cidrs = spec['podCIDRs'];
  if (Array.isArray(cidrs) && cidrs.length > 0) spec['podCIDR'] = cidrs[0];
  else if (typeof spec['podCIDR'] === 'string' && spec['podCIDR'] !== '')
    spec['podCIDRs'] = [spec['podCIDR']];
}

/**
 * A core/v1 Event as `legacyValidateEvent` checks it (kubernetes pkg/apis/core/validation/events.go;
 * for the v1 API version that is all `ValidateEventCreate` runs): without `eventTime`, an Event about
 * a cluster-scoped object (no `involvedObject.namespace`) lives in `default`, and one about a
 * namespaced object in that object's namespace; with `eventTime` (a "new" Event) also
 * `reportingComponent`, `reportingInstance` and `action` are required.
 */
function validateEvent(obj: KubeObject, errors: FieldError[]): void {
  const involved = isRecord(obj['involvedObject']) ? obj['involvedObject'] : {};
  const involvedNamespace = typeof involved['namespace'] === 'string' ? involved['namespace'] : '';
  const namespace = obj.metadata.namespace ?? '';
  const mismatch = (): void => {
    errors.push({
      type: 'Invalid',
      field: 'involvedObject.namespace',
      value: involvedNamespace,
      detail: 'does not match event.namespace',
    });
  };
  const eventTime = obj['eventTime'];
  if (eventTime === undefined || eventTime === null || eventTime === '') {
    if (involvedNamespace === '') {
      if (namespace !== '' && namespace !== 'default') mismatch();
    } else if (namespace !== involvedNamespace) {
      mismatch();
    }
    return;
  }
  if (involvedNamespace === '' && namespace !== 'default' && namespace !== 'kube-system') mismatch();
  for (const field of ['reportingComponent', 'reportingInstance', 'action']) {
    const value = obj[field];
    if (typeof value !== 'string' || value === '') errors.push({ type: 'Required', field });
    else if (field !== 'reportingComponent' && value.length > 128)
      errors.push({ type: 'Invalid', field, value: '', detail: 'can have at most 128 characters' });
  }
}

function validateLease(obj: KubeObject, errors: FieldError[]): void {
  const spec = isRecord(obj['spec']) ? obj['spec'] : {};
  const duration = spec['leaseDurationSeconds'];
  if (duration !== undefined && duration !== null && (typeof duration !== 'number' || duration <= 0)) {
    errors.push({
      type: 'Invalid',
      field: 'spec.leaseDurationSeconds',
      value: duration,
      detail: 'must be greater than 0',
    });
  }
  const transitions = spec['leaseTransitions'];
  if (
    transitions !== undefined &&
    transitions !== null &&
    (typeof transitions !== 'number' || transitions < 0)
  ) {
    errors.push({
      type: 'Invalid',
      field: 'spec.leaseTransitions',
      value: transitions,
      detail: 'must be greater than or equal to 0',
    });
  }
}

const keyUsages = [
  'signing',
  'digital signature',
  'content commitment',
  'key encipherment',
  'key agreement',
  'data encipherment',
  'cert sign',
  'crl sign',
  'encipher only',
  'decipher only',
  'any',
  'server auth',
  'client auth',
  'code signing',
  'email protection',
  's/mime',
  'ipsec end system',
  'ipsec tunnel',
  'ipsec user',
  'timestamping',
  'ocsp signing',
  'microsoft sgc',
  'netscape sgc',
];
/**
 * `ValidateSignerName` (kubernetes pkg/apis/core/validation): one `/`; before it a domain of at least
 * two DNS-1123 labels, after it a DNS-1123 subdomain, 253 characters at most in all.
 */
const signerNamePattern =
  /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)+\/[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const csrConditionTypes = ['Approved', 'Denied', 'Failed'];
const approvalConditionTypes = ['Approved', 'Denied'];

function csrRequestProblem(request: unknown): string | undefined {
  if (typeof request !== 'string' || request === '') return undefined;
  const pem = Buffer.from(request, 'base64').toString('utf8');
  const block = /-----BEGIN ([A-Z ]+)-----([\s\S]*?)-----END \1-----/.exec(pem);
  if (!block) return 'PEM block type must be CERTIFICATE REQUEST';
  if (block[1] !== 'CERTIFICATE REQUEST') return 'PEM block type must be CERTIFICATE REQUEST';
  try {
    new Pkcs10CertificateRequest(block[0]);
  } catch (err) {
    return `x509: malformed certificate request: ${(err as Error).message}`;
  }
  return undefined;
}

function conditionsOf(obj: KubeObject | undefined): Record<string, unknown>[] {
  const status = obj?.['status'];
  const conditions = isRecord(status) ? status['conditions'] : undefined;
  return Array.isArray(conditions) ? conditions.filter(isRecord) : [];
}

function validateCsr(
  obj: KubeObject,
  old: KubeObject | undefined,
  target: WriteTarget,
  errors: FieldError[],
): void {
  const spec = isRecord(obj['spec']) ? obj['spec'] : {};
  if (!spec['request']) errors.push({ type: 'Required', field: 'spec.request' });
  const requestProblem = csrRequestProblem(spec['request']);
  if (requestProblem)
    errors.push({ type: 'Invalid', field: 'spec.request', value: '<request>', detail: requestProblem });
  const signer = spec['signerName'];
  if (!signer) {
    errors.push({ type: 'Required', field: 'spec.signerName' });
  } else if (signer === 'kubernetes.io/legacy-unknown' && !old) {
    errors.push({
      type: 'Invalid',
      field: 'spec.signerName',
      value: signer,
      detail: 'the legacy signerName is not allowed via this API version',
    });
  } else if (typeof signer !== 'string' || signer.length > 253 || !signerNamePattern.test(signer)) {
    errors.push({
      type: 'Invalid',
      field: 'spec.signerName',
      value: signer,
      detail: "must be a fully qualified domain and path of the form 'example.com/signer-name'",
    });
  }
  const usages = spec['usages'];
  if (!Array.isArray(usages) || usages.length === 0) {
    errors.push({ type: 'Required', field: 'spec.usages' });
  } else {
    usages.forEach((u, i) => {
      if (!keyUsages.includes(u as string)) {
        errors.push({
          type: 'NotSupported',
          field: `spec.usages[${i}]`,
          value: u,
          detail: `supported values: ${keyUsages.map((k) => `"${k}"`).join(', ')}`,
        });
      }
      if (usages.indexOf(u) < i) errors.push({ type: 'Duplicate', field: `spec.usages[${i}]`, value: u });
    });
  }
  const expiration = spec['expirationSeconds'];
  if (
    expiration !== undefined &&
    expiration !== null &&
    (typeof expiration !== 'number' || expiration < 600)
  ) {
    errors.push({
      type: 'Invalid',
      field: 'spec.expirationSeconds',
      value: expiration,
      detail: 'may not specify a duration less than 600 seconds (10 minutes)',
    });
  }
  const seen = new Set<string>();
  const oldTypes = conditionsOf(old).map((c) => c['type']);
  // Both Approved and Denied are tolerated only where the stored object has both already.
  const allowBoth = oldTypes.includes('Approved') && oldTypes.includes('Denied');
  let approvedOrDenied = '';
  conditionsOf(obj).forEach((c, i) => {
    const field = `status.conditions[${i}]`;
    const type = c['type'];
    if (!type) errors.push({ type: 'Required', field: `${field}.type` });
    if (typeof type === 'string' && seen.has(type))
      errors.push({ type: 'Duplicate', field: `${field}.type`, value: type });
    if (typeof type === 'string') seen.add(type);
    const allowed = csrConditionTypes.includes(type as string) ? ['True'] : ['True', 'False', 'Unknown'];
    const status = c['status'];
    if (status === undefined || status === null || status === '') {
      errors.push({ type: 'Required', field: `${field}.status` });
    } else if (!allowed.includes(status as string)) {
      errors.push({
        type: 'NotSupported',
        field: `${field}.status`,
        value: status,
        detail: `supported values: ${allowed.map((v) => `"${v}"`).join(', ')}`,
      });
    }
    if (!allowBoth && (type === 'Approved' || type === 'Denied')) {
      if (approvedOrDenied !== '' && approvedOrDenied !== type) {
        errors.push({
          type: 'Invalid',
          field: `${field}.type`,
          value: type,
          detail: 'Approved and Denied conditions are mutually exclusive',
        });
      }
      approvedOrDenied = type;
    }
  });
  if (old && target !== 'raw') validateCsrConditionChanges(obj, old, target, errors);
  const certificate = isRecord(obj['status']) ? obj['status']['certificate'] : undefined;
  const oldCertificate = isRecord(old?.['status']) ? old['status']['certificate'] : undefined;
  // An update that leaves the certificate as stored is not held to the rules (nor is a stored one
  // that already breaks them), as getValidationOptions' allowArbitraryCertificate tolerates.
  const unchanged = old !== undefined && (certificate ?? '') === (oldCertificate ?? '');
  if (!unchanged && certificateProblem(oldCertificate) === undefined) {
    const problem = certificateProblem(certificate);
    if (problem) {
      errors.push({
        type: 'Invalid',
        field: 'status.certificate',
        value: '<certificate data>',
        detail: problem,
      });
    }
  }
  if (target !== 'raw' && old && (certificate ?? '') !== (oldCertificate ?? '') && oldCertificate) {
    errors.push({
      type: 'Forbidden',
      field: 'status.certificate',
      detail: 'updates may not modify existing certificate content',
    });
  }
}

/**
 * Why `status.certificate` (base64 of PEM) is not acceptable, as `validateCertificate` in kubernetes
 * pkg/apis/certificates/validation/validation.go decides: every PEM block (text around them is
 * skipped, as Go's pem.Decode skips it) must be a `CERTIFICATE` without headers holding an X.509
 * certificate, and there must be at least one. Empty is fine.
 */
function certificateProblem(certificate: unknown): string | undefined {
  if (certificate === undefined || certificate === null || certificate === '') return undefined;
  if (typeof certificate !== 'string') return 'must contain at least one CERTIFICATE PEM block';
  const pem = Buffer.from(certificate, 'base64').toString('latin1');
  const block = /-----BEGIN ([^-\r\n]*)-----\r?\n([\s\S]*?)-----END \1-----/g;
  let blocks = 0;
  for (let match = block.exec(pem); match !== null; match = block.exec(pem)) {
    const [, type, body] = match as unknown as [string, string, string];
    if (type !== 'CERTIFICATE') return `only CERTIFICATE PEM blocks are allowed, found "${type}"`;
    if (/^[^\r\n]*:/m.test(body)) return 'no PEM block headers are permitted';
    blocks++;
    try {
      new X509Certificate(Buffer.from(body.replace(/\s+/g, ''), 'base64'));
    } catch (err) {
      return `x509: malformed certificate: ${(err as Error).message}`;
    }
  }
  return blocks === 0 ? 'must contain at least one CERTIFICATE PEM block' : undefined;
}

function conditionsOfType(obj: KubeObject | undefined, type: string): Record<string, unknown>[] {
  return conditionsOf(obj).filter((c) => c['type'] === type);
}

/**
 * What `validateCertificateSigningRequestUpdate` allows each write: none may remove an Approved,
 * Denied or Failed condition; only `/approval` may add or change Approved or Denied (a `/status` write
 * that keeps their number has them restored first, see prepareForUpdate); other conditions, such as
 * Failed, may be added through either subresource.
 */
function validateCsrConditionChanges(
  obj: KubeObject,
  old: KubeObject,
  target: WriteTarget,
  errors: FieldError[],
): void {
  for (const type of csrConditionTypes) {
    if (conditionsOfType(obj, type).length < conditionsOfType(old, type).length) {
      errors.push({
        type: 'Forbidden',
        field: 'status.conditions',
        detail: `updates may not remove a condition of type "${type}"`,
      });
    }
  }
  if (target === 'approval') return;
  for (const type of approvalConditionTypes) {
    const before = conditionsOfType(old, type);
    const after = conditionsOfType(obj, type);
    if (after.length < before.length) continue;
    if (after.length > before.length) {
      errors.push({
        type: 'Forbidden',
        field: 'status.conditions',
        detail: `updates may not add a condition of type "${type}"`,
      });
    } else if (!jsonEqual(before, after)) {
      errors.push({
        type: 'Forbidden',
        field: 'status.conditions',
        detail: `updates may not modify a condition of type "${type}"`,
      });
    }
  }
}

/** Validates an object about to be stored; `old` is the stored version on update. */
export function validateObject(
  type: ResourceType,
  obj: KubeObject,
  old: KubeObject | undefined,
  target: WriteTarget,
): FieldError[] {
  const errors: FieldError[] = [];
  validateMetadata(type, obj, errors);
  switch (type.plural) {
    case 'pods':
      validatePod(obj, errors);
      break;
    case 'nodes':
      validateNode(obj, old, target, errors);
      break;
    case 'events':
      validateEvent(obj, errors);
      break;
    case 'secrets':
    case 'configmaps':
      validateConfigData(type.plural, obj, old, errors);
      break;
    case 'leases':
      validateLease(obj, errors);
      break;
    case 'certificatesigningrequests':
      validateCsr(obj, old, target, errors);
      break;
  }
  return errors;
}

/** Fills in what the API sets on create: defaults, a reset status, the CSR requester. */
export function prepareForCreate(
  type: ResourceType,
  obj: KubeObject,
  target: WriteTarget,
  requester: SimUser | undefined,
): void {
  switch (type.plural) {
    case 'namespaces':
      if (target !== 'raw' || !isRecord(obj['status'])) obj['status'] = { phase: 'Active' };
      break;
    case 'pods':
      if (target !== 'raw' || !isRecord(obj['status'])) obj['status'] = { phase: 'Pending' };
      break;
    case 'nodes':
      if (target !== 'raw') convertPodCidrs(obj);
      break;
    case 'secrets':
      if (!obj['type']) obj['type'] = 'Opaque';
      foldStringData(obj);
      break;
    case 'certificatesigningrequests': {
      if (target !== 'raw') obj['status'] = {};
      const spec = isRecord(obj['spec']) ? obj['spec'] : {};
      if (requester) {
        // The API trusts the authenticated requester, never what the body claims.
        spec['username'] = requester.name;
        spec['groups'] = [...requester.groups];
        if (requester.uid) spec['uid'] = requester.uid;
        else delete spec['uid'];
        delete spec['extra'];
      }
      obj['spec'] = spec;
      break;
    }
  }
}

/** Applies the update resets: the main resource keeps the stored status, subresources keep the rest. */
export function prepareForUpdate(
  type: ResourceType,
  obj: KubeObject,
  old: KubeObject,
  target: WriteTarget,
): KubeObject {
  if (type.plural === 'secrets') {
    foldStringData(obj);
    if (!obj['type']) obj['type'] = 'Opaque';
  }
  if (target === 'raw') return obj;
  if (type.plural === 'nodes') convertPodCidrs(obj);
  const hasStatus = type.subresources.includes('status');
  if (target === 'main') {
    if (hasStatus) {
      if (old['status'] === undefined) delete obj['status'];
      else obj['status'] = old['status'];
    }
    if (type.plural === 'certificatesigningrequests') obj['spec'] = old['spec'];
    return obj;
  }
  if (type.plural === 'certificatesigningrequests') return prepareCsrSubresource(obj, old, target);
  // Status writes change only the status; metadata and spec stay as stored.
  const result: KubeObject = {
    ...old,
    metadata: { ...old.metadata, resourceVersion: obj.metadata.resourceVersion },
  };
  result['status'] = isRecord(obj['status']) ? { ...obj['status'] } : {};
  return result;
}

/**
 * The CSR subresource strategies (kubernetes pkg/registry/certificates/certificates/strategy.go):
 * neither resets metadata (labels and annotations written through `/status` or `/approval` are
 * stored); both keep the spec. `/approval` takes only the conditions, keeping the stored certificate;
 * `/status` takes the status but puts back the stored Approved and Denied conditions when their
 * number is unchanged (`preserveConditionInstances`: a changed one is silently restored, an added
 * one fails validation). Both stamp missing condition times (`populateConditionTimestamps`).
 */
function prepareCsrSubresource(obj: KubeObject, old: KubeObject, target: WriteTarget): KubeObject {
  const result: KubeObject = { ...obj, spec: old['spec'] };
  const oldStatus = isRecord(old['status']) ? old['status'] : {};
  const given = isRecord(obj['status']) ? obj['status'] : {};
  let status: Record<string, unknown>;
  if (target === 'approval') {
    status = { ...oldStatus };
    if (given['conditions'] === undefined) delete status['conditions'];
    else status['conditions'] = given['conditions'];
  } else {
    status = { ...given };
    const conditions = Array.isArray(status['conditions']) ? [...status['conditions']] : undefined;
    if (conditions) {
      for (const type of approvalConditionTypes) {
        const before = conditionsOfType(old, type);
        const indices = conditions.flatMap((c, i) => (isRecord(c) && c['type'] === type ? [i] : []));
        if (indices.length !== before.length) continue;
        indices.forEach((index, n) => {
          conditions[index] = before[n];
        });
      }
      status['conditions'] = conditions;
    }
  }
  stampConditionTimes(status, old);
  result['status'] = status;
  return result;
}

/** Sets lastUpdateTime/lastTransitionTime on CSR conditions that arrive without them, as the API does. */
function stampConditionTimes(status: Record<string, unknown>, old: KubeObject): void {
  const conditions = status['conditions'];
  if (!Array.isArray(conditions)) return;
  const before = new Map(conditionsOf(old).map((c) => [c['type'], c]));
  const now = timestamp();
  status['conditions'] = conditions.map((c) => {
    if (!isRecord(c)) return c;
    const copy = { ...c };
    if (!copy['lastUpdateTime']) copy['lastUpdateTime'] = now;
    if (!copy['lastTransitionTime']) {
      const previous = before.get(copy['type']);
      copy['lastTransitionTime'] =
        previous && previous['status'] === copy['status'] ? (previous['lastTransitionTime'] ?? now) : now;
    }
    return copy;
  });
}

/** Secrets: `stringData` is write-only and lands base64-encoded in `data`. */
function foldStringData(obj: KubeObject): void {
  const stringData = obj['stringData'];
  if (!isRecord(stringData)) return;
  const data = isRecord(obj['data']) ? { ...obj['data'] } : {};
  for (const [key, value] of Object.entries(stringData))
    data[key] = Buffer.from(String(value)).toString('base64');
  obj['data'] = data;
  delete obj['stringData'];
}
