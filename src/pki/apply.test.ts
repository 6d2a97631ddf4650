import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { describe, test } from 'node:test';
import { parse } from 'yaml';
import { nativeProfiles } from '../bootstrap/native-handler.ts';
import { exitCodeOf, InvalidInputError } from '../errors.ts';
import { openVfs } from '../statestore/open.ts';
import type { Vfs } from '../statestore/types.ts';
import { executePlan, planApply } from './apply.ts';
import { parseApplySpec, type WantedEntry, wantedEntries } from './apply-spec.ts';
import { type CertificateAuthority, createCa, rotateCa } from './ca.ts';
import { RequestRejectedError } from './csr.ts';
import { readText } from './folder.ts';
import { generateKey, parsePrivateKeyPem, spkiOf } from './keys.ts';
import { issueCertificate, profileNamed, publicKeyRequest } from './profiles.ts';
import { parseCertificate } from './x509.ts';

let stores = 0;
const memfs = () => openVfs(`memfs://pki-apply-test/${stores++}`);
const ca = createCa();
const hourMs = 3_600_000;

const clusterFile = `
cluster:
  name: example.com
  serviceClusterIPRange: 100.64.0.0/13
server: https://api.example.com:6443
controlPlane:
  names: [api.example.com, lb.example.com]
  addresses: [10.0.0.10]
admins:
  - name: alice
nodes:
  - name: node-a
    addresses: [10.0.0.11]
    names: [node-a.internal]
  - name: node-b
`;

const entriesOf = (text: string) => wantedEntries(parseApplySpec(text, 'cluster.yaml'));

async function apply(
  vfs: Vfs,
  entries: readonly WantedEntry[],
  options: { now?: Date; renewBeforeMs?: number } = {},
  authority: CertificateAuthority = ca,
) {
  const plan = await planApply(vfs, authority, entries, options);
  return { plan, result: await executePlan(vfs, plan, options.now ? { now: options.now } : {}) };
}

const actions = (plan: Awaited<ReturnType<typeof planApply>>) =>
  Object.fromEntries(plan.entries.map((p) => [p.entry.path, p.decision.action]));

async function certificateAt(vfs: Vfs, path: string) {
  const pem = await readText(vfs, `${path}.crt`);
  assert.ok(pem, `${path}.crt exists`);
  return { pem, parsed: parseCertificate(Buffer.from(new X509Certificate(pem).raw)) };
}

/** Every certificate in the folder has its own key beside it (or none), never another's. */
async function assertNoMismatchedPair(vfs: Vfs): Promise<number> {
  let pairs = 0;
  for (const path of (await vfs.list('')).filter(
    (p) => p.endsWith('.crt') && !p.startsWith('kubernetes-ca'),
  )) {
    const keyPem = await readText(vfs, path.replace(/\.crt$/, '.key'));
    if (keyPem === undefined) continue;
    const certificate = new X509Certificate((await readText(vfs, path)) as string);
    assert.ok(
      spkiOf(parsePrivateKeyPem(keyPem)).equals(spkiOf(certificate.publicKey)),
      `${path} and its key belong together`,
    );
    pairs++;
  }
  return pairs;
}

