/**
 * The Kubernetes manifests of deploy/kubernetes: their configuration is one the controller accepts,
 * the DaemonSet runs the command and probes it serves, and the RBAC is enough. For the last, the
 * simulated cluster grants the controller's service account exactly the manifests' rules, and the
 * controller then does all of its work: leader election, node labels, discovery, aws and queued
 * bootstrap, signing, and the kubelet CSR approver, with no request refused.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CertificatesV1Api, CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { bootstrapSignerName } from '../src/bootstrap/queue.ts';
import { ConfigMapReplayGuard, replayMarkerMarginMs } from '../src/bootstrap/replay-guard.ts';
import { type DevController, startDevController } from '../src/cli/dev-controller.ts';
import { buildProgram } from '../src/cli/main.ts';
import { MachineIndex } from '../src/cloud/capi/machines.ts';
import { HostRegistry } from '../src/cloud/metal/hosts.ts';
import { parseConfig } from '../src/config/loader.ts';
import { labelsKeySecretName } from '../src/controllers/node/labels-key.ts';
import { ConfigMapLedgerStore } from '../src/ledger/store.ts';
import { createLogger } from '../src/log.ts';
import { managedLabelsSignatureAnnotation } from '../src/nodelabels/signed-managed-labels.ts';
import { buildCsrPem } from '../src/pki/csr-build.ts';
import { generateKey } from '../src/pki/keys.ts';
import { clusterInfoName, clusterInfoNamespace } from '../src/protocol/cluster-info.ts';
import type { GrantRule } from '../src/sim/apiserver/auth.ts';
import type { KubeObject } from '../src/sim/apiserver/index.ts';
import { type DevCluster, startDevCluster } from '../src/sim/dev-cluster.ts';
import { startJoiningNodes } from '../src/sim/joining-nodes.ts';
import { leaseHolder } from '../src/testing/leadership.ts';

interface Rule {
  apiGroups?: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}
interface Manifest {
  kind: string;
  metadata: { name: string; namespace?: string };
  rules?: Rule[];
  roleRef?: { kind: string; name: string };
  subjects?: { kind: string; name: string; namespace?: string }[];
  data?: Record<string, string>;
  // biome-ignore lint/suspicious/noExplicitAny: a DaemonSet spec, read in one test only.
  spec?: any;
}

const manifests = parseAllDocuments(
  await readFile(new URL('kubernetes/kops-controller.yaml', import.meta.url), 'utf8'),
).map((doc) => {
  assert.deepEqual(doc.errors, []);
  return doc.toJS() as Manifest;
});

function only(kind: string, namespace?: string): Manifest {
  const found = manifests.filter((m) => m.kind === kind && m.metadata.namespace === namespace);
  assert.equal(found.length, 1, `one ${kind} in ${namespace ?? 'the cluster scope'}`);
  return found[0] as Manifest;
}

const serviceAccount = only('ServiceAccount', 'kube-system');
const serviceAccountUser = `system:serviceaccount:kube-system:${serviceAccount.metadata.name}`;

/** The sim grants for every rule of every role bound to the service account. */
function grantsOfServiceAccount(): GrantRule[] {
  const grants: GrantRule[] = [];
  for (const binding of manifests.filter(
    (m) => m.kind === 'ClusterRoleBinding' || m.kind === 'RoleBinding',
  )) {
    const bound = binding.subjects?.some(
      (s) =>
        s.kind === 'ServiceAccount' &&
        s.name === serviceAccount.metadata.name &&
        s.namespace === serviceAccount.metadata.namespace,
    );
    if (!bound) continue;
    const roleKind = binding.roleRef?.kind;
    const role = manifests.find(
      (m) =>
        m.kind === roleKind &&
        m.metadata.name === binding.roleRef?.name &&
        (roleKind === 'ClusterRole' || m.metadata.namespace === binding.metadata.namespace),
    );
    assert.ok(role, `${binding.kind} ${binding.metadata.name} refers to a role of the manifests`);
    for (const rule of role.rules ?? []) {
      grants.push({
        user: serviceAccountUser,
        verbs: rule.verbs,
        resources: rule.resources,
        ...(binding.kind === 'RoleBinding' ? { namespace: binding.metadata.namespace as string } : {}),
        ...(rule.resourceNames ? { names: rule.resourceNames } : {}),
      });
    }
  }
  return grants;
}

