/**
 * The queue for requests a human must approve: the Kubernetes CSR API. A queued bootstrap request
 * becomes a CertificateSigningRequest with the signer {@link bootstrapSignerName}, so admins use
 * `kubectl certificate approve|deny` (or `kops-controller requests`) and the state survives any
 * restart of the controller: the CSR object is the pending request, and its name is the poll handle.
 *
 * - The name is derived from the kubelet key and the claimed node name, so a node that retries finds
 *   its own request again instead of piling up new ones.
 * - Because the key is public, anyone can compute that name and create a CSR under it first. A CSR
 *   found under the name is therefore reused only if it holds the same public key AND carries a seal
 *   that only the controller can make (HMAC keyed from the CA key) over its name, request and
 *   evidence; otherwise the request is refused. The signer checks the seal again before signing.
 * - The evidence (claimed name, remote address, proof kind, the facts to certify) sits in
 *   annotations, for the human who decides and for the signer that issues exactly those facts.
 */
import { createHash, createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import type { CertificatesV1Api, KubeConfig, V1CertificateSigningRequest } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { ConflictError, ForbiddenError, NotFoundError } from '../errors.ts';
import { fromApiException } from '../kube/api-errors.ts';
import { Informer, kubeList, kubeWatch } from '../kube/informer.ts';
import { type Logger, silentLogger } from '../log.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import { type ParsedCsr, parseCsr } from '../pki/csr.ts';
import { encodePem } from '../pki/pem.ts';
import type { ProfileName } from '../pki/profiles.ts';
import type { BootstrapRequest, NodeFacts } from './types.ts';

/** The signerName of queued bootstrap requests; only this controller signs for it. */
export const bootstrapSignerName = 'kops.k8s.io/node-bootstrap';

/** Annotation keys on queued CSRs. */
export const queueAnnotations = {
  claimedNode: 'bootstrap.kops.k8s.io/claimed-node-name',
  remoteAddress: 'bootstrap.kops.k8s.io/remote-address',
  proof: 'bootstrap.kops.k8s.io/proof',
  requestId: 'bootstrap.kops.k8s.io/request-id',
  /** JSON NodeFacts: exactly what will be certified once approved. */
  facts: 'bootstrap.kops.k8s.io/facts',
  /** JSON map of further profiles (e.g. kubelet-server) to their CSR PEM. */
  extraRequests: 'bootstrap.kops.k8s.io/extra-requests',
  seal: 'bootstrap.kops.k8s.io/seal',
  /** JSON map of further profiles to the certificate PEM the signer issued. */
  extraCertificates: 'bootstrap.kops.k8s.io/extra-certificates',
} as const;

/** The label that lets admins select the queued requests of one node. */
export const nodeLabel = 'bootstrap.kops.k8s.io/node';

/** Where a queued request stands. */
export type QueueState =
  | { state: 'pending'; name: string; nodeName: string; reasons: string[] }
  | {
      state: 'issued';
      name: string;
      nodeName: string;
      facts: NodeFacts;
      certificates: Partial<Record<ProfileName, string>>;
    }
  | { state: 'denied'; name: string; nodeName: string; reasons: string[] };

/** A queued CSR read back and checked: its seal verified, its requests parsed. */
export interface QueuedRequest {
  name: string;
  facts: NodeFacts;
  requests: Partial<Record<ProfileName, ParsedCsr>>;
  object: V1CertificateSigningRequest;
}

/** The deterministic CSR name for a key and a claimed node name. */
export function queuedCsrName(spki: Buffer, claimedNodeName: string): string {
  const digest = createHash('sha256')
    .update(`${spki.toString('base64url')}|${claimedNodeName}|${bootstrapSignerName}`)
    .digest('hex');
  return `kops-bootstrap-${digest.slice(0, 40)}`;
}

/** The seal key: derived from the CA key, so every replica holding the CA can seal and check. */
export function sealKeyOf(ca: CertificateAuthority): Buffer {
  const material = ca.signer.key.export({ type: 'pkcs8', format: 'der' });
  return Buffer.from(hkdfSync('sha256', material, 'kops-controller', 'bootstrap queue seal v1', 32));
}

function sealOf(key: Buffer, name: string, request: string, facts: string, extra: string): string {
  return createHmac('sha256', key)
    .update(JSON.stringify([name, request, facts, extra]))
    .digest('base64url');
}

function conditionOf(csr: V1CertificateSigningRequest, type: string) {
  return csr.status?.conditions?.find((c) => c.type === type && c.status === 'True');
}

function annotationOf(csr: V1CertificateSigningRequest, key: string): string {
  return csr.metadata?.annotations?.[key] ?? '';
}

/** Whether the CSR was made by this controller and not altered since: its seal verifies. */
export function hasValidSeal(csr: V1CertificateSigningRequest, sealKey: Buffer): boolean {
  if (csr.spec?.signerName !== bootstrapSignerName) return false;
  const expected = Buffer.from(
    sealOf(
      sealKey,
      csr.metadata?.name ?? '',
      csr.spec.request ?? '',
      annotationOf(csr, queueAnnotations.facts),
      annotationOf(csr, queueAnnotations.extraRequests),
    ),
  );
  const actual = Buffer.from(annotationOf(csr, queueAnnotations.seal));
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

function parseJsonRecord(text: string, what: string): Record<string, unknown> {
  const value: unknown = JSON.parse(text || '{}');
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new ForbiddenError(`the ${what} annotation is not a JSON object`);
  }
  return value as Record<string, unknown>;
}

/**
 * Reads a queued CSR back: checks the seal (ForbiddenError if it was not made by this controller or
 * was altered) and re-parses every request, so the signer certifies exactly what was sealed.
 */
export function readQueuedRequest(csr: V1CertificateSigningRequest, sealKey: Buffer): QueuedRequest {
  const name = csr.metadata?.name ?? '';
  if (!hasValidSeal(csr, sealKey)) {
    throw new ForbiddenError(
      `certificate signing request ${name} was not created by kops-controller or was altered since (its seal does not verify)`,
    );
  }
  const facts = parseJsonRecord(annotationOf(csr, queueAnnotations.facts), 'facts') as unknown as NodeFacts;
  const requests: Partial<Record<ProfileName, ParsedCsr>> = {
    kubelet: parseCsr(Buffer.from(csr.spec?.request ?? '', 'base64')),
  };
  for (const [profile, pem] of Object.entries(
    parseJsonRecord(annotationOf(csr, queueAnnotations.extraRequests), 'extra-requests'),
  )) {
    requests[profile as ProfileName] = parseCsr(String(pem));
  }
  return { name, facts, requests, object: csr };
}

function pemOfBase64(base64: string | undefined): string {
  return Buffer.from(base64 ?? '', 'base64').toString('utf8');
}

/** Where a queued CSR stands, as the poll answer reports it. */
export function stateOf(csr: V1CertificateSigningRequest, sealKey: Buffer): QueueState {
  const queued = readQueuedRequest(csr, sealKey);
  const base = { name: queued.name, nodeName: queued.facts.nodeName };
  const denied = conditionOf(csr, 'Denied') ?? conditionOf(csr, 'Failed');
  if (denied) {
    const reasons = [
      `${denied.type === 'Denied' ? 'denied' : 'signing failed'}: ${denied.reason ?? 'no reason given'}`,
    ];
    if (denied.message) reasons.push(denied.message);
    return { state: 'denied', ...base, reasons };
  }
  if (csr.status?.certificate) {
    const extra = parseJsonRecord(
      annotationOf(csr, queueAnnotations.extraCertificates),
      'extra-certificates',
    );
    return {
      state: 'issued',
      ...base,
      facts: queued.facts,
      certificates: {
        kubelet: pemOfBase64(csr.status.certificate),
        ...(Object.fromEntries(Object.entries(extra).map(([k, v]) => [k, String(v)])) as Partial<
          Record<ProfileName, string>
        >),
      },
    };
  }
  const approved = conditionOf(csr, 'Approved');
  return {
    state: 'pending',
    ...base,
    reasons: [
      approved
        ? 'approved; the certificate is being signed'
        : `waiting for approval: kubectl certificate approve ${queued.name}`,
    ],
  };
}

/** Builds the CSR object for a queued request (the kubelet CSR in the spec, the rest sealed in annotations). */
export function queuedCsrObject(
  request: BootstrapRequest,
  facts: NodeFacts,
  sealKey: Buffer,
): V1CertificateSigningRequest {
  const kubelet = request.certificates.kubelet;
  if (kubelet?.kind !== 'csr') {
    throw new ForbiddenError('only requests with a kubelet certificate signing request can be queued');
  }
  const name = queuedCsrName(kubelet.spki, request.claimedNodeName ?? facts.nodeName);
  const spec = Buffer.from(encodePem('CERTIFICATE REQUEST', kubelet.der)).toString('base64');
  const extraRequests = JSON.stringify(
    Object.fromEntries(
      Object.entries(request.certificates)
        .filter(([profile, csr]) => profile !== 'kubelet' && csr?.kind === 'csr')
        .map(([profile, csr]) => [profile, encodePem('CERTIFICATE REQUEST', (csr as ParsedCsr).der)]),
    ),
  );
  const factsJson = JSON.stringify(facts);
  return {
    apiVersion: 'certificates.k8s.io/v1',
    kind: 'CertificateSigningRequest',
    metadata: {
      name,
      labels: /^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$/.test(facts.nodeName)
        ? { [nodeLabel]: facts.nodeName }
        : {},
      annotations: {
        [queueAnnotations.claimedNode]: request.claimedNodeName ?? '',
        [queueAnnotations.remoteAddress]: request.remoteAddress,
        [queueAnnotations.proof]: request.proof.kind,
        [queueAnnotations.requestId]: request.id,
        [queueAnnotations.facts]: factsJson,
        [queueAnnotations.extraRequests]: extraRequests,
        [queueAnnotations.seal]: sealOf(sealKey, name, spec, factsJson, extraRequests),
      },
    },
    spec: {
      request: spec,
      signerName: bootstrapSignerName,
      usages: ['digital signature', 'key encipherment', 'client auth'],
    },
  };
}

/** Options of a {@link CsrQueue}. */
export interface CsrQueueOptions {
  certificates: CertificatesV1Api;
  /** For the informer that serves polls from a cache. */
  kubeConfig: KubeConfig;
  ca: CertificateAuthority;
  /** Queue depth (pending requests) is reported here, when given. */
  onDepth?: (pending: number) => void;
  registry?: Registry;
  logger?: Logger;
}

/** The informer over the CSRs of {@link bootstrapSignerName}, shared by the queue and the signer. */
export function bootstrapCsrInformer(
  kubeConfig: KubeConfig,
  options: { logger?: Logger; registry?: Registry } = {},
): Informer<V1CertificateSigningRequest> {
  const fieldSelector = `spec.signerName=${bootstrapSignerName}`;
  return new Informer<V1CertificateSigningRequest>({
    name: 'bootstrap-csrs',
    path: '/apis/certificates.k8s.io/v1/certificatesigningrequests',
    list: kubeList(kubeConfig, '/apis/certificates.k8s.io/v1/certificatesigningrequests'),
    watch: kubeWatch(kubeConfig),
    fieldSelector,
    logger: options.logger,
    registry: options.registry,
  });
}

/** The server's side of the queue: submit, look up, and long-poll queued requests. */
export class CsrQueue {
  readonly #options: CsrQueueOptions;
  readonly #sealKey: Buffer;
  readonly #informer: Informer<V1CertificateSigningRequest>;
  readonly #waiters = new Map<string, Set<() => void>>();
  readonly #pending = new Set<string>();
  readonly #logger: Logger;

  constructor(options: CsrQueueOptions) {
    this.#options = options;
    this.#sealKey = sealKeyOf(options.ca);
    this.#logger = options.logger ?? silentLogger;
    this.#informer = bootstrapCsrInformer(options.kubeConfig, {
      logger: this.#logger,
      registry: options.registry,
    });
    // The pending set is kept per event, so the depth costs O(1) per change even with thousands queued.
    const changed = (csr: V1CertificateSigningRequest, deleted = false) => {
      const name = csr.metadata?.name ?? '';
      const undecided = !deleted && !csr.status?.conditions?.length && !csr.status?.certificate;
      if (undecided) this.#pending.add(name);
      else this.#pending.delete(name);
      this.#wake(name);
      this.#options.onDepth?.(this.#pending.size);
    };
    this.#informer.addHandlers({
      add: (csr) => changed(csr),
      update: (_old, csr) => changed(csr),
      delete: (csr) => changed(csr, true),
    });
  }

  /** Starts the informer. */
  start(): void {
    this.#informer.start();
  }

  /** Whether the informer has listed once (a readiness condition). */
  hasSynced(): boolean {
    return this.#informer.hasSynced();
  }

  /** Stops the informer and releases every long-poll. */
  async stop(): Promise<void> {
    await this.#informer.stop();
    for (const name of [...this.#waiters.keys()]) this.#wake(name);
  }

  /** How many queued requests wait for a decision. */
  pendingCount(): number {
    return this.#pending.size;
  }

  /**
   * Queues a request for a human, or finds the same request queued earlier (a retry). A CSR under the
   * deterministic name that holds another key, or that this controller did not seal, is refused.
   */
  async submit(request: BootstrapRequest, facts: NodeFacts): Promise<QueueState> {
    const object = queuedCsrObject(request, facts, this.#sealKey);
    const name = object.metadata?.name as string;
    try {
      await this.#options.certificates.createCertificateSigningRequest({ body: object });
      this.#logger.info({ csr: name, node: facts.nodeName }, 'request queued for approval');
      return stateOf(object, this.#sealKey);
    } catch (err) {
      const error = fromApiException(err, `create certificate signing request ${name}`);
      if (error.kind !== 'conflict') throw error;
    }
    const existing = await this.#read(name);
    if (!existing)
      throw new ConflictError(`certificate signing request ${name} vanished while being created; retry`);
    const existingKey = this.#spkiOf(existing);
    const ourKey = request.certificates.kubelet?.spki as Buffer;
    if (!existingKey?.equals(ourKey) || !hasValidSeal(existing, this.#sealKey)) {
      throw new ConflictError(
        `a certificate signing request named ${name} already exists but holds another public key or was not created by kops-controller; ` +
          `an admin must inspect it (kubectl get csr ${name} -o yaml) and delete it`,
        { details: { reason: 'csr-name-taken' } },
      );
    }
    return stateOf(existing, this.#sealKey);
  }

  /** Where the queued request `name` stands; NotFoundError for unknown names and foreign CSRs. */
  async lookup(name: string): Promise<QueueState> {
    const csr = this.#informer.get(name) ?? (await this.#read(name));
    if (!csr || !hasValidSeal(csr, this.#sealKey)) {
      throw new NotFoundError(`no pending bootstrap request ${name}; it was never made, or was deleted`, {
        details: { reason: 'unknown-request' },
      });
    }
    return stateOf(csr, this.#sealKey);
  }

  /**
   * Waits up to `waitMs` for `name` to be issued or denied (an approval alone is still pending: the
   * signer has yet to sign); resolves with the state then.
   */
  async wait(name: string, waitMs: number, signal?: AbortSignal): Promise<QueueState> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      // Subscribed before each look, so a change arriving in between is not missed.
      let wake = () => {};
      const woken = new Promise<void>((resolve) => {
        wake = resolve;
      });
      const waiters = this.#waiters.get(name) ?? new Set();
      this.#waiters.set(name, waiters);
      waiters.add(wake);
      let timer: NodeJS.Timeout | undefined;
      try {
        const state = await this.lookup(name);
        const left = deadline - Date.now();
        if (state.state !== 'pending' || left <= 0 || signal?.aborted) return state;
        signal?.addEventListener('abort', wake, { once: true });
        timer = setTimeout(wake, left);
        await woken;
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener('abort', wake);
        waiters.delete(wake);
        if (waiters.size === 0) this.#waiters.delete(name);
      }
    }
  }

  #wake(name: string): void {
    for (const done of [...(this.#waiters.get(name) ?? [])]) done();
  }

  #spkiOf(csr: V1CertificateSigningRequest): Buffer | undefined {
    try {
      return parseCsr(Buffer.from(csr.spec?.request ?? '', 'base64')).spki;
    } catch {
      return undefined;
    }
  }

  async #read(name: string): Promise<V1CertificateSigningRequest | undefined> {
    try {
      return await this.#options.certificates.readCertificateSigningRequest({ name });
    } catch (err) {
      const error = fromApiException(err, `read certificate signing request ${name}`);
      if (error.kind === 'not-found') return undefined;
      throw error;
    }
  }
}
