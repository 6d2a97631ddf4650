/**
 * The in-cluster approver for kubelet certificate rotation (see checks.ts for what it decides), run
 * on the leader: an informer on CertificateSigningRequests feeds a work queue; each undecided kubelet
 * CSR from a node is assessed, then checked against the cloud's record of the node's instance (the
 * Node's providerID, identified through the batching NodeIdentifier), and the decision is written
 * through `/approval` with a reason and message.
 *
 * Freshness: the identifier caches identities for an hour, which is right for labelling (an
 * instance's group never changes) but not for trust: an instance terminated a minute ago must not
 * renew. Every decision here asks for cloud facts read less than `maxInstanceStateAgeMs` ago.
 *
 * Failure handling: a cloud or API outage requeues the CSR with backoff and never turns into a
 * denial (unlike kubelet-csr-approver, whose resolver errors deny at once), nor into an approval
 * from an older answer; the cloud's verdict on the instance (another cluster's, unknown or stopped)
 * is a denial. The cloud refusing the approver's own call (401/403: a missing permission) is an
 * outage like any other: it says nothing about the node. With `leaveUnverifiedForHumans`, would-be
 * denials are only logged and counted, leaving the CSR pending for `kubectl certificate`.
 *
 * Client renewals and the machine: the API server records who asked (`system:node:<name>`; since
 * Kubernetes 1.32 also the SHA-256 of the certificate it authenticated with, a fingerprint nothing here
 * can map to a machine), so a client renewal is approved for whichever machine bears the name now — a key copied off an earlier machine of that name (a GCE instance recreated
 * under its name, an IP-based AWS name, a server re-created under its name) would get a fresh
 * certificate. With `clientRenewals: 'leave'` such requests, once they pass the checks that need no
 * cloud, are neither approved nor denied: left for a human, logged and counted once per CSR.
 */
import { lookup } from 'node:dns/promises';
import { CoreV1Api, type KubeConfig, type V1CertificateSigningRequest } from '@kubernetes/client-node';
import { Counter, type Registry, register } from 'prom-client';
import { isCloudVerdict } from '../../bootstrap/dependency.ts';
import type { NodeIdentifier } from '../../cloud/types.ts';
import { bounded } from '../../deadline.ts';
import { describeError, NotFoundError, UnavailableError } from '../../errors.ts';
import { fromApiException } from '../../kube/api-errors.ts';
import { abortingWith } from '../../kube/call-options.ts';
import { reuseConnections } from '../../kube/connection-reuse.ts';
import { runController } from '../../kube/controller.ts';
import { csrCollectionPath, readCsrWire } from '../../kube/csr.ts';
import type { InformerCache } from '../../kube/informer.ts';
import { type KubeHttps, kubeAnswerError, kubeHttps } from '../../kube/kube-https.ts';
import { sharedMetric } from '../../kube/metrics.ts';
import type { SharedInformer } from '../../kube/shared-informer.ts';
import { type Logger, silentLogger } from '../../log.ts';
import type { LeaderComponent } from '../../runtime/controller-runtime.ts';
import { assessCsr, assessInstance, type InstanceCheck, type Verdict } from './checks.ts';
import { type CsrRecord, csrRecordOf, sameRequest } from './csr-record.ts';
import { assessResolution, type ServingPolicy } from './serving-policy.ts';

/** How long the read of a request's Node may take (the API server). */
const readTimeoutMs = 30_000;
/** How long the cloud's answer for a request's instance may take, its SDK's retries included. */
const lookupTimeoutMs = 60_000;