/** Lets the event loop turn until `check` holds (bounded, so a failure fails instead of hanging). */
async function until(what: string, check: () => Promise<boolean> | boolean): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.fail(`${what} never happened; refused: ${refused.join(', ')}`);
}

/** Waits for `promise`, failing after 30 s instead of hanging the suite when a permission is missing. */
async function settles<T>(what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} did not finish in 30 s; refused: ${refused.join(', ')}`)),
      30_000,
    );
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Requests the simulated API server refused (user and path). */
const refused: string[] = [];

describe('deploy/kubernetes/kops-controller.yaml', () => {
  test('its configuration is one the controller accepts', () => {
    const config = parseConfig(
      (parseAllDocuments(only('ConfigMap', 'kube-system').data?.['config.yaml'] ?? '')[0]?.toJS() ??
        {}) as object,
    );
    assert.equal(config.server?.Listen, ':3988');
    assert.deepEqual(config.server?.certNames, ['kubelet', 'kubelet-server', 'kube-proxy']);
  });

  test('the DaemonSet runs `run` with the mounted config, probes what the controller serves, as the service account', () => {
    const pod = only('DaemonSet', 'kube-system').spec.template.spec;
    assert.equal(pod.serviceAccountName, serviceAccount.metadata.name);
    const [container] = pod.containers;
    assert.equal(container.args[0], 'run');
    const conf = (container.args as string[]).find((a) => a.startsWith('--conf='))?.slice('--conf='.length);
    const configMount = container.volumeMounts.find((m: { name: string }) => m.name === 'config');
    assert.equal(conf, `${configMount.mountPath}/config.yaml`);
    assert.deepEqual(
      [container.readinessProbe.httpGet.path, container.livenessProbe.httpGet.path],
      ['/readyz', '/healthz'],
    );
    const ports = Object.fromEntries(
      container.ports.map((p: { name: string; containerPort: number }) => [p.name, p.containerPort]),
    );
    assert.deepEqual(ports, { metrics: 3987, bootstrap: 3988 });
    assert.equal(container.securityContext.allowPrivilegeEscalation, false);
  });

  // kops' DaemonSet (upupmodels kops-controller.addons.k8s.io/k8s-1.16.yaml.template) and nodeup
  // (nodeup/pkg/model/kops_controller.go): where a swap-in must do as kops does.
  const daemonSet = () => only('DaemonSet', 'kube-system').spec;
  const kopsConfig = () =>
    parseConfig(
      (parseAllDocuments(only('ConfigMap', 'kube-system').data?.['config.yaml'] ?? '')[0]?.toJS() ??
        {}) as object,
    );

  test("the PKI files nodeup writes on the host are where kops' config (and ours) reads them in the container", () => {
    const pod = daemonSet().template.spec;
    const [container] = pod.containers;
    /** The host path behind a container path, through the container's hostPath mounts. */
    const hostPathOf = (path: string): string | undefined => {
      for (const mount of container.volumeMounts as { name: string; mountPath: string }[]) {
        const volume = (pod.volumes as { name: string; hostPath?: { path: string; type?: string } }[]).find(
          (v) => v.name === mount.name,
        );
        const inside = mount.mountPath.replace(/\/+$/, '');
        if (!volume?.hostPath || !path.startsWith(`${inside}/`)) continue;
        return `${volume.hostPath.path.replace(/\/+$/, '')}${path.slice(inside.length)}`;
      }
      return undefined;
    };
    const server = kopsConfig().server;
    // kops' KopsControllerConfig writes these container paths; nodeup writes the files to the host folder.
    assert.equal(server?.caBasePath, '/etc/kubernetes/kops-controller/pki');
    const nodeupDir = '/etc/kubernetes/kops-controller';
    for (const [inContainer, file] of [
      [server?.serverCertificatePath, 'kops-controller.crt'],
      [server?.serverKeyPath, 'kops-controller.key'],
      [`${server?.caBasePath}/kubernetes-ca.crt`, 'kubernetes-ca.crt'],
      [`${server?.caBasePath}/kubernetes-ca.key`, 'kubernetes-ca.key'],
      [`${server?.caBasePath}/keypair-ids.yaml`, 'keypair-ids.yaml'],
    ] as const) {
      assert.equal(hostPathOf(inContainer ?? ''), `${nodeupDir}/${file}`, inContainer);
    }
    const pki = (pod.volumes as { name: string; hostPath?: { path: string; type?: string } }[]).find(
      (v) => v.hostPath,
    );
    // nodeup creates the folder on every control-plane node; kops' volume requires it.
    assert.equal(pki?.hostPath?.type, 'Directory');
  });

  test("it is scheduled, updated and pointed at the API server as kops' DaemonSet is", () => {
    const spec = daemonSet();
    const pod = spec.template.spec;
    const [container] = pod.containers;
    // Only control-plane nodes nodeup wrote the PKI for (kops' mandatory control-plane label).
    assert.equal(pod.nodeSelector, undefined);
    const terms =
      pod.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
    assert.deepEqual(terms, [
      {
        matchExpressions: [
          { key: 'node-role.kubernetes.io/control-plane', operator: 'Exists' },
          { key: 'kops.k8s.io/kops-controller-pki', operator: 'Exists' },
        ],
      },
    ]);
    const tolerated = (pod.tolerations as { key: string; operator: string }[]).map(
      (t) => `${t.key} ${t.operator}`,
    );
    for (const key of [
      'node.cloudprovider.kubernetes.io/uninitialized',
      'node.kubernetes.io/not-ready',
      'node-role.kubernetes.io/master',
      'node-role.kubernetes.io/control-plane',
    ]) {
      assert.ok(tolerated.includes(`${key} Exists`), key);
    }
    // kops replaces the pod with its control-plane node (rolling update of the instance group).
    assert.deepEqual(spec.updateStrategy, { type: 'OnDelete' });
    assert.equal(pod.hostNetwork, true);
    assert.equal(pod.dnsPolicy, 'Default');
    assert.equal(pod.priorityClassName, 'system-cluster-critical');
    // The local API server: it runs before (and without) the service network.
    assert.deepEqual(
      (container.env as { name: string; value: string }[]).find((e) => e.name === 'KUBERNETES_SERVICE_HOST'),
      { name: 'KUBERNETES_SERVICE_HOST', value: '127.0.0.1' },
    );
    // dns-controller publishes kops-controller.internal.<cluster>, the name nodes bootstrap against.
    assert.equal(
      spec.template.metadata.annotations?.['dns.alpha.kubernetes.io/internal'],
      `kops-controller.internal.${kopsConfig().clusterName}`,
    );
    assert.equal(pod.securityContext.runAsUser, 10011);
    assert.equal(pod.securityContext.runAsNonRoot, true);
    // No memory limit, as kops: at the scale this controller targets (docs/performance.md) it needs
    // about 1 GiB, and a limit below that would kill it.
    assert.equal(container.resources.limits?.memory, undefined);
  });

  test("its args are kops' (--v=2 --conf=…) after `run`, the image's entrypoint unchanged, and the CLI parses them", async () => {
    const [container] = daemonSet().template.spec.containers;
    assert.equal(container.command, undefined);
    assert.deepEqual(container.args, [
      'run',
      '--v=2',
      '--conf=/etc/kubernetes/kops-controller/config/config.yaml',
    ]);
    const program = await buildProgram(['run']);
    let parsed: { conf?: string } | undefined;
    program.commands
      .find((c) => c.name() === 'run')
      ?.action((options: { conf?: string }) => {
        parsed = options;
      });
    await program.parseAsync(container.args, { from: 'user' });
    assert.equal(parsed?.conf, '/etc/kubernetes/kops-controller/config/config.yaml');
    assert.equal(program.opts()['v'], '2');
  });

  describe('its RBAC is enough for everything the controller does', () => {
    let dir: string;
    let cluster: DevCluster;
    let controller: DevController;
    let asController: KubeConfig;

    before(async () => {
      dir = await mkdtemp(join(tmpdir(), 'deploy-rbac-'));
      // The simulated API server logs every request at debug level: collect those it refused.
      const destination = {
        write(line: string) {
          const record = JSON.parse(line) as { msg?: string; code?: number; user?: string; path?: string };
          if (record.msg === 'apiserver request' && record.code === 403) {
            refused.push(`${record.user} ${record.path}`);
          }
        },
      };
      cluster = await startDevCluster({
        stateDir: dir,
        awsThrottling: false,
        logger: createLogger({ level: 'debug', destination }),
      });
      for (const grant of grantsOfServiceAccount()) cluster.api.server.grant(grant);
      // The empty key Secret the manifest ships, which the controller fills (it may not create Secrets).
      cluster.api.server.store.create(only('Secret', 'kube-system') as unknown as KubeObject);
      asController = cluster.api.server.kubeConfig({
        name: serviceAccountUser,
        groups: ['system:serviceaccounts', 'system:serviceaccounts:kube-system'],
      });
      controller = await startDevController(cluster, { bootstrapPolicy: 'aws', kubeConfig: asController });
    });
    after(async () => {
      await settles('stopping the controller', controller.stop());
      await cluster.close();
      await rm(dir, { recursive: true, force: true });
    });

    test('leads, labels nodes, exports the validation gauges and publishes discovery', async () => {
      const admin = cluster.api.server.kubeConfig();
      await until('the lease is held', async () => (await leaseHolder(admin)) !== undefined);
      const core = admin.makeApiClient(CoreV1Api);
      // Signed: the controller filled the manifest's key Secret under these rules; without it, it
      // would add labels but sign nothing.
      await until('every node is labelled, its managed set signed', async () =>
        (await core.listNode()).items.every(
          (n) =>
            n.metadata?.labels?.['kops.k8s.io/instancegroup'] &&
            n.metadata.annotations?.[managedLabelsSignatureAnnotation],
        ),
      );
      const secret = await core.readNamespacedSecret({ name: labelsKeySecretName, namespace: 'kube-system' });
      assert.equal(Buffer.from(secret.data?.['key'] ?? '', 'base64').length, 32, 'the key Secret was filled');
      assert.equal(secret.immutable, true);
      await until('the kops_* gauges are exported', async () =>
        /^kops_node_ready\{cluster_name="minimal\.example\.com"\} \d+$/m.test(
          await (await fetch(`${controller.url}/metrics`)).text(),
        ),
      );
      await until('cluster-info is published', async () =>
        Boolean(
          await core
            .readNamespacedConfigMap({ name: clusterInfoName, namespace: clusterInfoNamespace })
            .catch(() => undefined),
        ),
      );
      assert.deepEqual(refused, []);
    });

    test("the replay guard's calls are granted: a retry of the same request is told from a replay", async () => {
      // The guard reads a marker that exists (get) to tell a node's retry from a replay: without the
      // verb both would be a 503 instead of an answer.
      const guard = new ConfigMapReplayGuard({ core: asController.makeApiClient(CoreV1Api) });
      const digest = 'ab'.repeat(32);
      const expires = new Date(Date.now() + 300_000);
      assert.equal(await guard.claim(digest, expires, '01'.repeat(32)), true);
      assert.equal(
        await guard.claim(digest, expires, '01'.repeat(32)),
        true,
        'the same request is its retry',
      );
      assert.equal(await guard.claim(digest, expires, '02'.repeat(32)), false, 'another request is a replay');
      // Collected once past its expiry by the margin that covers the replicas' clocks.
      assert.equal(await guard.collectGarbage(new Date(expires.getTime() + replayMarkerMarginMs + 1000)), 1);
      assert.deepEqual(refused, []);
    });

    /** New machines joining through the running controller's bootstrap server. */
    function joinMachines(count: number, proof: 'cloud' | 'none') {
      const bootstrap = controller.bootstrap;
      assert.ok(bootstrap);
      return startJoiningNodes({
        cluster,
        server: bootstrap.url,
        caPin: bootstrap.caPin,
        count,
        proof,
        dir: join(dir, `${proof}-nodes`),
      });
    }

    test("kops metal's Host reads and Cluster API's Machine watch are granted", async () => {
      const admin = cluster.api.server.kubeConfig().makeApiClient(CoreV1Api);
      await admin.createNamespace({ body: { metadata: { name: 'kops-system' } } }).catch(() => undefined);
      assert.equal(await new HostRegistry(asController).get('metal-1'), undefined);
      const machines = new MachineIndex({ kubeConfig: asController });
      machines.start();
      try {
        assert.equal(await machines.waitForSync(AbortSignal.timeout(10_000)), true);
      } finally {
        await machines.stop();
      }
      assert.deepEqual(refused, []);
    });

    test('nodes join through aws; a kubelet renewal is approved', async () => {
      const joining = joinMachines(2, 'cloud');
      await settles('joining through aws', joining.done).finally(() => joining.stop());
      assert.deepEqual(joining.status(), { total: 2, joined: 2, waiting: 0, failed: 0 }, refused.join(', '));

      const node = joining.nodes[0] as string;
      const kubelet = cluster.api.server.kubeConfig({
        name: `system:node:${node}`,
        groups: ['system:nodes'],
      });
      const request = buildCsrPem(generateKey(), {
        subject: { commonName: `system:node:${node}`, organizations: ['system:nodes'] },
      });
      await kubelet.makeApiClient(CertificatesV1Api).createCertificateSigningRequest({
        body: {
          metadata: { name: 'renewal-1' },
          spec: {
            request: Buffer.from(request).toString('base64'),
            signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
            usages: ['digital signature', 'client auth'],
          },
        },
      });
      const certificates = cluster.api.server.kubeConfig().makeApiClient(CertificatesV1Api);
      await until('the renewal is approved', async () => {
        const csr = await certificates.readCertificateSigningRequest({ name: 'renewal-1' });
        return Boolean(csr.status?.conditions?.some((c) => c.type === 'Approved'));
      });
      assert.deepEqual(refused, []);
    });

    test('a queued request approved by an admin is signed by the controller', async () => {
      // The controller again, now with the queue as its policy (it takes the lease over on release).
      await controller.stop();
      controller = await startDevController(cluster, { bootstrapPolicy: 'queue', kubeConfig: asController });
      const joining = joinMachines(1, 'none');
      try {
        const certificates = cluster.api.server.kubeConfig().makeApiClient(CertificatesV1Api);
        let name: string | undefined;
        await until('the request is queued', async () => {
          const list = await certificates.listCertificateSigningRequest();
          name = list.items.find((csr) => csr.spec.signerName === bootstrapSignerName)?.metadata?.name;
          return name !== undefined;
        });
        const csr = await certificates.readCertificateSigningRequest({ name: name as string });
        const approved = { type: 'Approved', status: 'True', reason: 'AdminApproved', message: 'test' };
        await certificates.replaceCertificateSigningRequestApproval({
          name: name as string,
          body: { ...csr, status: { ...csr.status, conditions: [approved] } },
        });
        await settles('joining through the queue', joining.done);
      } finally {
        joining.stop();
      }
      assert.deepEqual(joining.status(), { total: 1, joined: 1, waiting: 0, failed: 0 }, refused.join(', '));
      assert.deepEqual(refused, []);
    });

    test('every certificate it issued or holds is in the expiry ledger, and the leader exports the CA expiry', async () => {
      const ledger = new ConfigMapLedgerStore({
        core: cluster.api.server.kubeConfig().makeApiClient(CoreV1Api),
      });
      // The joins through aws (native path) and through the queue (the leader's signer), the CA, the serving certificate.
      await until('the ledger holds every kind, and the three joined nodes', async () => {
        const entries = await ledger.list();
        const kinds = new Set(entries.map((entry) => entry.kind));
        return (
          ['kubelet', 'kubelet-server', 'ca', 'kops-controller-serving'].every((kind) => kinds.has(kind)) &&
          entries.filter((entry) => entry.kind === 'kubelet').length === 3
        );
      });
      await until('the expiry gauge is exported', async () =>
        /^kops_certificate_expiry_earliest_timestamp_seconds\{kind="ca",instance_group=""\} \d+$/m.test(
          await (await fetch(`${controller.url}/metrics`)).text(),
        ),
      );
      assert.deepEqual(refused, []);
    });
  });
});
