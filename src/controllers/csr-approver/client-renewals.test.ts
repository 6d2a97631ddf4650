/**
 * csrApprover.clientRenewals through the real approver against the simulated API server and clouds:
 * `leave` leaves a node's client renewal pending for a human (said once, no cloud call, nothing
 * written) while serving requests are decided as before; `approve` is the approver as it was.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CertificatesV1Api, type KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { GceNodeIdentifier } from '../../cloud/gce/node-identifier.ts';
import type { NodeIdentifier } from '../../cloud/types.ts';
import { csrInformer } from '../../kube/shared-informer.ts';
import { buildCsrPem } from '../../pki/csr-build.ts';
import { generateKey } from '../../pki/keys.ts';
import { type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { simulatorCompute } from '../../sim/gce/clients.ts';
import { type GceSimulator, startGceSimulator } from '../../sim/gce/simulator.ts';
import { startAwsDevCluster } from '../../testing/aws-dev-cluster.ts';
import { capturedLogger } from '../../testing/log-capture.ts';
import { kubeletClientSigner, kubeletServingSigner } from './checks.ts';
import { type ClientRenewals, CsrApprover, clientRenewalLeftReason } from './csr-approver.ts';

const clientUsages = ['digital signature', 'client auth'];
const servingUsages = ['digital signature', 'key encipherment', 'server auth'];

interface Condition {
  type: string;
  reason: string;
  message: string;
}

type Store = SimApiServer['store'];

function nodeUser(node: string) {
  return { name: `system:node:${node}`, groups: ['system:nodes', 'system:authenticated'] };
}

let counter = 0;

/** Creates a CSR through the API as `kubeConfig`'s user, so the API server stamps the requester. */
async function createCsr(
  kubeConfig: KubeConfig,
  options: { commonName: string; signerName: string; usages: string[]; ipAddresses?: string[] },
): Promise<string> {
  const name = `csr-renewals-${counter++}`;
  const request = buildCsrPem(generateKey(), {
    subject: { commonName: options.commonName, organizations: ['system:nodes'] },
    ...(options.ipAddresses ? { ipAddresses: options.ipAddresses } : {}),
  });
  await kubeConfig.makeApiClient(CertificatesV1Api).createCertificateSigningRequest({
    body: {
      metadata: { name },
      spec: {
        request: Buffer.from(request).toString('base64'),
        signerName: options.signerName,
        usages: options.usages,
      },
    },
  });
  return name;
}

function conditionsOf(store: Store, name: string): Condition[] {
  const status = store.get('certificatesigningrequests', undefined, name)?.['status'] as
    | { conditions?: Condition[] }
    | undefined;
  return status?.conditions ?? [];
}

async function eventually(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.fail(`timed out waiting until ${what}`);
}

async function decided(store: Store, name: string): Promise<Condition> {
  let condition: Condition | undefined;
  await eventually(`CSR ${name} is decided`, () => {
    [condition] = conditionsOf(store, name);
    return condition !== undefined;
  });
  return condition as Condition;
}

async function metricValue(registry: Registry, labels: Record<string, string>): Promise<number> {
  const metric = await registry.getSingleMetric('kops_controller_csr_approver_decisions_total')?.get();
  const value = metric?.values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l));
  return value?.value ?? 0;
}

/** The approver's lines about one CSR, parsed. */
function linesAbout(lines: string[], csr: string): Record<string, unknown>[] {
  return lines
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => line['csr'] === csr);
}

function startApprover(options: {
  kubeConfig: KubeConfig;
  identifier: NodeIdentifier;
  clientRenewals?: ClientRenewals;
}) {
  const registry = new Registry();
  const { logger, lines } = capturedLogger();
  const stop = new AbortController();
  const approver = new CsrApprover({ ...options, csrs: csrInformer(options.kubeConfig), registry, logger });
  const running = approver.start(stop.signal);
  return {
    approver,
    registry,
    lines,
    stop: async () => {
      stop.abort();
      await running;
    },
  };
}

const leftLabels = { signer: kubeletClientSigner, decision: 'left-pending', reason: clientRenewalLeftReason };

