/**
 * kops metal end to end, through the simulated API server and the real bootstrap server: the operator
 * registers a machine with `kops-controller host add`, the machine proves itself with its key (nodeup's
 * `POST /bootstrap`, and `join`) and gets its certificates; an unregistered or unregistered-again
 * machine gets nothing.
 */
import assert from 'node:assert/strict';
import { createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join as joinPath } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { join } from '../../agent/join.ts';
import { pkiTpmProofFromFile } from '../../agent/pki-tpm-proof.ts';
import { type RunningBootstrap, startBootstrapServer } from '../../cli/bootstrap-server.ts';
import { hostCommand } from '../../cli/host.ts';
import { HostRegistry } from '../../cloud/metal/hosts.ts';
import { parseConfig } from '../../config/loader.ts';
import { bundlePem, createCa } from '../../pki/ca.ts';
import { privateKeyPem, spkiOf } from '../../pki/keys.ts';
import { encodePem } from '../../pki/pem.ts';
import { type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { opensslText } from '../../testing/openssl.ts';
import { kopsApiVersion } from '../kops-handler.ts';
import { ConfigMapReplayGuard } from '../replay-guard.ts';
import type { AuditRecord } from '../types.ts';
import { buildPolicies } from './build.ts';

const ca = createCa();
let sim: SimApiServer;
let boot: RunningBootstrap;
let dir: string;
let kubeconfigFile: string;
const audit: AuditRecord[] = [];

/** A machine as `kops toolbox enroll` prepares it: a P-256 key pair in two PEM files. */
async function machine(name: string): Promise<{ keyFile: string; publicKeyFile: string }> {
  const key = generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey;
  const keyFile = joinPath(dir, `${name}.private.pem`);
  const publicKeyFile = joinPath(dir, `${name}.public.pem`);
  await writeFile(keyFile, privateKeyPem(key));
  await writeFile(publicKeyFile, createPublicKey(key).export({ format: 'pem', type: 'spki' }));
  return { keyFile, publicKeyFile };
}

async function host(...args: string[]): Promise<string> {
  let out = '';
  const command = hostCommand();
  for (const sub of [command, ...command.commands]) sub.configureOutput({ writeOut: (t) => (out += t) });
  await command.parseAsync([...args, '--kubeconfig', kubeconfigFile], { from: 'user' });
  return out;
}

/** nodeup's POST /bootstrap for one kubelet key, with the Authorization `proof` makes for the body. */
async function nodeupBootstrap(
  proof: (body: Buffer) => Promise<string | undefined>,
): Promise<{ status: number; body: string }> {
  const kubelet = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey as KeyObject;
  const body = Buffer.from(
    JSON.stringify({
      apiVersion: kopsApiVersion,
      certs: { kubelet: encodePem('RSA PUBLIC KEY', spkiOf(kubelet)) },
      keypairIDs: { 'kubernetes-ca': ca.signer.certificate.keypairId },
    }),
  );
  const authorization = (await proof(body)) ?? '';
  const url = new URL('/bootstrap', boot.server.url);
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      url,
      { method: 'POST', ca: bundlePem(ca), headers: { authorization, 'content-type': 'application/json' } },
      (res) => {
        let text = '';
        res.on('data', (chunk) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

before(async () => {
  dir = await mkdtemp(joinPath(tmpdir(), 'pki-tpm-e2e-'));
  sim = await startApiServer();
  kubeconfigFile = joinPath(dir, 'kubeconfig');
  await writeFile(kubeconfigFile, sim.kubeconfig());
  const kubeConfig = sim.kubeConfig();
  const core = kubeConfig.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: 'kops-system' } } });
  // kops' own config for a metal cluster: `pki: {}` and no provider.
  const config = parseConfig({ clusterName: 'metal.example.com', cloud: 'metal', server: { pki: {} } });
  const policies = await buildPolicies(config, {
    replayGuard: new ConfigMapReplayGuard({ core }),
    hosts: new HostRegistry(kubeConfig),
    ca,
  });
  boot = await startBootstrapServer(config, {
    kubeConfig,
    policies,
    ca,
    listen: '127.0.0.1:0',
    apiServer: sim.url,
    serverNames: { ipAddresses: ['127.0.0.1'] },
    audit: (record) => audit.push(record),
    registry: new Registry(),
  });
});

after(async () => {
  await boot?.close();
  await sim?.close();
  await rm(dir, { recursive: true, force: true });
});