describe('the apply file', () => {
  test('lists the control plane, the admins and each node with its kubeconfigs', () => {
    const entries = entriesOf(clusterFile);
    assert.deepEqual(
      entries.map((e) => [e.path, e.profile, e.kubeconfig?.server ?? '-', e.kubeconfig?.user ?? '-']),
      [
        ['control-plane/kube-apiserver', 'kube-apiserver', '-', '-'],
        [
          'control-plane/kube-controller-manager',
          'kube-controller-manager',
          'https://127.0.0.1',
          'system:kube-controller-manager',
        ],
        ['control-plane/kube-scheduler', 'kube-scheduler', 'https://127.0.0.1', 'system:kube-scheduler'],
        ['admins/alice', 'admin', 'https://api.example.com:6443', 'alice'],
        ['nodes/node-a/kubelet', 'kubelet', 'https://api.example.com:6443', 'system:node:node-a'],
        ['nodes/node-a/kubelet-server', 'kubelet-server', '-', '-'],
        ['nodes/node-a/kube-proxy', 'kube-proxy', 'https://api.example.com:6443', 'system:kube-proxy'],
        ['nodes/node-b/kubelet', 'kubelet', 'https://api.example.com:6443', 'system:node:node-b'],
        ['nodes/node-b/kube-proxy', 'kube-proxy', 'https://api.example.com:6443', 'system:kube-proxy'],
      ],
    );
  });

  test("the API server's names are kOps': service names, api.<cluster>, api.internal.<cluster>, extra names, service IP, 127.0.0.1", () => {
    const [apiServer] = entriesOf(clusterFile);
    assert.deepEqual(apiServer?.identity, {
      name: 'kube-apiserver',
      dnsNames: [
        'kubernetes',
        'kubernetes.default',
        'kubernetes.default.svc',
        'kubernetes.default.svc.cluster.local',
        'api.example.com',
        'api.internal.example.com',
        'lb.example.com',
      ],
      ipAddresses: ['100.64.0.1', '127.0.0.1', '10.0.0.10'],
    });
  });

  test("the cluster domain and service range change the names; without a range, kOps' 100.64.0.0/13", () => {
    const [apiServer] = entriesOf(
      'cluster: {dnsDomain: k8s.corp, serviceClusterIPRange: [10.96.0.0/12, "fd00:10:96::/112"]}\ncontrolPlane: {components: [kube-apiserver]}',
    );
    assert.ok(apiServer?.identity.dnsNames?.includes('kubernetes.default.svc.k8s.corp'));
    assert.deepEqual(apiServer?.identity.ipAddresses, ['10.96.0.1', 'fd00:10:96::1', '127.0.0.1']);
    const [defaults] = entriesOf('controlPlane: {components: [kube-apiserver]}');
    assert.deepEqual(defaults?.identity.ipAddresses, ['100.64.0.1', '127.0.0.1']);
  });

  test('bad input is one line naming the field, exit code 65', () => {
    const cases: [string, RegExp][] = [
      [
        'nodes: [{name: Node_A}]\nserver: https://a.example.com',
        /^cluster\.yaml: nodes\[0\]\.name: is not a valid DNS name/,
      ],
      [
        'nodes: [{name: a, addresses: [10.0.0.300]}]\nserver: https://a.example.com',
        /^cluster\.yaml: nodes\[0\]\.addresses\[0\]: is not an IP address/,
      ],
      [
        'server: http://api.example.com\nadmins: [{name: a}]',
        /^cluster\.yaml: server: must be an https:\/\/ URL/,
      ],
      [
        'nodes: [{name: a}]',
        /^cluster\.yaml: server: the kubeconfigs of nodes and admins need the API server URL/,
      ],
      [
        'nodes: [{name: a}, {name: a}]\nserver: https://a.example.com',
        /^cluster\.yaml: nodes\[1\]\.name: "a" is listed twice/,
      ],
      [
        'nodes: [{name: a, components: [kube-apiserver]}]\nserver: https://a.example.com',
        /^cluster\.yaml: nodes\[0\]\.components\[0\]: /,
      ],
      [
        'nodes: [{name: a, lifetime: 1m}]\nserver: https://a.example.com',
        /^cluster\.yaml: nodes\[0\]\.lifetime: lifetime 1m is outside 10m\.\.10920h/,
      ],
      ['cluster: {serviceClusterIPRange: 100.64.0.0}', /^cluster\.yaml: cluster\.serviceClusterIPRange: /],
      ['nodez: []', /^cluster\.yaml: nodez: unknown field/],
      ['nodes: [{name: a', /^cluster\.yaml: line 1, column \d+: /],
    ];
    for (const [text, message] of cases) {
      assert.throws(
        () => parseApplySpec(text, 'cluster.yaml'),
        (err: Error) => {
          assert.ok(err instanceof InvalidInputError, text);
          assert.equal(exitCodeOf(err), 65);
          assert.match(err.message, message, text);
          assert.doesNotMatch(err.message, /\n/, text);
          return true;
        },
      );
    }
  });
});