describe('csrApprover.clientRenewals on AWS', async () => {
  const aws = await startAwsDevCluster('csr-client-renewals-', { awsThrottling: false });
  const { cluster, store, provider } = aws;
  const [nodeA, nodeB] =
    cluster.nodesByGroup.get('nodes-us-test-1a') ?? cluster.nodesByGroup.get('nodes') ?? [];
  assert.ok(nodeA && nodeB, 'the sample cluster has at least two worker nodes in one group');
  after(() => aws.close());

  const ownIp = async (node: string) => {
    const spec = store.get('nodes', undefined, node)?.['spec'] as { providerID?: string } | undefined;
    const providerID = spec?.providerID;
    assert.ok(providerID);
    const result = (await provider.nodeIdentifier.identify([providerID])).get(providerID);
    assert.ok(result?.ok);
    const ip = result.identity.addresses.find((a) => a.type === 'InternalIP')?.address;
    assert.ok(ip);
    return ip;
  };

  describe('leave', () => {
    let run: ReturnType<typeof startApprover>;
    before(() => {
      run = startApprover({
        kubeConfig: cluster.api.server.kubeConfig(),
        identifier: provider.nodeIdentifier,
        clientRenewals: 'leave',
      });
    });
    after(() => run.stop());

    test("a node's own client renewal stays pending, neither approved nor denied, said once with the reason, and costs no cloud call", async () => {
      assert.equal(run.approver.clientRenewals, 'leave');
      const before = cluster.aws.calls.count('DescribeInstances');
      const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
        commonName: `system:node:${nodeA}`,
        signerName: kubeletClientSigner,
        usages: clientUsages,
      });
      await eventually(
        'the renewal is counted as left for a human',
        async () => (await metricValue(run.registry, leftLabels)) === 1,
      );
      const [line, ...more] = linesAbout(run.lines, name);
      assert.deepEqual(more, [], 'one line for the CSR');
      assert.equal(line?.['msg'], 'left for a human: kubectl certificate approve|deny');
      assert.equal(line?.['reason'], clientRenewalLeftReason);
      assert.equal(line?.['requester'], `system:node:${nodeA}`);
      assert.match(
        String(line?.['message']),
        new RegExp(
          `csrApprover\\.clientRenewals: leave.*cannot tell node ${nodeA}'s current machine from an earlier machine of that name`,
        ),
      );
      assert.deepEqual(conditionsOf(store, name), [], 'nothing is written to the CSR');
      assert.equal(cluster.aws.calls.count('DescribeInstances'), before, 'the cloud is not asked');

      // The CSR changes (a label, as a human or a tool might add): looked at again, not said again.
      const csr = store.get('certificatesigningrequests', undefined, name);
      assert.ok(csr);
      const metadata = csr['metadata'] as Record<string, unknown>;
      store.update({ ...csr, metadata: { ...metadata, labels: { seen: 'yes' } } });
      // A serving request created after it is decided, so the label's update has been handled by then.
      const serving = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
        commonName: `system:node:${nodeA}`,
        signerName: kubeletServingSigner,
        usages: servingUsages,
        ipAddresses: [await ownIp(nodeA)],
      });
      assert.equal((await decided(store, serving)).type, 'Approved');
      assert.equal(await metricValue(run.registry, leftLabels), 1, 'counted once');
      assert.equal(linesAbout(run.lines, name).length, 1, 'said once');
      assert.deepEqual(conditionsOf(store, name), [], 'still pending, for a human');
    });

    test('serving requests are decided as before: the node’s own addresses approved, a foreign one denied', async () => {
      const approved = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeB)), {
        commonName: `system:node:${nodeB}`,
        signerName: kubeletServingSigner,
        usages: servingUsages,
        ipAddresses: [await ownIp(nodeB)],
      });
      const yes = await decided(store, approved);
      assert.equal(yes.type, 'Approved');
      assert.equal(yes.reason, 'AutoApproved');
      const foreign = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeB)), {
        commonName: `system:node:${nodeB}`,
        signerName: kubeletServingSigner,
        usages: servingUsages,
        ipAddresses: ['203.0.113.9'],
      });
      const no = await decided(store, foreign);
      assert.equal(no.type, 'Denied');
      assert.equal(no.reason, 'SubjectAltNamesNotOfInstance');
    });

    test('a client request that fails a check needing no cloud (another node’s name) is still denied', async () => {
      const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
        commonName: `system:node:${nodeB}`,
        signerName: kubeletClientSigner,
        usages: clientUsages,
      });
      const condition = await decided(store, name);
      assert.equal(condition.type, 'Denied');
      assert.equal(condition.reason, 'SubjectIsNotRequester');
    });

    test('a human’s approval of a renewal left pending stands; the approver writes nothing after it', async () => {
      const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeB)), {
        commonName: `system:node:${nodeB}`,
        signerName: kubeletClientSigner,
        usages: clientUsages,
      });
      await eventually('the renewal is said to be left', () => linesAbout(run.lines, name).length === 1);
      const admin = cluster.api.server.kubeConfig().makeApiClient(CertificatesV1Api);
      const csr = await admin.readCertificateSigningRequest({ name });
      csr.status = {
        ...csr.status,
        conditions: [
          { type: 'Approved', status: 'True', reason: 'KubectlApprove', message: 'approved by an admin' },
        ],
      };
      await admin.replaceCertificateSigningRequestApproval({ name, body: csr });
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.deepEqual(
        conditionsOf(store, name).map((c) => c.reason),
        ['KubectlApprove'],
      );
      assert.equal(linesAbout(run.lines, name).length, 1);
    });
  });

  describe('approve', () => {
    test("a node's own client renewal is approved when its instance runs, as before", async () => {
      const run = startApprover({
        kubeConfig: cluster.api.server.kubeConfig(),
        identifier: provider.nodeIdentifier,
        clientRenewals: 'approve',
      });
      try {
        assert.equal(run.approver.clientRenewals, 'approve');
        const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
          commonName: `system:node:${nodeA}`,
          signerName: kubeletClientSigner,
          usages: clientUsages,
        });
        const condition = await decided(store, name);
        assert.equal(condition.type, 'Approved');
        assert.equal(condition.reason, 'AutoApproved');
        assert.match(
          condition.message,
          new RegExp(`node ${nodeA} renews its own kubelet client certificate`),
        );
        assert.equal(await metricValue(run.registry, leftLabels), 0);
      } finally {
        await run.stop();
      }
    });

    test('the approver approves client renewals unless told otherwise (the controller passes the config’s mode)', () => {
      const approver = new CsrApprover({
        kubeConfig: cluster.api.server.kubeConfig(),
        csrs: csrInformer(cluster.api.server.kubeConfig()),
        identifier: provider.nodeIdentifier,
        registry: new Registry(),
      });
      assert.equal(approver.clientRenewals, 'approve');
    });
  });
});

