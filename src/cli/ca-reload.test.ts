/**
 * A CA replaced in its store reaches the running bootstrap server (red-team finding 5): the server
 * `run` builds from a kops config, with its CA in `server.caBasePath`, the kops chain [aws, renewal]
 * against the simulated AWS and API server, over real sockets. After `pki rotate` and the removal of
 * the old certificate (docs/pki.md §7), the server asks for its restart within the period; the
 * restarted server no longer renews a certificate forged with the old (leaked) key, and issues from
 * the new CA only. A CA half written keeps the loaded one serving. `run` itself stops through its
 * graceful shutdown and exits 75 when it is told.
 */
import assert from 'node:assert/strict';
import { type KeyObject, X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { V1Lease } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { renewalProof } from '../agent/renewal.ts';
import { parseConfig } from '../config/loader.ts';
import { exitCodeOf, type KopsError } from '../errors.ts';
import { eventually } from '../net/testing.ts';
import { bundlePem, type CertificateAuthority, createCa, rotateCa } from '../pki/ca.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { saveCa } from '../pki/folder.ts';
import { generateKey } from '../pki/keys.ts';
import { issueCertificate, publicKeyRequest } from '../pki/profiles.ts';
import { nativeApiVersion } from '../protocol/bootstrap-api.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import { FileVfs } from '../statestore/file-vfs.ts';
import { MemfsVfs } from '../statestore/memfs-vfs.ts';
import { FakeClock } from '../testing/fake-clock.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { type ConfiguredBootstrap, startConfiguredBootstrap } from './bootstrap-server.ts';
import { caConfirmMs, caPollMs } from './ca-watch.ts';
import { errorLine } from './main.ts';
import { runUntilStopped, startController } from './run.ts';

const cluster = 'reload.example.com';
const instanceId = 'i-0123456789abcdef0';

/** What a renewal was answered. */
interface Answer {
  status: number;
  body: { status?: string; certificates?: Record<string, string>; caBundle?: string; message?: string };
}

/** Renews the kubelet client certificate of the node as a kubelet would, proving it with `current`. */
async function renew(url: string, trust: string, current: { pem: string; key: KeyObject }): Promise<Answer> {
  const body = JSON.stringify({
    apiVersion: nativeApiVersion,
    certificateSigningRequests: {
      kubelet: buildCsrPem(generateKey('ecdsa-p256'), {
        subject: { commonName: `system:node:${instanceId}`, organizations: ['system:nodes'] },
      }),
    },
  });
  const proof = renewalProof(
    { nodeName: instanceId, certificate: new X509Certificate(current.pem), key: current.key },
    cluster,
  );
  const authorization = await proof(Buffer.from(body));
  return new Promise((resolve, reject) => {
    const req = request(
      new URL('/v1/certificates', url),
      { method: 'POST', ca: trust, headers: { 'content-type': 'application/json', authorization } },
      (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** A kubelet client certificate for the node, issued by `ca`, with its key. */
function kubeletOf(ca: CertificateAuthority): { pem: string; key: KeyObject } {
  const key = generateKey('ecdsa-p256');
  const issued = issueCertificate(ca, 'kubelet', publicKeyRequest(key), {
    name: instanceId,
    dnsNames: [],
    ipAddresses: [],
  });
  return { pem: issued.pem, key };
}

/** Whether `pem` was signed by `ca`'s signer. */
function issuedBy(pem: string, ca: CertificateAuthority): boolean {
  return new X509Certificate(pem).checkIssued(new X509Certificate(ca.signer.certificate.pem));
}

/**
 * Advances `clock` by `ms`, then waits in real time for the CA read a due timer started: it reads
 * files, which takes longer than the fake clock lets promises run. Done when its next timer is set
 * again, or when it reported the replacement (it sets none then).
 */
async function advanceReading(clock: FakeClock, ms: number, boot: ConfiguredBootstrap): Promise<void> {
  const armed = clock.pending;
  let replaced = false;
  void boot.caReplaced.then(() => {
    replaced = true;
  });
  await clock.advance(ms);
  assert.equal(await eventually(() => replaced || clock.pending >= armed, true), true, 'the read ended');
}

/** What `promise` settled with within `ms` of real time, or 'pending'. */
function settledWithin<T>(promise: Promise<T> | undefined, ms: number): Promise<T | 'pending'> {
  return Promise.race([
    promise ?? new Promise<never>(() => undefined),
    new Promise<'pending'>((resolve) => setTimeout(() => resolve('pending'), ms).unref()),
  ]);
}

describe('a CA replaced in server.caBasePath reaches the running bootstrap server', () => {
  let aws: AwsSimulator;
  let kube: SimApiServer;

  before(async () => {
    aws = await startAwsSimulator({ throttling: false });
    aws.ec2.addInstances([
      { id: instanceId, zone: `${aws.region}a`, cluster, instanceGroup: 'nodes', privateIp: '10.0.9.9' },
    ]);
    kube = await startApiServer();
    kube.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: instanceId },
      spec: { providerID: `aws:///${aws.region}a/${instanceId}` },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    } as never);
  });

  after(async () => {
    await Promise.all([kube.close(), aws.close()]);
  });

  /** A CA folder with a new CA in the PEM layout `pki init` writes. */
  async function caFolder(): Promise<{ dir: string; vfs: FileVfs; ca: CertificateAuthority }> {
    const dir = await mkdtemp(join(tmpdir(), 'ca-reload-'));
    const vfs = new FileVfs(dir);
    const ca = createCa();
    await saveCa(vfs, ca, 'pem');
    return { dir, vfs, ca };
  }

  /** The bootstrap server `run` builds, reading its CA from `dir`. */
  function start(dir: string, clock: FakeClock, workers = 1): Promise<ConfiguredBootstrap> {
    const config = parseConfig({
      clusterName: cluster,
      cloud: 'aws',
      server: {
        Listen: ':3988',
        caBasePath: dir,
        provider: { aws: { nodesRoles: [`nodes.${cluster}`], Region: aws.region } },
      },
      bootstrap: { policies: [{ name: 'aws', stsEndpoint: aws.endpoint }, { name: 'renewal' }] },
    });
    return startConfiguredBootstrap({
      config,
      kubeConfig: kube.kubeConfig(),
      vfsOptions: {},
      cloud: { aws: { endpoint: aws.endpoint, credentials: aws.credentials } },
      registry: new Registry(),
      server: {
        listen: '127.0.0.1:0',
        serverNames: { ipAddresses: ['127.0.0.1'] },
        apiServer: kube.url,
        clock,
        workers,
      },
    });
  }

  test('rotated, old certificate removed: within 65 s the server asks for its restart (exit 75); restarted, a certificate forged with the old key no longer renews and new ones come from the new CA alone', async () => {
    const { dir, vfs, ca: leaked } = await caFolder();
    const clock = new FakeClock();
    let boot = await start(dir, clock);
    try {
      const forged = kubeletOf(leaked);
      assert.equal((await renew(boot.server.url, bundlePem(leaked), forged)).status, 200, 'renews before');

      // docs/pki.md §7: rotate, then drop the old certificate from the bundle.
      const rotated = rotateCa(leaked);
      await saveCa(vfs, rotated, 'pem');
      const fresh: CertificateAuthority = { ...rotated, certificates: [rotated.signer.certificate] };
      await saveCa(vfs, fresh, 'pem');

      await advanceReading(clock, caPollMs - 1, boot);
      assert.equal(await settledWithin(boot.caReplaced, 50), 'pending', 'not before the period');
      await advanceReading(clock, 1, boot);
      await advanceReading(clock, caConfirmMs, boot);
      const reason = await settledWithin(boot.caReplaced, 1_000);
      assert.notEqual(reason, 'pending', 'the replaced CA was noticed within caPollMs + caConfirmMs');
      const err = reason as KopsError;
      assert.equal(exitCodeOf(err), 75);
      assert.equal(err.reasonCode, 'ca-replaced');
      assert.ok(err.message.includes(dir), err.message);
      assert.ok(err.message.includes(`signs with ${leaked.signer.certificate.keypairId}`), err.message);
      assert.ok(
        err.message.includes(
          `now kubernetes-ca: signs with ${fresh.signer.certificate.keypairId}, trusts ${fresh.signer.certificate.keypairId})`,
        ),
        err.message,
      );

      // What Kubernetes does with exit 75: the same config, started again.
      await boot.close();
      boot = await start(dir, clock);
      const refused = await renew(boot.server.url, bundlePem(fresh), forged);
      assert.equal(refused.status, 403, JSON.stringify(refused.body));
      const renewed = await renew(boot.server.url, bundlePem(fresh), kubeletOf(fresh));
      assert.equal(renewed.status, 200, JSON.stringify(renewed.body));
      const issued = renewed.body.certificates?.['kubelet'] ?? '';
      assert.ok(issuedBy(issued, fresh), 'issued by the new CA');
      assert.ok(!issuedBy(issued, leaked), 'not by the removed one');
      assert.equal(renewed.body.caBundle, bundlePem(fresh), 'nodes are told to trust the new CA alone');
      assert.equal(boot.ca.certificates.length, 1);
    } finally {
      await boot.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('a half-written CA file: the server keeps signing with and trusting the CA it loaded, and asks for no restart', async () => {
    const { dir, ca } = await caFolder();
    const clock = new FakeClock();
    const boot = await start(dir, clock);
    try {
      const keyPath = join(dir, 'kubernetes-ca.key');
      const key = await readFile(keyPath, 'utf8');
      await writeFile(keyPath, key.slice(0, key.length / 2));
      for (let period = 0; period < 3; period++) await advanceReading(clock, caPollMs, boot);
      await advanceReading(clock, caConfirmMs, boot);
      assert.equal(await settledWithin(boot.caReplaced, 200), 'pending');
      const renewed = await renew(boot.server.url, bundlePem(ca), kubeletOf(ca));
      assert.equal(renewed.status, 200, JSON.stringify(renewed.body));
      assert.ok(issuedBy(renewed.body.certificates?.['kubelet'] ?? '', ca));
      assert.equal(renewed.body.caBundle, bundlePem(ca));
      // The rotation finished: now it is a replacement.
      await saveCa(new FileVfs(dir), rotateCa(ca), 'pem');
      await advanceReading(clock, caPollMs, boot);
      await advanceReading(clock, caConfirmMs, boot);
      assert.notEqual(await settledWithin(boot.caReplaced, 1_000), 'pending');
    } finally {
      await boot.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('served by worker processes: the primary notices the replaced CA and asks for the restart', async () => {
    const { dir, vfs, ca } = await caFolder();
    const clock = new FakeClock();
    const boot = await start(dir, clock, 2);
    try {
      await saveCa(vfs, rotateCa(ca), 'pem');
      await advanceReading(clock, caPollMs, boot);
      await advanceReading(clock, caConfirmMs, boot);
      const reason = await settledWithin(boot.caReplaced, 1_000);
      assert.notEqual(reason, 'pending');
      assert.equal(exitCodeOf(reason), 75);
    } finally {
      await boot.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

test('run: a replaced CA stops the controller through its graceful shutdown (lease released, server closed) with one log line, and exit code 75', async () => {
  const kube = await startApiServer();
  const caBasePath = 'memfs://ca-reload-run/pki';
  const store = new MemfsVfs(new URL(caBasePath));
  const ca = createCa();
  await saveCa(store, ca, 'pem');
  const clock = new FakeClock();
  const { logger, lines } = capturedLogger();
  const config = parseConfig({
    clusterName: cluster,
    cloud: 'metal',
    metrics: { listen: '127.0.0.1:0' },
    leaderElection: { leaseDuration: '2s', renewDeadline: '1s', retryPeriod: '200ms' },
    server: { Listen: ':3988', caBasePath },
    bootstrap: { policies: [{ name: 'always-reject' }] },
  });
  const controller = await startController({
    config,
    kubeConfig: kube.kubeConfig(),
    vfsOptions: {},
    bootstrap: { listen: '127.0.0.1:0', clock, workers: 1 },
    registry: new Registry(),
    logger,
  });
  const signalListeners = process.listenerCount('SIGTERM');
  const lease = () =>
    kube.store.get('leases', 'kube-system', 'kops-controller-leader') as V1Lease | undefined;
  try {
    const running = runUntilStopped(controller, logger);
    assert.equal(await eventually(() => Boolean(lease()?.spec?.holderIdentity), true), true, 'it leads');
    assert.equal(process.listenerCount('SIGTERM'), signalListeners + 1);
    await saveCa(store, rotateCa(ca), 'pem');
    // The in-process store answers at once: the fake clock lets each read finish.
    await clock.advance(caPollMs);
    await clock.advance(caConfirmMs);
    const err = await settledWithin(
      running.then(
        () => undefined,
        (thrown: unknown) => thrown as KopsError,
      ),
      10_000,
    );
    assert.ok(err && err !== 'pending', 'run threw the replacement');
    assert.equal(exitCodeOf(err), 75);
    assert.equal(errorLine(err), err.message, 'main prints the message itself, not an internal error');
    assert.equal(lease()?.spec?.holderIdentity, '', 'the lease was released');
    await assert.rejects(fetch(`${controller.bootstrap?.server.url.replace('https', 'http')}/`), 'closed');
    assert.equal(process.listenerCount('SIGTERM'), signalListeners, 'the signal handlers are gone');
    const records = lines.map(
      (line) => JSON.parse(line) as { msg: string; reason?: string; exitCode?: number },
    );
    const why = records.filter((record) => record.msg.startsWith('shutting down'));
    assert.equal(why.length, 1, lines.join(''));
    assert.equal(why[0]?.msg, `shutting down: ${err.message}`);
    assert.equal(why[0]?.reason, 'ca-replaced');
    assert.equal(why[0]?.exitCode, 75);
  } finally {
    await controller.stop();
    await kube.close();
  }
});
