/**
 * The kubelet's own renewals, into the ledger. After joining, a kubelet renews its client and serving
 * certificates through the CSR API (the controller's approver approves them, kube-controller-manager
 * signs), and the certificate the controller issued is no longer the one in use: without this the
 * ledger would warn about certificates nobody uses any more, and miss the ones in use. The leader
 * watches the kubelet signers' CSRs and records every certificate they were issued.
 */
import { X509Certificate } from 'node:crypto';
import type { KubeConfig, V1CertificateSigningRequest } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import type { InformerCache } from '../kube/informer.ts';
import { csrInformer, type SharedInformer } from '../kube/shared-informer.ts';
import type { Logger } from '../log.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { epochSeconds, type LedgerEntry } from './ledger.ts';
import type { LedgerRecorder } from './recorder.ts';

/** The ledger kind of each kubelet signer: the profile names of the certificates they renew. */
export const renewalKinds: Readonly<Record<string, string>> = {
  'kubernetes.io/kube-apiserver-client-kubelet': 'kubelet',
  'kubernetes.io/kubelet-serving': 'kubelet-server',
};

const nodePrefix = 'system:node:';

/** The ledger entry of a kubelet CSR's issued certificate; null for any other CSR or one without a certificate. */
export function entryOfCsr(csr: V1CertificateSigningRequest): LedgerEntry | null {
  const kind = renewalKinds[csr.spec?.signerName ?? ''];
  const issued = csr.status?.certificate;
  if (!kind || !issued) return null;
  try {
    const cert = new X509Certificate(Buffer.from(issued, 'base64'));
    const commonName = /^CN=(.*)$/m.exec(cert.subject)?.[1] ?? '';
    if (!commonName.startsWith(nodePrefix)) return null;
    return {
      kind,
      instanceGroup: '',
      instance: commonName.slice(nodePrefix.length),
      serial: cert.serialNumber.toLowerCase().replace(/^(00)+(?=.)/, ''),
      notBefore: epochSeconds(new Date(cert.validFrom)),
      notAfter: epochSeconds(new Date(cert.validTo)),
    };
  } catch {
    // Not a certificate: the signer wrote something else; nothing to record.
    return null;
  }
}

/** Options of {@link KubeletRenewalRecorder}. */
export interface KubeletRenewalRecorderOptions {
  kubeConfig: KubeConfig;
  /**
   * The process's CSR watch (`csrInformer`), not started yet, for the recorder's view; without it
   * the recorder keeps a watch of its own (a serving worker builds one it never starts).
   */
  csrs?: SharedInformer<V1CertificateSigningRequest>;
  ledger: Pick<LedgerRecorder, 'record'>;
  registry?: Registry;
  logger?: Logger;
}

/** The leader component recording the kubelets' renewed certificates. */
export class KubeletRenewalRecorder implements LeaderComponent {
  readonly name = 'certificate-ledger-renewals';
  readonly #options: KubeletRenewalRecorderOptions;
  /** Only the small entry of each CSR, not the CSR; null for a CSR that records nothing. */
  readonly #entries: InformerCache<LedgerEntry | null>;

  constructor(options: KubeletRenewalRecorderOptions) {
    this.#options = options;
    const { kubeConfig, registry, logger } = options;
    const csrs = options.csrs ?? csrInformer(kubeConfig, { registry, logger });
    this.#entries = csrs.view('certificate-ledger', entryOfCsr);
  }

  async start(signal: AbortSignal): Promise<void> {
    const { ledger } = this.#options;
    const record = (entry: LedgerEntry | null) => {
      if (entry) ledger.record([entry]);
    };
    // Replayed: the shared cache may have synced before this leadership term.
    const forget = this.#entries.addHandlers(
      { add: record, update: (_before, entry) => record(entry) },
      { replay: true },
    );
    this.#entries.start();
    await new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener('abort', () => resolve(), { once: true });
    });
    forget();
    await this.#entries.stop();
  }
}