/**
 * tmp/redteam/03's attack: a kubelet key of a GCE instance that its MIG then recreated under the same
 * name (same providerID, new numeric id, new address). The approver cannot tell the two machines
 * apart: `approve` gives the old key's holder a fresh client certificate; `leave` does not.
 */
describe('csrApprover.clientRenewals on GCE, an instance recreated under its name', () => {
  const clusterName = 'renewals.example.com';
  const zone = 'us-central1-a';
  let api: SimApiServer;
  let gce: GceSimulator;
  let identifier: GceNodeIdentifier;
  let name: string;
  let newAddress: string;
  before(async () => {
    api = await startApiServer();
    gce = await startGceSimulator();
    identifier = new GceNodeIdentifier({ compute: simulatorCompute(gce), clusterName } as never);
    const project = gce.world.defaultProject;
    const [first] = gce.seedInstanceGroup({ zone, instanceGroup: 'nodes', count: 1, clusterName });
    assert.ok(first);
    name = first.name;
    api.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name },
      spec: { providerID: `gce://${project}/${zone}/${name}` },
    });
    gce.world.deleteInstance(zone, name);
    const second = gce.seedInstance({
      zone,
      name,
      metadata: { 'created-by': gce.world.createdBy(zone, `a-nodes-${zone}`) },
    });
    gce.seedMig({ zone, name: `a-nodes-${zone}`, instanceTemplate: `nodes-${zone}-tpl`, members: [name] });
    assert.notEqual(second.id, first.id, 'another machine');
    newAddress = second.networkIP;
  });
  after(async () => {
    await Promise.all([api.close(), gce.close()]);
  });

  /** The old machine's key, authenticated as the node: a client and a serving request. */
  async function requests(): Promise<{ client: string; serving: string }> {
    const asNode = api.kubeConfig(nodeUser(name));
    const client = await createCsr(asNode, {
      commonName: `system:node:${name}`,
      signerName: kubeletClientSigner,
      usages: clientUsages,
    });
    const serving = await createCsr(asNode, {
      commonName: `system:node:${name}`,
      signerName: kubeletServingSigner,
      usages: servingUsages,
      ipAddresses: [newAddress],
    });
    return { client, serving };
  }

  test('leave: the client request is left for a human; the serving request, for the new machine’s address, is approved as before', async () => {
    const run = startApprover({ kubeConfig: api.kubeConfig(), identifier, clientRenewals: 'leave' });
    try {
      const { client, serving } = await requests();
      assert.equal((await decided(api.store, serving)).type, 'Approved');
      await eventually(
        'the client request is left for a human',
        () => linesAbout(run.lines, client).length === 1,
      );
      assert.deepEqual(conditionsOf(api.store, client), []);
    } finally {
      await run.stop();
    }
  });

  test('approve: both are approved, the risk approve carries where names are reused', async () => {
    const run = startApprover({ kubeConfig: api.kubeConfig(), identifier, clientRenewals: 'approve' });
    try {
      const { client, serving } = await requests();
      assert.equal((await decided(api.store, client)).type, 'Approved');
      assert.equal((await decided(api.store, serving)).type, 'Approved');
    } finally {
      await run.stop();
    }
  });
});