/** Options of a {@link CsrApprover}. */
export interface CsrApproverOptions {
  kubeConfig: KubeConfig;
  /** The process's CSR watch (`csrInformer`, src/kube/shared-informer.ts); the approver adds its view. */
  csrs: SharedInformer<V1CertificateSigningRequest>;
  identifier: NodeIdentifier;
  /** Identify nodes without a providerID by name (metal, whose inventory lists host names). */
  identifyByNodeName?: boolean;
  /** Leave requests that fail a check pending for a human instead of denying them (default false). */
  leaveUnverifiedForHumans?: boolean;
  /**
   * What becomes of a well-formed kubelet client renewal from a node (default `approve`; the
   * controller passes `csrApprover.clientRenewals`, whose default depends on the cloud):
   * - `approve`: approved when the cloud says the node's instance runs (checks.ts assessInstance);
   * - `leave`: neither approved nor denied, and the cloud not asked: left pending for a human, with a
   *   log line and a `left-pending` count once per CSR. One that fails a check needing no cloud (another
   *   node's name, a SAN, wrong usages) is still denied, or left under `leaveUnverifiedForHumans`.
   * Serving requests are decided alike either way.
   */
  clientRenewals?: ClientRenewals;
  /**
   * The oldest instance state a decision may rest on (default {@link defaultMaxInstanceStateAgeMs});
   * older cached answers are read from the cloud again.
   */
  maxInstanceStateAgeMs?: number;
  /**
   * kubelet-csr-approver's settings for serving requests (serving-policy.ts); none by default. A
   * request breaking one is denied before the cloud is asked.
   */
  serving?: ServingPolicy;
  /**
   * Looks a DNS name up for `serving.namesMustResolve` (default: the system resolver, as
   * getaddrinfo sees it, /etc/hosts included). A name that does not exist rejects with code
   * ENOTFOUND or ENODATA; any other failure is an outage.
   */
  resolveName?: (name: string) => Promise<string[]>;
  /** CSRs processed at once (default 8). */
  concurrency?: number;
  registry?: Registry;
  logger?: Logger;
}

/**
 * How old the instance state behind a decision may be by default. A credential stolen from a machine
 * could be renewed while the machine still ran anyway, so what matters is that renewals stop soon
 * after it is gone, not within milliseconds; a minute is far below any cache lifetime and any
 * certificate lifetime, and lets a node's client and serving requests share one cloud read.
 */
export const defaultMaxInstanceStateAgeMs = 60_000;

/** What the approver does with kubelet client renewals: see {@link CsrApproverOptions.clientRenewals}. */
export type ClientRenewals = 'approve' | 'leave';

/** The reason a client renewal left for a human is logged and counted with. */
export const clientRenewalLeftReason = 'ClientRenewalLeftForHuman';

/** Every address of a name, as the system resolves it. */
async function systemResolve(name: string): Promise<string[]> {
  return (await lookup(name, { all: true })).map((entry) => entry.address);
}

/** Whether the cloud refused because the instance is not (or no longer) running. */
function isNotRunning(error: Error): boolean {
  return (error as { details?: Record<string, unknown> }).details?.['reason'] === 'not-running';
}

/** The kubelet CSR approver, run by the controller runtime on the leader only. */
export class CsrApprover implements LeaderComponent {
  readonly name = 'csr-approver';
  readonly #options: CsrApproverOptions;
  readonly #core: CoreV1Api;
  /** The CSR's read and decision, over the pooled client, as JSON (src/kube/csr.ts readCsrWire). */
  readonly #kube: KubeHttps;
  readonly #logger: Logger;
  readonly #decisions: Counter;
  readonly #csrs: InformerCache<CsrRecord>;
  /**
   * The client renewals already reported as left for a human, by CSR name, with the request reported
   * (a CSR re-created under its name is another request): each is logged and counted once. Dropped
   * when the CSR is decided or deleted, and at each start.
   */
  readonly #leftReported = new Map<string, string>();

