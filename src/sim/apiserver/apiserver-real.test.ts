/**
 * The simulator against the real kube-apiserver, for the requests production makes: each test feeds a
 * request shaped as production sends it (through production's own code where it has one) and expects
 * what the real API server answers. Sources (kubernetes/kubernetes unless named):
 * - Node podCIDRs: pkg/apis/core/validation/validation.go (ValidateNode, ValidateNodeUpdate),
 *   pkg/apis/core/v1/conversion.go (podCIDR/podCIDRs), staging/src/k8s.io/api/core/v1/types.go
 *   (NodeSpec.PodCIDRs `patchStrategy:"merge"`).
 * - MicroTime: staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/micro_time.go (`RFC3339Micro`, parsed
 *   with time.Parse; exactly six digits), the answer quoted in kubernetes-client/javascript#828.
 * - Events: pkg/apis/core/validation/events.go (legacyValidateEvent; all that v1 runs).
 * - CSRs: pkg/apis/certificates/validation/validation.go (validateCertificate, validateConditions,
 *   validateCertificateSigningRequestUpdate), pkg/registry/certificates/certificates/strategy.go
 *   (the /status and /approval PrepareForUpdate).
 * - PUT with a uid: staging/src/k8s.io/apiserver/pkg/registry/rest/update.go (the object's UID is a
 *   storage precondition), pkg/storage/etcd3 (checkPreconditions: 409 "Precondition failed: UID in
 *   precondition").
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  ApiException,
  CertificatesV1Api,
  CoordinationV1Api,
  CoreV1Api,
  type V1CertificateSigningRequest,
} from '@kubernetes/client-node';
import { eventName, nodeEvent } from '../../controllers/node/node-event.ts';
import { ConflictError, InvalidInputError } from '../../errors.ts';
import { kubeAnswerError, kubeHttps } from '../../kube/kube-https.ts';
import { LeaderElector } from '../../kube/leader-election.ts';
import { isUidMismatch, patchNode } from '../../kube/patch.ts';
import { createCertificateRequest } from '../tls.ts';
import { type SimApiServer, startApiServer } from './index.ts';

function statusOf(err: unknown): { code: number; reason: string; message: string } {
  assert.ok(err instanceof ApiException, `expected an ApiException, got ${String(err)}`);
  return JSON.parse(err.body as string);
}

async function rejects(
  promise: Promise<unknown>,
  code: number,
): Promise<{ reason: string; message: string }> {
  try {
    await promise;
  } catch (err) {
    const status = statusOf(err);
    assert.equal(status.code, code, status.message);
    return status;
  }
  assert.fail(`expected HTTP ${code}`);
}

describe('the simulator answers production as the real kube-apiserver does', () => {
  let sim: SimApiServer;
  let core: CoreV1Api;
  let certs: CertificatesV1Api;
  before(async () => {
    sim = await startApiServer();
    core = sim.kubeConfig().makeApiClient(CoreV1Api);
    certs = sim.kubeConfig().makeApiClient(CertificatesV1Api);
  });
  after(() => sim.close());

  describe('Node spec.podCIDRs (IPAM patches)', () => {
    const call = () => kubeHttps(sim.kubeConfig(), { timeoutMs: 10_000 });
    const assign = (name: string, cidrs: string[], resourceVersion?: string) =>
      patchNode(
        call(),
        name,
        {
          ...(resourceVersion ? { metadata: { resourceVersion } } : {}),
          spec: { podCIDR: cidrs[0], podCIDRs: cidrs },
        },
        'strategic-merge',
      );

    test('a range, once set, cannot be changed: 422 Forbidden, even with the current resourceVersion', async () => {
      const node = sim.store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'cidr-1' } });
      const first = await assign('cidr-1', ['100.96.1.0/24'], node.metadata.resourceVersion);
      assert.deepEqual(first.spec?.podCIDRs, ['100.96.1.0/24']);
      // The same range again is no change (a retry whose first answer was lost).
      const again = await assign('cidr-1', ['100.96.1.0/24'], first.metadata?.resourceVersion);
      assert.equal(again.metadata?.resourceVersion, first.metadata?.resourceVersion);
      await assert.rejects(assign('cidr-1', ['100.96.2.0/24'], first.metadata?.resourceVersion), (err) => {
        assert.ok(err instanceof InvalidInputError, String(err));
        // The patch merges into two IPv4 ranges (podCIDRs is a set), so both rules speak.
        assert.match(err.message, /Node "cidr-1" is invalid: \[/);
        assert.match(
          err.message,
          /spec\.podCIDRs: Forbidden: node updates may not change podCIDR except from "" to valid/,
        );
        return true;
      });
      assert.deepEqual(sim.store.get('nodes', undefined, 'cidr-1')?.['spec'], {
        podCIDR: '100.96.1.0/24',
        podCIDRs: ['100.96.1.0/24'],
      });
    });

    test('podCIDRs merges as a set under a strategic merge patch, and podCIDR follows podCIDRs[0]', async () => {
      sim.store.create({
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: 'cidr-2' },
        spec: { podCIDR: '100.96.3.0/24', podCIDRs: ['100.96.3.0/24', 'fd00:1::/64'] },
      });
      // A subset of a dual-stack pair merges into the pair: no change, no refusal.
      const subset = await assign('cidr-2', ['100.96.3.0/24']);
      assert.deepEqual(subset.spec?.podCIDRs, ['100.96.3.0/24', 'fd00:1::/64']);
      sim.store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'cidr-3' } });
      // podCIDRs wins over a podCIDR that disagrees (the v1 → internal conversion).
      const patched = await patchNode(
        call(),
        'cidr-3',
        { spec: { podCIDR: '100.96.9.0/24', podCIDRs: ['100.96.4.0/24'] } },
        'strategic-merge',
      );
      assert.deepEqual(patched.spec, { podCIDR: '100.96.4.0/24', podCIDRs: ['100.96.4.0/24'] });
    });

    test('malformed ranges and two of one family are 422', async () => {
      sim.store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'cidr-4' } });
      await assert.rejects(
        assign('cidr-4', ['100.96.5.0']),
        /spec\.podCIDRs\[0\]: Invalid value: .*must be valid CIDR/,
      );
      await assert.rejects(
        assign('cidr-4', ['100.96.5.0/24', '100.96.6.0/24']),
        /spec\.podCIDRs: Invalid value: .*may specify no more than one CIDR for each IP family/,
      );
      const dual = await assign('cidr-4', ['100.96.5.0/24', 'fd00:5::/64']);
      assert.deepEqual(dual.spec?.podCIDRs, ['100.96.5.0/24', 'fd00:5::/64']);
    });
  });

  describe('Lease MicroTimes (leader election)', () => {
    test('production writes six fractional digits and the API takes them; three digits are a 400', async () => {
      const coordination = sim.kubeConfig().makeApiClient(CoordinationV1Api);
      const stop = new AbortController();
      let leading = false;
      const elector = new LeaderElector({
        client: coordination,
        namespace: 'kube-system',
        name: 'real-lease',
        identity: 'candidate-1',
        leaseDurationMs: 15_000,
        renewDeadlineMs: 5_000,
        retryPeriodMs: 100,
        onStartedLeading: () => {
          leading = true;
        },
      });
      const running = elector.run(stop.signal);
      for (let i = 0; i < 100 && !leading; i++) await new Promise((resolve) => setTimeout(resolve, 20));
      assert.ok(leading, 'the elector acquired the lease');
      stop.abort();
      await running;
      const lease = sim.store.get('leases', 'kube-system', 'real-lease');
      const spec = lease?.['spec'] as Record<string, unknown>;
      assert.equal(spec['holderIdentity'], '', 'released');
      assert.match(String(spec['renewTime']), /\.\d{6}Z$/);

      // What a plain Date (JavaScript's toISOString) sends: refused by the JSON decoder before validation.
      const refused = await rejects(
        coordination.createNamespacedLease({
          namespace: 'kube-system',
          body: { metadata: { name: 'millis' }, spec: { holderIdentity: 'x', renewTime: new Date(0) } },
        }),
        400,
      );
      assert.equal(refused.reason, 'BadRequest');
      assert.equal(
        refused.message,
        'Lease in version "v1" cannot be handled as a Lease: parsing time "1970-01-01T00:00:00.000Z" as ' +
          '"2006-01-02T15:04:05.000000Z07:00": cannot parse ".000Z" as ".000000"',
      );
    });
  });

  describe('core/v1 Events (node controller, IPAM)', () => {
    test('the Event production records about a Node is accepted', async () => {
      const node = { name: 'n-event', uid: 'u-1' };
      const name = eventName(node, 'Warning', 'PodCIDRConflict', 'm', undefined);
      const event = nodeEvent(name, node, 'Warning', 'PodCIDRConflict', 'm', new Date());
      await core.createNamespacedEvent({ namespace: 'default', body: event });
      assert.ok(sim.store.get('events', 'default', event.metadata.name as string));
    });

    test('legacy validation: the involved object namespace must match, a new-style Event needs its reporter', async () => {
      const mismatched = await rejects(
        core.createNamespacedEvent({
          namespace: 'default',
          body: {
            metadata: { name: 'e-1' },
            involvedObject: { kind: 'Pod', name: 'p', namespace: 'kube-system' },
            reason: 'r',
          },
        }),
        422,
      );
      assert.match(
        mismatched.message,
        /involvedObject\.namespace: Invalid value: "kube-system": does not match event\.namespace/,
      );
      const reporterless = await rejects(
        core.createNamespacedEvent({
          namespace: 'default',
          body: {
            metadata: { name: 'e-2' },
            involvedObject: { kind: 'Node', name: 'n' },
            eventTime: '2026-01-02T03:04:05.000000Z' as unknown as Date,
            reportingComponent: 'kops-controller',
          },
        }),
        422,
      );
      assert.match(reporterless.message, /reportingInstance: Required value/);
      assert.match(reporterless.message, /action: Required value/);
    });
  });

  describe('CertificateSigningRequests (queue signer, kubelet CSR approver)', () => {
    async function approvedCsr(name: string): Promise<V1CertificateSigningRequest> {
      const { csr } = await createCertificateRequest({
        name: `system:node:${name}`,
        groups: ['system:nodes'],
      });
      await certs.createCertificateSigningRequest({
        body: {
          metadata: { name, annotations: { seal: 'original' } },
          spec: {
            request: Buffer.from(csr).toString('base64'),
            signerName: 'kops.k8s.io/node-bootstrap',
            usages: ['digital signature', 'key encipherment', 'client auth'],
          },
        },
      });
      const read = await certs.readCertificateSigningRequest({ name });
      read.status = { conditions: [{ type: 'Approved', status: 'True', reason: 'R', message: 'm' }] };
      return certs.replaceCertificateSigningRequestApproval({ name, body: read });
    }

    test('status.certificate must hold only parseable CERTIFICATE blocks', async () => {
      const csr = await approvedCsr('csr-real-1');
      const withCertificate = (pem: string): V1CertificateSigningRequest => ({
        ...csr,
        status: { ...csr.status, certificate: Buffer.from(pem).toString('base64') },
      });
      const key = '-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n';
      const wrongType = await rejects(
        certs.replaceCertificateSigningRequestStatus({ name: 'csr-real-1', body: withCertificate(key) }),
        422,
      );
      assert.match(wrongType.message, /only CERTIFICATE PEM blocks are allowed, found "PRIVATE KEY"/);
      const garbage = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
      await rejects(
        certs.replaceCertificateSigningRequestStatus({ name: 'csr-real-1', body: withCertificate(garbage) }),
        422,
      );
      // A leaf and its CA, as a signer may write a chain.
      const chain = `${sim.caCertificate.trim()}\n${sim.caCertificate}`;
      const signed = await certs.replaceCertificateSigningRequestStatus({
        name: 'csr-real-1',
        body: withCertificate(chain),
      });
      assert.equal(Buffer.from(signed.status?.certificate ?? '', 'base64').toString(), chain);
    });

    test('the subresources store metadata; /status restores Approved silently; /approval may add Failed', async () => {
      const csr = await approvedCsr('csr-real-2');
      // Metadata written through /approval is stored (csrApprovalStrategy resets spec and status only):
      // annotations are no proof of who wrote them, which is why production seals its own.
      const relabelled = await certs.replaceCertificateSigningRequestApproval({
        name: 'csr-real-2',
        body: { ...csr, metadata: { ...csr.metadata, annotations: { seal: 'forged' } } },
      });
      assert.equal(relabelled.metadata?.annotations?.['seal'], 'forged');
      // A /status write that changes the Approved condition gets the stored one back, no error.
      const changed = await certs.replaceCertificateSigningRequestStatus({
        name: 'csr-real-2',
        body: {
          ...relabelled,
          status: { conditions: [{ type: 'Approved', status: 'True', reason: 'Other', message: 'changed' }] },
        },
      });
      assert.equal(changed.status?.conditions?.[0]?.reason, 'R');
      const failed = await certs.replaceCertificateSigningRequestApproval({
        name: 'csr-real-2',
        body: {
          ...changed,
          status: {
            conditions: [
              ...(changed.status?.conditions ?? []),
              { type: 'Failed', status: 'True', reason: 'F', message: 'f' },
            ],
          },
        },
      });
      assert.deepEqual(
        failed.status?.conditions?.map((c) => c.type),
        ['Approved', 'Failed'],
      );
      // The condition statuses the API takes: True only for Approved/Denied/Failed, and never empty.
      const empty = await rejects(
        certs.replaceCertificateSigningRequestStatus({
          name: 'csr-real-2',
          body: {
            ...failed,
            status: { conditions: [...(failed.status?.conditions ?? []), { type: 'Custom', status: '' }] },
          },
        }),
        422,
      );
      assert.match(empty.message, /status\.conditions\[2\]\.status: Required value/);
    });
  });

  describe('what else production writes', () => {
    test('a signerName path is a DNS subdomain (ValidateSignerName); ours is one', async () => {
      const { csr } = await createCertificateRequest({ name: 'x', groups: [] });
      const body = (signerName: string) => ({
        metadata: { generateName: 'signer-' },
        spec: {
          request: Buffer.from(csr).toString('base64'),
          signerName,
          usages: ['digital signature', 'key encipherment', 'client auth'],
        },
      });
      const refused = await rejects(
        certs.createCertificateSigningRequest({ body: body('kops.k8s.io/Node_Bootstrap') }),
        422,
      );
      assert.match(refused.message, /spec\.signerName: Invalid value/);
      await certs.createCertificateSigningRequest({ body: body('kops.k8s.io/node-bootstrap') });
    });

    test('a Secret keeps its type (ValidateSecretUpdate); a PUT without one means Opaque', async () => {
      sim.store.create({
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: 's-type', namespace: 'kube-system' },
        type: 'bootstrap.kubernetes.io/token',
      });
      const changed = await rejects(
        core.replaceNamespacedSecret({
          name: 's-type',
          namespace: 'kube-system',
          body: { metadata: { name: 's-type' }, type: 'Opaque' },
        }),
        422,
      );
      assert.match(changed.message, /type: Invalid value: "Opaque": field is immutable/);
      await rejects(
        core.replaceNamespacedSecret({
          name: 's-type',
          namespace: 'kube-system',
          body: { metadata: { name: 's-type' } },
        }),
        422,
      );
    });
  });

  describe('annotations', () => {
    test('an object whose annotations total over 256 KiB is 422 (TotalAnnotationSizeLimitB)', async () => {
      const big = await rejects(
        core.createNamespacedConfigMap({
          namespace: 'default',
          body: { metadata: { name: 'big-annotations', annotations: { a: 'x'.repeat(256 * 1024) } } },
        }),
        422,
      );
      assert.match(big.message, /metadata\.annotations: Too long/);
    });
  });

  describe('PUT naming a uid', () => {
    test('another object under the name is a 409 precondition failure, which production reads as a uid mismatch', async () => {
      sim.store.create({
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: 'cm-uid', namespace: 'default' },
        data: { a: '1' },
      });
      const put = await kubeHttps(sim.kubeConfig(), { timeoutMs: 10_000 })({
        action: 'replace configmap',
        method: 'PUT',
        path: '/api/v1/namespaces/default/configmaps/cm-uid',
        body: JSON.stringify({ metadata: { name: 'cm-uid', uid: 'not-its-uid' }, data: { a: '2' } }),
      });
      assert.equal(put.status, 409);
      const error = kubeAnswerError(put, 'replace configmap');
      assert.ok(error instanceof ConflictError);
      assert.match(
        error.message,
        /Precondition failed: UID in precondition: not-its-uid, UID in object meta: /,
      );
      assert.ok(isUidMismatch(error));
      assert.deepEqual(sim.store.get('configmaps', 'default', 'cm-uid')?.['data'], { a: '1' });
    });
  });
});