describe('pki apply: plan, issue, keep, renew', () => {
  test('the first apply issues everything; the second plans every entry as kept and writes nothing', async () => {
    const vfs = memfs();
    const entries = entriesOf(clusterFile);
    const first = await apply(vfs, entries);
    assert.ok(Object.values(actions(first.plan)).every((a) => a === 'issue'));
    assert.equal(first.result.issued.length, 9);
    assert.equal(first.result.kubeconfigs, 7);
    const files = await vfs.list('');
    const versions = await Promise.all(files.map((f) => vfs.stat(f)));
    const second = await apply(vfs, entries);
    assert.ok(Object.values(actions(second.plan)).every((a) => a === 'keep'));
    assert.deepEqual(second.result, { issued: [], kubeconfigs: 0, files: 0 });
    assert.deepEqual(await Promise.all(files.map((f) => vfs.stat(f))), versions, 'no file rewritten');
    assert.equal(await assertNoMismatchedPair(vfs), 9);
  });

  test('control-plane certificates: subjects as kOps issues them, client and server usages', async () => {
    const vfs = memfs();
    await apply(vfs, entriesOf(clusterFile));
    const subjects = {
      'control-plane/kube-apiserver': ['CN=kubernetes-master', 'serverAuth'],
      'control-plane/kube-controller-manager': ['CN=system:kube-controller-manager', 'clientAuth'],
      'control-plane/kube-scheduler': ['CN=system:kube-scheduler', 'clientAuth'],
      'admins/alice': ['O=system:masters, CN=alice', 'clientAuth'],
    };
    for (const [path, [subject, usage]] of Object.entries(subjects)) {
      const { parsed } = await certificateAt(vfs, path);
      assert.equal(parsed.subject.text, subject, path);
      assert.deepEqual(parsed.extensions.extKeyUsage, [usage], path);
      assert.equal(parsed.extensions.basicConstraints?.ca, false, path);
    }
    const admin = await certificateAt(vfs, 'admins/alice');
    assert.equal(
      admin.parsed.notAfter.getTime() - admin.parsed.notBefore.getTime() <= 18 * hourMs + 5 * 60_000,
      true,
    );
    const kubeconfig = parse((await readText(vfs, 'control-plane/kube-scheduler.kubeconfig')) ?? '');
    assert.equal(kubeconfig.clusters[0].cluster.server, 'https://127.0.0.1');
    assert.equal(kubeconfig.users[0].name, 'system:kube-scheduler');
  });

  test('a changed address re-issues that certificate alone, with the same key; the rest is kept', async () => {
    const vfs = memfs();
    await apply(vfs, entriesOf(clusterFile));
    const before = await certificateAt(vfs, 'nodes/node-a/kubelet-server');
    const keyBefore = await readText(vfs, 'nodes/node-a/kubelet-server.key');
    const { plan } = await apply(vfs, entriesOf(clusterFile.replace('10.0.0.11', '10.0.0.12')));
    const changed = Object.entries(actions(plan)).filter(([, action]) => action !== 'keep');
    assert.deepEqual(changed, [['nodes/node-a/kubelet-server', 'reissue']]);
    assert.deepEqual(
      plan.entries.find((p) => p.entry.path === 'nodes/node-a/kubelet-server')?.decision.reasons,
      ['names change: +IP:10.0.0.12 -IP:10.0.0.11'],
    );
    const after = await certificateAt(vfs, 'nodes/node-a/kubelet-server');
    assert.notEqual(after.pem, before.pem);
    assert.deepEqual(after.parsed.extensions.subjectAltName?.ipAddresses, ['10.0.0.12']);
    assert.equal(await readText(vfs, 'nodes/node-a/kubelet-server.key'), keyBefore, 'the key is kept');
  });

  test('what nears expiry is renewed (threshold given, or a third of the lifetime); the rest is kept', async () => {
    const vfs = memfs();
    const entries = entriesOf(clusterFile);
    const issuedAt = new Date();
    await apply(vfs, entries, { now: issuedAt });
    // The admin's 18 h certificate has under 20 h left; nothing else has.
    const threshold = await apply(vfs, entries, { now: issuedAt, renewBeforeMs: 20 * hourMs });
    assert.deepEqual(
      Object.entries(actions(threshold.plan)).filter(([, a]) => a !== 'keep'),
      [['admins/alice', 'renew']],
    );
    // 17 hours on, the admin's and the nodes' (24 h) certificates have under a third of their lifetime left.
    const later = new Date(issuedAt.getTime() + 17 * hourMs);
    const { plan, result } = await apply(vfs, entries, { now: later });
    assert.deepEqual(
      Object.entries(actions(plan))
        .filter(([, a]) => a !== 'keep')
        .map(([path]) => path),
      [
        'admins/alice',
        'nodes/node-a/kubelet',
        'nodes/node-a/kubelet-server',
        'nodes/node-a/kube-proxy',
        'nodes/node-b/kubelet',
        'nodes/node-b/kube-proxy',
      ],
    );
    assert.match(
      plan.entries.find((p) => p.entry.path === 'admins/alice')?.decision.reasons[0] ?? '',
      /^expires /,
    );
    assert.equal(result.issued.length, 6);
    const renewed = await certificateAt(vfs, 'admins/alice');
    assert.ok(renewed.parsed.notAfter.getTime() > later.getTime() + 17 * hourMs);
    assert.equal(await assertNoMismatchedPair(vfs), 9);
  });

  test('after a CA rotation every certificate is re-issued by the new signer and the kubeconfigs get the new bundle', async () => {
    const vfs = memfs();
    const entries = entriesOf(clusterFile);
    await apply(vfs, entries);
    const rotated = rotateCa(ca);
    const { plan } = await apply(vfs, entries, {}, rotated);
    assert.ok(plan.entries.every((p) => p.decision.action === 'reissue'));
    assert.match(plan.entries[0]?.decision.reasons[0] ?? '', /^not signed by the CA's signer/);
    const { parsed } = await certificateAt(vfs, 'nodes/node-b/kubelet');
    assert.ok(new X509Certificate(parsed.der).verify(rotated.signer.certificate.parsed.publicKey));
    const kubeconfig = parse((await readText(vfs, 'nodes/node-b/kubelet.kubeconfig')) ?? '');
    const bundle = Buffer.from(
      kubeconfig.clusters[0].cluster['certificate-authority-data'],
      'base64',
    ).toString();
    assert.equal(bundle.match(/BEGIN CERTIFICATE/g)?.length, 2);
  });

  test('a certificate beside a key that is not its own, or unreadable, is re-issued for the key on disk', async () => {
    const vfs = memfs();
    const entries = entriesOf(clusterFile);
    await apply(vfs, entries);
    const keyPem = await readText(vfs, 'admins/alice.key');
    const foreign = issueCertificate(ca, 'admin', publicKeyRequest(generateKey()), { name: 'alice' });
    await vfs.write('admins/alice.crt', foreign.pem);
    const { plan } = await apply(vfs, entries);
    assert.deepEqual(plan.entries.find((p) => p.entry.path === 'admins/alice')?.decision.reasons, [
      'the key does not match the certificate',
    ]);
    assert.equal(await readText(vfs, 'admins/alice.key'), keyPem);
    assert.equal(await assertNoMismatchedPair(vfs), 9);
    await vfs.write('admins/alice.crt', 'garbage');
    const unreadable = await apply(vfs, entries);
    assert.match(
      unreadable.plan.entries.find((p) => p.entry.path === 'admins/alice')?.decision.reasons[0] ?? '',
      /^the certificate is unreadable: /,
    );
    assert.equal(await readText(vfs, 'admins/alice.key'), keyPem);
    assert.equal(await assertNoMismatchedPair(vfs), 9);
  });

  test("a kubelet certificate whose key the node made (pki sign) is kept, and its kubeconfig points at the node's key", async () => {
    const vfs = memfs();
    const entries = entriesOf('server: https://api.example.com\nnodes: [{name: node-c}]');
    const onNode = issueCertificate(ca, 'kubelet', publicKeyRequest(generateKey()), { name: 'node-c' });
    await vfs.write('nodes/node-c/kubelet.crt', onNode.pem);
    const { plan } = await apply(vfs, entries);
    assert.deepEqual(actions(plan), { 'nodes/node-c/kubelet': 'keep', 'nodes/node-c/kube-proxy': 'issue' });
    assert.equal(await readText(vfs, 'nodes/node-c/kubelet.crt'), onNode.pem);
    const kubeconfig = parse((await readText(vfs, 'nodes/node-c/kubelet.kubeconfig')) ?? '');
    assert.equal(kubeconfig.users[0].user['client-key'], '/var/lib/kubelet/pki/kubelet-client.key');
  });
});

describe('pki apply writes nothing it cannot finish', () => {
  test('a node named after the API server is refused before anything is written', async () => {
    const vfs = memfs();
    const text = `${clusterFile}  - name: kubernetes.default.svc\n`;
    await assert.rejects(
      planApply(vfs, ca, entriesOf(text)),
      (err: Error) =>
        err instanceof RequestRejectedError &&
        /kubelet: name: kubernetes\.default\.svc is a name of the cluster's API server/.test(err.message),
    );
    const served = `${clusterFile}  - name: node-d\n    addresses: [100.64.0.1]\n`;
    await assert.rejects(
      planApply(vfs, ca, entriesOf(served)),
      /100\.64\.0\.1 is an address of the cluster's API server/,
    );
    assert.deepEqual(await vfs.list(''), []);
  });

  test('the bootstrap paths still never issue the control-plane profiles, nor API-server names to nodes', () => {
    for (const profile of ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'admin'] as const) {
      assert.equal(profileNamed(profile).issuedToNodes, false);
      assert.ok(!nativeProfiles.includes(profile));
    }
    // The API server's own certificate names are exactly what a node may not have (127.0.0.1, every
    // machine's own address, aside), held against the cluster the file describes.
    const entries = entriesOf(clusterFile);
    const [apiServer] = entries;
    const reserved = entries.find((e) => e.profile === 'kubelet-server')?.reserved;
    assert.ok(apiServer && reserved);
    const names = [...(apiServer.identity.dnsNames ?? []), ...(apiServer.identity.ipAddresses ?? [])];
    for (const name of names.filter((n) => n !== '127.0.0.1')) {
      const identity = isIP(name)
        ? { name: 'node-a', ipAddresses: [name] }
        : { name: 'node-a', dnsNames: [name] };
      assert.throws(
        () => issueCertificate(ca, 'kubelet-server', publicKeyRequest(generateKey()), identity, { reserved }),
        (err: Error) => err instanceof RequestRejectedError && err.reason === 'reserved-name',
        name,
      );
    }
  });

  test('a write failing half way leaves no certificate beside a foreign key, and the next apply completes', async () => {
    const entries = entriesOf(clusterFile);
    const failingAt = (vfs: Vfs, failAt: number): Vfs => {
      let writes = 0;
      return {
        url: vfs.url,
        read: (path) => vfs.read(path),
        stat: (path) => vfs.stat(path),
        list: (prefix) => vfs.list(prefix),
        delete: (path) => vfs.delete(path),
        write: async (path, data, options) => {
          if (++writes === failAt) throw new Error('disk full');
          await vfs.write(path, data, options);
        },
      };
    };
    // A new folder, and one whose keys were lost (so each entry gets a new key beside its old
    // certificate; the nodes' kubelet keys count as held by the nodes, whose certificates are kept).
    for (const lostKeys of [false, true]) {
      for (const failAt of [1, 2, 3, 8, 13]) {
        const vfs = memfs();
        if (lostKeys) {
          await apply(vfs, entries);
          for (const path of (await vfs.list('')).filter(
            (p) => p.endsWith('.key') && !p.startsWith('kubernetes-ca'),
          )) {
            await vfs.delete(path);
          }
        }
        await assert.rejects(apply(failingAt(vfs, failAt), entries), /disk full/);
        await assertNoMismatchedPair(vfs);
        const { plan } = await apply(vfs, entries);
        assert.ok(
          plan.entries.some((p) => p.decision.action !== 'keep'),
          'the interrupted work is planned again',
        );
        assert.equal(await assertNoMismatchedPair(vfs), lostKeys ? 6 : 9);
        const again = await apply(vfs, entries);
        assert.ok(again.plan.entries.every((p) => p.decision.action === 'keep'));
      }
    }
  });
});