  constructor(options: CsrApproverOptions) {
    this.#options = options;
    this.#csrs = options.csrs.view('csr-approver', csrRecordOf);
    const kubeConfig = reuseConnections(options.kubeConfig);
    this.#core = kubeConfig.makeApiClient(CoreV1Api);
    this.#kube = kubeHttps(options.kubeConfig, { timeoutMs: readTimeoutMs });
    this.#logger = (options.logger ?? silentLogger).child({ controller: 'csr-approver' });
    const registry = options.registry ?? register;
    this.#decisions = sharedMetric(
      registry,
      'kops_controller_csr_approver_decisions_total',
      () =>
        new Counter({
          name: 'kops_controller_csr_approver_decisions_total',
          help: 'Kubelet CSRs decided, by signer, decision (approved, denied, left-pending) and reason.',
          labelNames: ['signer', 'decision', 'reason'],
          registers: [registry],
        }),
    );
  }

  /** What this approver does with kubelet client renewals. */
  get clientRenewals(): ClientRenewals {
    return this.#options.clientRenewals ?? 'approve';
  }

  /** Follows the CSR cache and decides the kubelet CSRs until `signal` aborts. */
  async start(signal: AbortSignal): Promise<void> {
    const informer = this.#csrs;
    const reported = this.#leftReported;
    reported.clear();
    await runController(
      {
        name: 'certificatesigningrequests',
        informer,
        key: (record) => record.name,
        track: {
          update: (_before, after) => {
            if (after.decided || after.issued) reported.delete(after.name);
          },
          delete: (record) => reported.delete(record.name),
        },
        filter: (record) => !record.decided && !record.issued,
        reconcile: (name, workSignal) => this.#reconcile(informer.get(name), workSignal),
        concurrency: this.#options.concurrency ?? 8,
        baseDelayMs: 500,
        maxDelayMs: 300_000,
        registry: this.#options.registry,
        logger: this.#logger,
      },
      signal,
    );
  }

  async #reconcile(record: CsrRecord | undefined, signal: AbortSignal): Promise<undefined> {
    if (!record) return;
    const assessment = assessCsr(record, this.#options.serving);
    if (assessment.action === 'ignore') {
      this.#logger.debug({ csr: record.name, why: assessment.why }, 'not a request for this approver');
      return;
    }
    if (assessment.action === 'verify-instance' && !assessment.serving && this.clientRenewals === 'leave') {
      this.#leaveClientRenewal(record, assessment.nodeName);
      return;
    }
    let verdict =
      assessment.action === 'verify-instance' ? await this.#verifyInstance(assessment, signal) : assessment;
    if (assessment.action === 'verify-instance' && verdict.action === 'approve') {
      verdict = (await this.#checkResolution(assessment)) ?? verdict;
    }
    await this.#decide(record, verdict, signal);
  }

  /**
   * Leaves a well-formed client renewal pending for a human (`clientRenewals: 'leave'`), saying why
   * once per CSR. Nothing is written to the CSR and the cloud is not asked: whatever it answered, the
   * request would stay for the human.
   */
  #leaveClientRenewal(record: CsrRecord, nodeName: string): void {
    if (this.#leftReported.get(record.name) === record.request) return;
    this.#leftReported.set(record.name, record.request);
    this.#decisions.inc({
      signer: record.signerName,
      reason: clientRenewalLeftReason,
      decision: 'left-pending',
    });
    this.#logger.warn(
      {
        csr: record.name,
        requester: record.username,
        reason: clientRenewalLeftReason,
        message:
          `kubelet client renewals are left for a human (csrApprover.clientRenewals: leave): the approver cannot see ` +
          `which certificate authenticated the request, so it cannot tell node ${nodeName}'s current machine from an ` +
          `earlier machine of that name whose key was copied; approve it only if you know it is the node's own. ` +
          `Nodes renew through the bootstrap server (kops-controller join --renew), which checks the machine`,
      },
      'left for a human: kubectl certificate approve|deny',
    );
  }

  /**
   * With `namesMustResolve`, looks up a serving request's DNS names (after the cloud vouched for
   * them, so that only requests worth approving cost lookups). A name that does not exist is a
   * denial; any other resolver failure throws, to be retried like any outage.
   */
  async #checkResolution(request: InstanceCheck): Promise<Verdict | undefined> {
    const policy = this.#options.serving;
    if (!policy?.namesMustResolve || !request.serving || !request.dnsNames.length) return undefined;
    const resolveName = this.#options.resolveName ?? systemResolve;
    const resolved = new Map<string, string[] | undefined>();
    for (const name of new Set(request.dnsNames)) {
      try {
        resolved.set(name, await resolveName(name));
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code !== 'ENOTFOUND' && code !== 'ENODATA') {
          throw new UnavailableError(`cannot look up ${name}: ${(err as Error).message}`, { cause: err });
        }
        resolved.set(name, undefined);
      }
    }
    return assessResolution(request, resolved, policy);
  }

  /**
   * Checks a request's instance (and names) with the cloud; outages throw (requeue), refusals deny.
   * Each read is bounded and given up when the controller stops (leadership lost), so a slow cloud
   * or API server never keeps the approver running past its stop budget.
   */
  async #verifyInstance(request: InstanceCheck, signal: AbortSignal): Promise<Verdict> {
    const { nodeName } = request;
    let providerID: string | undefined;
    try {
      const node = await bounded(
        (cut) => this.#core.readNode({ name: nodeName }, abortingWith(cut)),
        readTimeoutMs,
        `read node ${nodeName}`,
        signal,
      );
      providerID = node.spec?.providerID || undefined;
    } catch (err) {
      const error = fromApiException(err, `read node ${nodeName}`);
      if (!(error instanceof NotFoundError)) throw error;
      return { action: 'deny', reason: 'NodeNotFound', message: `node ${nodeName} is not registered` };
    }
    const key = providerID ?? (this.#options.identifyByNodeName ? nodeName : undefined);
    if (!key) {
      return {
        action: 'deny',
        reason: 'NodeIdentityUnknown',
        message: `node ${nodeName} has no providerID, so the cloud cannot vouch for it`,
      };
    }
    const maxAgeMs = this.#options.maxInstanceStateAgeMs ?? defaultMaxInstanceStateAgeMs;
    const results = await bounded(
      () => this.#options.identifier.identify([key], { maxAgeMs }),
      lookupTimeoutMs,
      `look up ${key}`,
      signal,
    );
    const result = results.get(key);
    if (!result) throw new NotFoundError(`the node identifier returned nothing for ${key}`);
    if (!result.ok) {
      // Only the cloud's verdict on the instance denies; a failure to ask is retried.
      if (!isCloudVerdict(result.error)) throw result.error;
      return {
        action: 'deny',
        reason: isNotRunning(result.error) ? 'InstanceNotRunning' : 'InstanceIdentityRejected',
        message: `the cloud does not vouch for node ${nodeName}: ${describeError(result.error)}`,
      };
    }
    return assessInstance(request, result.identity);
  }

  async #decide(record: CsrRecord, decision: Verdict, signal: AbortSignal): Promise<void> {
    const type = decision.action === 'approve' ? 'Approved' : 'Denied';
    const labels = { signer: record.signerName, reason: decision.reason };
    const log = {
      csr: record.name,
      requester: record.username,
      reason: decision.reason,
      message: decision.message,
    };
    if (type === 'Denied' && this.#options.leaveUnverifiedForHumans) {
      this.#decisions.inc({ ...labels, decision: 'left-pending' });
      this.#logger.warn(log, 'left for a human: kubectl certificate approve|deny');
      return;
    }
    // Read again past the cache, as the API server sent it: decided meanwhile (by a human or another
    // approver), theirs stands; changed since it was assessed (deleted and re-created, or an answer
    // that is not what the cache held), it is not the request assessed, and its own event queues it.
    const wire = await readCsrWire(this.#kube, record.name, signal);
    if (wire === undefined) return;
    let current: CsrRecord;
    try {
      current = csrRecordOf(wire as unknown as V1CertificateSigningRequest);
    } catch (err) {
      this.#logger.warn(
        { csr: record.name, err: describeError(err) },
        'the certificate signing request read back is malformed; not deciding it',
      );
      return;
    }
    if (current.decided) return;
    if (current.name !== record.name || !sameRequest(current, record)) {
      this.#logger.info(
        { csr: record.name },
        'the certificate signing request read back is not the one assessed; not deciding it',
      );
      return;
    }
    const condition = {
      type,
      status: 'True',
      reason: decision.reason,
      message: decision.message,
      lastUpdateTime: new Date().toISOString(),
    };
    // What was read, with the condition added: its resourceVersion makes the write fail (409, retried)
    // should the CSR change in between.
    const status = (wire['status'] ?? {}) as Record<string, unknown>;
    const conditions = (status['conditions'] ?? []) as unknown[];
    const action = `${type === 'Approved' ? 'approve' : 'deny'} ${record.name}`;
    const answer = await this.#kube({
      action,
      method: 'PUT',
      path: `${csrCollectionPath}/${encodeURIComponent(record.name)}/approval`,
      body: JSON.stringify({ ...wire, status: { ...status, conditions: [...conditions, condition] } }),
      // A replica that stopped leading writes no decision.
      signal,
    });
    if (answer.status === 404) return;
    if (answer.status !== 200 && answer.status !== 201) throw kubeAnswerError(answer, action);
    this.#decisions.inc({ ...labels, decision: type === 'Approved' ? 'approved' : 'denied' });
    if (type === 'Approved') this.#logger.info(log, 'approved kubelet certificate request');
    else this.#logger.warn(log, 'denied kubelet certificate request');
  }
}
