/**
 * kops metal renewal end to end: kops' own metal config (`cloud: metal`, `server.pki: {}`, a
 * configBase) composed as `run` composes it (`startConfiguredBootstrap`: policyDepsFromConfig, then
 * buildPolicies — the chain `[pki-tpm, renewal]`), the simulated API server, the state store in
 * memory. A machine is enrolled with a Host (as `kops toolbox enroll` / `host add` do), joins with its
 * machine key through the real `join`, registers its Node with its own credentials and no
 * providerID (kops' nodeup sets none on metal), then renews with its kubelet key through the real
 * `join`, and through kops' `POST /bootstrap`.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync, X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join as joinPath } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api, KubeConfig, type V1NodeStatus } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { join } from '../../agent/join.ts';
import { nodeFilePath } from '../../agent/node-files.ts';
import { pkiTpmProof } from '../../agent/pki-tpm-proof.ts';
import { readCurrentCredentials, renewalProof } from '../../agent/renewal.ts';
import { type ConfiguredBootstrap, startConfiguredBootstrap } from '../../cli/bootstrap-server.ts';
import { HostRegistry, newHostObject } from '../../cloud/metal/hosts.ts';
import { inventoryPath } from '../../cloud/metal/inventory.ts';
import { parseConfig } from '../../config/loader.ts';
import { exitCodeOf } from '../../errors.ts';
import { bundlePem, createCa } from '../../pki/ca.ts';
import { generateKey, privateKeyPem } from '../../pki/keys.ts';
import { type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { kubeletNodeStatus } from '../../sim/dev-cluster.ts';
import { clearMemfs, MemfsVfs } from '../../statestore/memfs-vfs.ts';
import { nodeupBody, postNodeup } from '../../testing/nodeup.ts';
import { opensslText } from '../../testing/openssl.ts';

const cluster = 'metal-renew.example.com';
const memfsAuthority = 'metal-renewal-e2e';
const configBase = `memfs://${memfsAuthority}/cluster`;
const ca = createCa();
const caPem = bundlePem(ca);
let sim: SimApiServer;
let boot: ConfiguredBootstrap;
let hosts: HostRegistry;
let root: string;

/** Enrols `name` as `kops toolbox enroll` does (a Host with the machine's ECDSA key), returns the key. */
async function enrol(name: string, instanceGroup = 'nodes'): Promise<string> {
  const key = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  await hosts.create(
    newHostObject({
      name,
      instanceGroup,
      publicKey: key.publicKey.export({ format: 'pem', type: 'spki' }).toString(),
    }),
  );
  return privateKeyPem(key.privateKey);
}

/**
 * An enrolled machine that joined with its machine key (the real `join`, no serving certificate: a
 * Host records no address) and registered its Node, Ready and without a providerID, with its own
 * credentials — as the kubelet does on kops metal. Returns its `--dir`.
 */
async function joinedMetalNode(name: string): Promise<string> {
  const keyPem = await enrol(name);
  const dir = joinPath(root, name);
  await join({
    server: boot.server.url,
    caBundlePem: `${caPem}${sim.caCertificate}\n`,
    apiServer: sim.url,
    nodeName: name,
    dir,
    proof: pkiTpmProof({ keyPem, hostname: name }),
    servingCertificate: false,
    timeoutMs: 20_000,
  });
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(nodeFilePath(dir, 'kubeconfig'));
  await kubeConfig.makeApiClient(CoreV1Api).createNode({
    body: {
      metadata: { name },
      status: kubeletNodeStatus(name, '10.9.0.1') as V1NodeStatus,
    },
  });
  return dir;
}

/** `join --renew` of the node whose credentials are in `dir`, as the CLI makes it. */
async function renew(dir: string, options: { servingCertificate: boolean }) {
  const current = await readCurrentCredentials(dir);
  return join({
    server: boot.server.url,
    caBundlePem: `${caPem}${sim.caCertificate}\n`,
    apiServer: sim.url,
    nodeName: current.nodeName,
    dir,
    proof: renewalProof(current, cluster),
    servingCertificate: options.servingCertificate,
    timeoutMs: 20_000,
    retry: { initialMs: 100, maxMs: 500 },
  });
}

function certificateIn(dir: string, file: 'clientCertificate' | 'serverCertificate') {
  return readFile(nodeFilePath(dir, file), 'utf8').then((pem) => new X509Certificate(pem));
}