describe('kops metal (x-pki-tpm) through the simulators', () => {
  test('a host registered with `host add` proves itself with its key and gets its certificate (nodeup)', async () => {
    const m = await machine('metal-1');
    assert.match(
      await host('add', 'metal-1', '--public-key', m.publicKeyFile, '--instance-group', 'nodes'),
      /host kops-system\/metal-1 added \(instance group nodes\)/,
    );
    assert.match(await host('list', '-o', 'json'), /"instanceGroup": "nodes"/);
    const answer = await nodeupBootstrap(await pkiTpmProofFromFile(m.keyFile, { hostname: 'metal-1' }));
    assert.equal(answer.status, 200, answer.body);
    const kubelet = (JSON.parse(answer.body) as { Certs: Record<string, string> }).Certs['kubelet'] as string;
    assert.match(opensslText(kubelet), /CN ?= ?system:node:metal-1/);
    const record = audit.findLast((r) => r.nodeName === 'metal-1');
    assert.equal(record?.decidedBy, 'pki-tpm');
    assert.equal(record?.instanceGroup, 'nodes');
  });

  test('a machine joins with `join` (the native protocol) and learns its group', async () => {
    const m = await machine('metal-2');
    await host('add', 'metal-2', '--public-key', m.publicKeyFile, '--instance-group', 'nodes');
    const result = await join({
      server: boot.server.url,
      caBundlePem: `${bundlePem(ca)}${sim.caCertificate}\n`,
      apiServer: sim.url,
      nodeName: 'metal-2',
      dir: joinPath(dir, 'metal-2'),
      proof: await pkiTpmProofFromFile(m.keyFile, { hostname: 'metal-2' }),
      // A Host records no addresses, so nothing verifies a serving certificate's names (kops: no SANs).
      servingCertificate: false,
      timeoutMs: 20_000,
    });
    assert.equal(result.nodeName, 'metal-2');
    assert.equal(result.instanceGroup, 'nodes');
  });

  test('an unregistered machine, and one whose Host was deleted, get nothing', async () => {
    const stranger = await machine('stranger');
    const refused = await nodeupBootstrap(
      await pkiTpmProofFromFile(stranger.keyFile, { hostname: 'stranger' }),
    );
    assert.equal(refused.status, 403);
    assert.match(audit.at(-1)?.reasons.join(' ') ?? '', /no host kops-system\/stranger is registered/);

    const m = await machine('metal-3');
    await host('add', 'metal-3', '--public-key', m.publicKeyFile, '--instance-group', 'nodes');
    assert.match(await host('delete', 'metal-3'), /host kops-system\/metal-3 deleted/);
    const gone = await nodeupBootstrap(await pkiTpmProofFromFile(m.keyFile, { hostname: 'metal-3' }));
    assert.equal(gone.status, 403);
    await assert.rejects(
      host('delete', 'metal-3'),
      /no host kops-system\/metal-3; see `kops-controller host list`/,
    );
  });

  test('host add refuses what kops could not verify, before writing anything', async () => {
    const rsaKey = joinPath(dir, 'rsa.pub');
    await writeFile(
      rsaKey,
      createPublicKey(generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey).export({
        format: 'pem',
        type: 'spki',
      }),
    );
    await assert.rejects(
      host('add', 'rsa-host', '--public-key', rsaKey, '--instance-group', 'nodes'),
      /ECDSA keys only/,
    );
    const m = await machine('bad-name');
    await assert.rejects(
      host('add', 'Not_A_Name', '--public-key', m.publicKeyFile, '--instance-group', 'nodes'),
      /not a lower-case DNS name/,
    );
    await assert.rejects(
      host('add', 'x', '--public-key', joinPath(dir, 'missing.pem'), '--instance-group', 'nodes'),
      /cannot read --public-key/,
    );
    assert.doesNotMatch(await host('list'), /rsa-host|Not_A_Name/);
  });

  test('host add on a cluster without the kops-system namespace says what to install', async () => {
    const bare = await startApiServer();
    const bareKubeconfig = joinPath(dir, 'bare-kubeconfig');
    await writeFile(bareKubeconfig, bare.kubeconfig());
    try {
      const m = await machine('lonely');
      const command = hostCommand();
      await assert.rejects(
        command.parseAsync(
          [
            'add',
            'lonely',
            '--public-key',
            m.publicKeyFile,
            '--instance-group',
            'nodes',
            '--kubeconfig',
            bareKubeconfig,
          ],
          { from: 'user' },
        ),
        (err: Error) => {
          assert.equal(err.name, 'NotFoundError');
          assert.match(err.message, /create the kops-system namespace and install kops' Host CRD/);
          assert.equal(err.message.split('\n').length, 1);
          return true;
        },
      );
    } finally {
      await bare.close();
    }
  });
});