before(async () => {
  root = await mkdtemp(joinPath(tmpdir(), 'metal-renewal-e2e-'));
  // The API server accepts the cluster CA's client certificates: the node registers with its own.
  sim = await startApiServer({ clientCAs: [caPem] });
  await sim
    .kubeConfig()
    .makeApiClient(CoreV1Api)
    .createNamespace({ body: { metadata: { name: 'kops-system' } } });
  hosts = new HostRegistry(sim.kubeConfig());
  // kops' own config for a metal cluster: no provider, `pki: {}`, the state store at configBase.
  const config = parseConfig({ clusterName: cluster, cloud: 'metal', configBase, server: { pki: {} } });
  boot = await startConfiguredBootstrap({
    config,
    kubeConfig: sim.kubeConfig(),
    vfsOptions: {},
    registry: new Registry(),
    server: { listen: '127.0.0.1:0', serverNames: { ipAddresses: ['127.0.0.1'] }, ca, apiServer: sim.url },
  });
});

after(async () => {
  await boot?.close();
  await sim?.close();
  clearMemfs(memfsAuthority);
  await rm(root, { recursive: true, force: true });
});

describe('kops metal renewal ([pki-tpm, renewal] from kops config)', () => {
  test('a kops metal node (a Host, a Node without providerID) renews its kubelet client certificate', async () => {
    const dir = await joinedMetalNode('metal-a');
    const before = await certificateIn(dir, 'clientCertificate');

    const result = await renew(dir, { servingCertificate: false });

    assert.equal(result.nodeName, 'metal-a');
    // The group is the Host's, as at the first join.
    assert.equal(result.instanceGroup, 'nodes');
    const after = await certificateIn(dir, 'clientCertificate');
    assert.notEqual(after.serialNumber, before.serialNumber);
    assert.match(after.subject, /CN=system:node:metal-a/);
    assert.ok(after.checkIssued(new X509Certificate(ca.signer.certificate.pem)));
  });

  test('a Host records no address: a renewal asking for a serving certificate is refused (403, exit 77) with the reason, nothing written; the client-only renewal still goes through', async () => {
    const dir = await joinedMetalNode('metal-b');
    const before = await readFile(nodeFilePath(dir, 'clientCertificate'), 'utf8');

    await assert.rejects(renew(dir, { servingCertificate: true }), (err) => {
      assert.equal(exitCodeOf(err), 77, String(err));
      assert.match(
        String(err),
        /kubelet-server: a serving certificate needs at least one verified DNS name or IP address/,
      );
      return true;
    });
    assert.equal(await readFile(nodeFilePath(dir, 'clientCertificate'), 'utf8'), before);

    const renewed = await renew(dir, { servingCertificate: false });
    assert.equal(renewed.nodeName, 'metal-b');
    assert.notEqual(await readFile(nodeFilePath(dir, 'clientCertificate'), 'utf8'), before);
  });

  test('kops path: the metal node renews its kubelet certificate with x-kops-renewal on POST /bootstrap', async () => {
    const dir = await joinedMetalNode('metal-c');
    const current = await readCurrentCredentials(dir);
    const key = generateKey('ecdsa-p256');
    const body = nodeupBody(key);
    const authorization = (await renewalProof(current, cluster)(Buffer.from(body))) as string;

    const answer = await postNodeup(boot.server.url, body, authorization, caPem);

    assert.equal(answer.status, 200, answer.text);
    const kubelet = (JSON.parse(answer.text) as { Certs: Record<string, string> }).Certs['kubelet'] as string;
    assert.match(opensslText(kubelet), /CN ?= ?system:node:metal-c/);
  });

  test('a host the metal inventory lists renews a serving certificate for exactly the inventory addresses', async () => {
    const dir = await joinedMetalNode('metal-d');
    await new MemfsVfs(new URL(configBase)).write(
      inventoryPath,
      [
        'hosts:',
        '- name: metal-d',
        '  instanceGroup: nodes',
        '  addresses: [10.9.0.4, metal-d.lan.example.com]',
      ].join('\n'),
    );

    const result = await renew(dir, { servingCertificate: true });

    assert.equal(result.instanceGroup, 'nodes');
    const server = await certificateIn(dir, 'serverCertificate');
    assert.equal(server.subjectAltName, 'DNS:metal-d.lan.example.com, IP Address:10.9.0.4');
    // Hosts the inventory does not list keep renewing on their Host: client certificates only.
    const other = await joinedMetalNode('metal-e');
    assert.equal((await renew(other, { servingCertificate: false })).nodeName, 'metal-e');
  });

  test('attack: the key of a host removed from the cluster (Host deleted, not in the inventory) no longer renews, though its Node is registered', async () => {
    const dir = await joinedMetalNode('metal-gone');
    const before = await readFile(nodeFilePath(dir, 'clientCertificate'), 'utf8');
    await hosts.delete('metal-gone');

    await assert.rejects(renew(dir, { servingCertificate: false }), (err) => {
      assert.equal(exitCodeOf(err), 77, String(err));
      assert.match(String(err), /node metal-gone is enrolled nowhere: no Host kops-system\/metal-gone/);
      return true;
    });
    assert.equal(await readFile(nodeFilePath(dir, 'clientCertificate'), 'utf8'), before);
  });
});
