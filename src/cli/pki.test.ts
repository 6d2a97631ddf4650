import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { TLSSocket } from 'node:tls';
import { pathToFileURL } from 'node:url';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { parse } from 'yaml';
import { exitCodeOf } from '../errors.ts';
import { pinOfCertificatePem } from '../pki/pin.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { startS3Sim } from '../sim/s3/server.ts';
import { runCli, runCliResult } from '../testing/cli.ts';
import { openssl, opensslText, scratchFile } from '../testing/openssl.ts';
import { errorLine } from './main.ts';

const root = mkdtempSync(join(tmpdir(), 'kops-pki-cli-'));
after(() => rmSync(root, { recursive: true, force: true }));
let folders = 0;
const newDir = () => join(root, `pki-${folders++}`);

/** Runs `kops-controller pki ...` in process and returns what it printed. */
function pki(...args: string[]): Promise<string> {
  return runCli('pki', ...args);
}

async function pkiJson<T>(...args: string[]): Promise<T> {
  return JSON.parse(await pki(...args, '-o', 'json')) as T;
}

/** Expects the command to fail with the exit code and message a user would see. */
async function fails(args: string[], exitCode: number, message: RegExp): Promise<void> {
  await assert.rejects(pki(...args), (err: Error) => {
    assert.equal(exitCodeOf(err), exitCode);
    assert.match(err.message, message);
    return true;
  });
}

const modeOf = (path: string) => statSync(path).mode & 0o777;
const read = (path: string) => readFileSync(path, 'utf8');
const verify = (caFile: string, certificateFile: string) =>
  openssl(['verify', '-CAfile', caFile, certificateFile]).trim();

function nodeCsr(subject: string, extra: string[] = [], keyArgs = ['-newkey', 'rsa:2048']): string {
  const pem = openssl([
    'req',
    '-new',
    ...keyArgs,
    '-nodes',
    '-keyout',
    scratchFile('node.key', ''),
    '-subj',
    subject,
    ...extra,
  ]);
  return scratchFile('node.csr', pem);
}

describe('static clustering of a node with the CLI alone', () => {
  const dir = newDir();
  let caCertificate = '';

  test('pki init makes the CA: certificate 0644, key 0600, and prints the pin', async () => {
    const result = await pkiJson<{ caCertificate: string; caKey: string; pin: string }>('init', '--dir', dir);
    assert.deepEqual(Object.keys(result), ['caCertificate', 'caKey', 'pin']);
    assert.equal(result.caCertificate, join(dir, 'kubernetes-ca.crt'));
    assert.equal(result.caKey, join(dir, 'kubernetes-ca.key'));
    caCertificate = result.caCertificate;
    assert.equal(modeOf(result.caKey), 0o600);
    assert.equal(modeOf(result.caCertificate), 0o644);
    assert.equal(result.pin, pinOfCertificatePem(read(result.caCertificate)));
    assert.equal(verify(caCertificate, caCertificate), `${caCertificate}: OK`);
    assert.match(read(join(dir, 'keypair-ids.yaml')), /^kubernetes-ca: "?\d+"?\n$/);
  });

  test('pki init refuses to replace an existing CA', async () => {
    await fails(['init', '--dir', dir], 75, /already holds a CA "kubernetes-ca"/);
  });

  test('pki issue kubelet makes a key here and a client certificate openssl accepts', async () => {
    const result = await pkiJson<{ certificate: string; key: string }>(
      'issue',
      'kubelet',
      '--dir',
      dir,
      '--name',
      'node-a',
    );
    assert.deepEqual(result, {
      certificate: join(dir, 'nodes/node-a/kubelet.crt'),
      key: join(dir, 'nodes/node-a/kubelet.key'),
    });
    assert.equal(modeOf(result.key), 0o600);
    assert.equal(verify(caCertificate, result.certificate), `${result.certificate}: OK`);
    assert.match(
      opensslText(read(result.certificate)),
      /Subject: O = system:nodes, CN = system:node:node-a\n/,
    );
    const publicOfKey = openssl(['pkey', '-pubout', '-in', result.key]);
    assert.equal(openssl(['x509', '-pubkey', '-noout', '-in', result.certificate]), publicOfKey);
  });

  test('pki issue kubelet-server puts the given names in the certificate; people get a summary', async () => {
    const human = await pki(
      'issue',
      'kubelet-server',
      '--dir',
      dir,
      '--name',
      'node-a',
      '--ip',
      '10.0.0.5',
      '--dns',
      'node-a.internal',
      '--lifetime',
      '720h',
    );
    assert.match(
      human,
      /^issued kubelet-server certificate "CN=node-a" for node-a\.internal, 10\.0\.0\.5, valid until \d{4}-/,
    );
    const certificate = join(dir, 'nodes/node-a/kubelet-server.crt');
    assert.match(human, new RegExp(`certificate: ${certificate}\n`));
    assert.match(opensslText(read(certificate)), /DNS:node-a\.internal, IP Address:10\.0\.0\.5\n/);
    assert.equal(verify(caCertificate, certificate), `${certificate}: OK`);
  });

  test('pki sign certifies a key made on the node, from its CSR', async () => {
    const csr = nodeCsr('/O=system:nodes/CN=system:node:node-b');
    const result = await pkiJson<{ certificate: string }>(
      'sign',
      'kubelet',
      '--dir',
      dir,
      '--name',
      'node-b',
      '--csr',
      csr,
    );
    assert.deepEqual(result, { certificate: join(dir, 'nodes/node-b/kubelet.crt') });
    assert.equal(verify(caCertificate, result.certificate), `${result.certificate}: OK`);
    assert.equal(statSync(join(dir, 'nodes/node-b/kubelet.key'), { throwIfNoEntry: false }), undefined);
  });

  test('pki sign rejects CSRs that ask for more than the node is verified for', async () => {
    const extraSan = nodeCsr('/O=system:nodes/CN=system:node:node-b', [
      '-addext',
      'subjectAltName=IP:10.0.0.5,DNS:api.example.com',
    ]);
    await fails(
      ['sign', 'kubelet-server', '--dir', dir, '--name', 'node-b', '--ip', '10.0.0.5', '--csr', extraSan],
      65,
      /not verified for it: api\.example\.com/,
    );
    const weak = nodeCsr('/O=system:nodes/CN=system:node:node-b', [], ['-newkey', 'rsa:1024']);
    await fails(
      ['sign', 'kubelet', '--dir', dir, '--name', 'node-b', '--csr', weak],
      65,
      /1024 bits is too weak/,
    );
    const ca = nodeCsr('/O=system:nodes/CN=system:node:node-b', [
      '-addext',
      'basicConstraints=critical,CA:TRUE',
    ]);
    await fails(
      ['sign', 'kubelet', '--dir', dir, '--name', 'node-b', '--csr', ca],
      65,
      /asks for a CA certificate/,
    );
    await fails(
      ['sign', 'kubelet', '--dir', dir, '--name', 'node-b', '--csr', join(root, 'absent.csr')],
      66,
      /cannot read CSR file/,
    );
  });

  test('pki kubeconfig embeds the CA bundle and the existing kubelet pair, 0600', async () => {
    const result = await pkiJson<{ kubeconfig: string }>(
      'kubeconfig',
      '--dir',
      dir,
      '--name',
      'node-a',
      '--server',
      'https://api.example.com:6443',
    );
    assert.deepEqual(result, { kubeconfig: join(dir, 'nodes/node-a/kubelet.kubeconfig') });
    assert.equal(modeOf(result.kubeconfig), 0o600);
    const config = parse(read(result.kubeconfig));
    const decode = (value: string) => Buffer.from(value, 'base64').toString('utf8');
    assert.equal(config.clusters[0].cluster.server, 'https://api.example.com:6443');
    assert.equal(decode(config.clusters[0].cluster['certificate-authority-data']), read(caCertificate));
    assert.equal(config.users[0].name, 'system:node:node-a');
    assert.equal(
      decode(config.users[0].user['client-certificate-data']),
      read(join(dir, 'nodes/node-a/kubelet.crt')),
    );
    assert.equal(
      decode(config.users[0].user['client-key-data']),
      read(join(dir, 'nodes/node-a/kubelet.key')),
    );
    await fails(
      ['kubeconfig', '--dir', dir, '--name', 'node-a', '--server', 'http://api.example.com'],
      65,
      /must be an https:\/\/ URL/,
    );
  });

  test('pki kubeconfig for a node whose key stayed on it keeps the signed certificate and points to the key', async () => {
    const signed = read(join(dir, 'nodes/node-b/kubelet.crt'));
    const { kubeconfig } = await pkiJson<{ kubeconfig: string }>(
      'kubeconfig',
      '--dir',
      dir,
      '--name',
      'node-b',
      '--server',
      'https://api.example.com:6443',
    );
    const user = parse(read(kubeconfig)).users[0].user;
    assert.equal(Buffer.from(user['client-certificate-data'], 'base64').toString('utf8'), signed);
    assert.equal(user['client-key'], '/var/lib/kubelet/pki/kubelet-client.key');
    assert.equal(user['client-key-data'], undefined);
    assert.equal(read(join(dir, 'nodes/node-b/kubelet.crt')), signed);
    assert.equal(statSync(join(dir, 'nodes/node-b/kubelet.key'), { throwIfNoEntry: false }), undefined);
  });

  test('pki pin prints the pin; pki inspect summarises files and checks them against the CA', async () => {
    assert.equal(await pki('pin', '--dir', dir), `${pinOfCertificatePem(read(caCertificate))}\n`);
    const certificate = join(dir, 'nodes/node-a/kubelet-server.crt');
    const human = await pki('inspect', certificate, '--dir', dir);
    assert.match(human, /^type: certificate\nsubject: CN=node-a\nissuer: CN=kubernetes-ca\n/m);
    assert.match(
      human,
      /ext key usage: serverAuth\ndns names: node-a\.internal\nip addresses: 10\.0\.0\.5\n/,
    );
    assert.match(human, /signed by ca: true\n$/);
    const summary = await pkiJson<{ type: string; ipAddresses: string[]; signedByCa?: boolean }>(
      'inspect',
      certificate,
    );
    assert.equal(summary.type, 'certificate');
    assert.deepEqual(summary.ipAddresses, ['10.0.0.5']);
    assert.equal(summary.signedByCa, undefined);
    const request = await pkiJson<{ type: string; signature: string }>('inspect', nodeCsr('/CN=node-c'));
    assert.deepEqual([request.type, request.signature], ['certificate-request', 'valid']);
  });
});

test('bad input gives one clear error, never a crash', async () => {
  const dir = newDir();
  await fails(
    ['issue', 'kubelet', '--dir', dir, '--name', 'node-a'],
    66,
    /no CA "kubernetes-ca" in file:\/\/.*run "kops-controller pki init" first/,
  );
  await pki('init', '--dir', dir, '--key-algorithm', 'rsa-2048');
  await fails(['issue', 'root', '--dir', dir, '--name', 'node-a'], 65, /unknown certificate profile "root"/);
  await fails(['issue', 'kubelet', '--dir', dir, '--name', '../../etc'], 65, /not a valid DNS name/);
  await fails(
    ['issue', 'kubelet-server', '--dir', dir, '--name', 'node-a', '--ip', '300.1.1.1'],
    65,
    /not an IP address/,
  );
  await fails(
    ['issue', 'kubelet', '--dir', dir, '--name', 'node-a', '--lifetime', 'forever'],
    65,
    /invalid duration/,
  );
  await fails(['inspect', join(root, 'absent.pem')], 66, /cannot read/);
});

test('errors name the flag and say why a file cannot be read, once', async () => {
  const dir = newDir();
  await fails(
    ['init', '--dir', dir, '--lifetime', 'banana'],
    65,
    /^--lifetime banana: invalid duration "banana"/,
  );
  await pki('init', '--dir', dir);
  await fails(
    ['issue', 'kubelet', '--dir', dir, '--name', 'node-a', '--lifetime', 'banana'],
    65,
    /^--lifetime banana: /,
  );
  const missing = join(root, 'absent.csr');
  await assert.rejects(pki('sign', 'kubelet', '--dir', dir, '--name', 'node-a', '--csr', missing), (err) => {
    assert.equal(exitCodeOf(err), 66);
    assert.equal(errorLine(err), `cannot read CSR file ${missing}: no such file`);
    return true;
  });
});

test('a directory where a file is expected: one line naming the flag, exit 66, never an internal error', async () => {
  const dir = newDir();
  await pki('init', '--dir', dir);
  const folder = mkdtempSync(join(root, 'a-directory-'));
  for (const [args, what] of [
    [['inspect', folder], 'file'],
    [['sign', 'kubelet', '--dir', dir, '--name', 'node-a', '--csr', folder], 'CSR file'],
    [['apply', folder, '--dir', dir], 'apply file'],
    [
      ['kubeconfig', '--dir', dir, '--name', 'node-a', '--server', 'https://a:6443', '--server-ca', folder],
      '--server-ca',
    ],
  ] as const) {
    await assert.rejects(pki(...args), (err) => {
      assert.equal(errorLine(err), `cannot read ${what} ${folder}: is a directory`, args.join(' '));
      assert.equal(exitCodeOf(err), 66, args.join(' '));
      return true;
    });
  }
});

test('a --dir that cannot be a directory or be created is a configuration error (78), one line', {
  timeout: 30_000,
}, async () => {
  const file = scratchFile('not-a-directory', 'x');
  await assert.rejects(pki('init', '--dir', file), (err) => {
    assert.equal(
      errorLine(err),
      `cannot write file://${file}/kubernetes-ca.crt: a parent is not a directory`,
    );
    assert.equal(exitCodeOf(err), 78);
    return true;
  });
  await assert.rejects(pki('init', '--dir', '/proc/kops-controller-test/pki'), (err) => {
    assert.equal(
      errorLine(err),
      'cannot write file:///proc/kops-controller-test/pki/kubernetes-ca.crt: its directory cannot be created',
    );
    assert.equal(exitCodeOf(err), 78);
    return true;
  });
});

test('pki inspect --dir of a certificate another CA issued prints it and exits 77', async () => {
  const ours = newDir();
  const theirs = newDir();
  await pki('init', '--dir', ours);
  await pki('init', '--dir', theirs);
  await pki('issue', 'kubelet', '--dir', theirs, '--name', 'node-x');
  const certificate = join(theirs, 'nodes/node-x/kubelet.crt');
  const { output, error } = await runCliResult('pki', 'inspect', certificate, '--dir', ours);
  assert.match(output, /signed by ca: false\n$/);
  assert.equal(exitCodeOf(error), 77);
  assert.equal(
    errorLine(error),
    `${certificate}: "O=system:nodes, CN=system:node:node-x" not signed by CA kubernetes-ca in ${ours}`,
  );
  // The CA that did sign it answers 0.
  assert.match(await pki('inspect', certificate, '--dir', theirs), /signed by ca: true\n$/);
});

// Node's recursive mkdir never returns for a new name under /proc; the test's timeout is the failure.
test('a PKI folder that cannot be created fails at once, never spins', { timeout: 30_000 }, async () => {
  await assert.rejects(pki('init', '--dir', '/proc/kops-controller-test/pki'), (err) => {
    assert.match(
      errorLine(err),
      /^cannot write file:\/\/\/proc\/kops-controller-test\/pki\/kubernetes-ca\.crt: /,
    );
    return true;
  });
});

test('a kops keyset layout and a file:// URL work as the PKI folder', async () => {
  const url = pathToFileURL(newDir()).href;
  const result = await pkiJson<{ caCertificate: string; caKey: string }>(
    'init',
    '--dir',
    url,
    '--layout',
    'keyset',
  );
  assert.match(result.caCertificate, /pki\/private\/kubernetes-ca\/keyset\.yaml$/);
  assert.equal(modeOf(result.caKey), 0o600);
  assert.match(read(result.caKey), /kind: Keyset/);
  const issued = await pkiJson<{ certificate: string }>(
    'issue',
    'kube-proxy',
    '--dir',
    url,
    '--name',
    'node-a',
  );
  assert.match(opensslText(read(issued.certificate)), /Subject: CN = system:kube-proxy\n/);
  const pin = (await pki('pin', '--dir', url)).trim();
  assert.match(pin, /^sha256:[0-9a-f]{64}$/);
});

test('pki rotate: the new CA signs, certificates from the old one stay valid, in both layouts', async () => {
  for (const layout of ['pem', 'keyset']) {
    const dir = newDir();
    const first = await pkiJson<{ pin: string }>('init', '--dir', dir, '--layout', layout);
    const old = await pkiJson<{ certificate: string }>('issue', 'kubelet', '--dir', dir, '--name', 'node-a');
    const rotated = await pkiJson<{ caCertificate: string; pin: string; pins: string[] }>(
      'rotate',
      '--dir',
      dir,
    );
    assert.notEqual(rotated.pin, first.pin);
    assert.deepEqual(rotated.pins, [rotated.pin, first.pin]);
    assert.deepEqual((await pki('pin', '--dir', dir)).trim().split('\n'), rotated.pins);
    const fresh = await pkiJson<{ certificate: string }>(
      'issue',
      'kubelet',
      '--dir',
      dir,
      '--name',
      'node-b',
    );
    for (const certificate of [old.certificate, fresh.certificate]) {
      const summary = await pkiJson<{ signedByCa: boolean }>('inspect', certificate, '--dir', dir);
      assert.equal(summary.signedByCa, true, `${layout}: ${certificate} chains to the bundle`);
    }
    if (layout === 'pem') {
      assert.equal(verify(rotated.caCertificate, old.certificate), `${old.certificate}: OK`);
      assert.equal(verify(rotated.caCertificate, fresh.certificate), `${fresh.certificate}: OK`);
      const [newCa] = read(rotated.caCertificate).split(/(?<=-----END CERTIFICATE-----\n)/);
      assert.equal(
        verify(scratchFile('new-ca.pem', newCa as string), fresh.certificate).endsWith(': OK'),
        true,
      );
      assert.throws(() => verify(scratchFile('new-ca.pem', newCa as string), old.certificate));
    }
  }
});

test('an s3:// state store works as the PKI folder (kops S3_* variables, simulated S3)', async () => {
  const s3 = await startS3Sim({ buckets: ['state'] });
  const env = {
    S3_ENDPOINT: s3.endpoint,
    S3_REGION: 'us-test-1',
    S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
    S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
  };
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  try {
    const url = 's3://state/cluster.example.com';
    const init = await pkiJson<{ caCertificate: string; caKey: string }>(
      'init',
      '--dir',
      url,
      '--layout',
      'keyset',
    );
    assert.equal(init.caKey, `${url}/pki/private/kubernetes-ca/keyset.yaml`);
    assert.match(
      s3.getObject('state', 'cluster.example.com/pki/private/kubernetes-ca/keyset.yaml')?.toString() ?? '',
      /kind: Keyset/,
    );
    const issued = await pkiJson<{ certificate: string }>(
      'issue',
      'kubelet',
      '--dir',
      url,
      '--name',
      'node-a',
    );
    assert.equal(issued.certificate, `${url}/nodes/node-a/kubelet.crt`);
    const certificate =
      s3.getObject('state', 'cluster.example.com/nodes/node-a/kubelet.crt')?.toString() ?? '';
    const summary = await pkiJson<{ signedByCa: boolean }>(
      'inspect',
      scratchFile('s3-kubelet.crt', certificate),
      '--dir',
      url,
    );
    assert.equal(summary.signedByCa, true);
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    await s3.close();
  }
});

test('the real program: exit code 65 and one line on a rejected CSR', () => {
  const dir = newDir();
  const cli = (...args: string[]) =>
    spawnSync(process.execPath, ['src/cli/main.ts', '-v', '0', 'pki', ...args], {
      encoding: 'utf8',
      cwd: new URL('../..', import.meta.url),
    });
  assert.equal(cli('init', '--dir', dir).status, 0);
  const run = cli(
    'sign',
    'kubelet',
    '--dir',
    dir,
    '--name',
    'node-a',
    '--csr',
    scratchFile('bad.csr', 'garbage'),
  );
  assert.equal(run.status, 65);
  assert.equal(run.stderr, 'kops-controller: no PEM block found; expected a CERTIFICATE REQUEST\n');
});

test('round trip: the kubelet kubeconfig authenticates to the simulated API server as the node', async () => {
  const dir = newDir();
  await pki('init', '--dir', dir);
  const sim = await startApiServer({ clientCAs: [read(join(dir, 'kubernetes-ca.crt'))] });
  try {
    const serverCa = scratchFile('sim-ca.crt', sim.caCertificate);
    const { kubeconfig } = await pkiJson<{ kubeconfig: string }>(
      'kubeconfig',
      '--dir',
      dir,
      '--name',
      'node-a',
      '--server',
      sim.url,
      '--server-ca',
      serverCa,
    );
    const config = new KubeConfig();
    config.loadFromString(read(kubeconfig));
    const core = config.makeApiClient(CoreV1Api);
    // Nodes may list nodes; secrets are refused, and the refusal names who the server thinks we are.
    const nodes = await core.listNode();
    assert.ok(Array.isArray(nodes.items));
    await assert.rejects(core.listNamespacedSecret({ namespace: 'kube-system' }), (err: Error) => {
      assert.match(
        String((err as { body?: unknown }).body),
        /User \\"system:node:node-a\\" cannot list resource \\"secrets\\"/,
      );
      return true;
    });
  } finally {
    await sim.close();
  }
});

describe('pki apply: a whole cluster from one file', () => {
  const dir = newDir();
  const file = (text: string) => scratchFile('cluster.yaml', text);
  const cluster = `
cluster:
  name: example.com
  serviceClusterIPRange: 100.64.0.0/13
server: https://api.example.com:6443
controlPlane:
  names: [api.example.com]
  addresses: [10.0.0.10]
admins:
  - name: alice
nodes:
  - name: node-a
    addresses: [10.0.0.11]
    names: [node-a.internal]
  - name: node-b
`;
  type Plan = { path: string; profile: string; action: string; reasons: string[]; kubeconfig?: string }[];
  const applyJson = (text: string, ...args: string[]) =>
    pkiJson<{
      plan: Plan;
      applied?: { certificates: number; kubeconfigs: number; files: number; out: string };
    }>('apply', file(text), '--dir', dir, ...args);
  const actionsOf = (plan: Plan) => Object.fromEntries(plan.map((p) => [p.path, p.action]));

  test('--dry-run prints the plan and writes nothing', async () => {
    await pki('init', '--dir', dir);
    const human = await pki('apply', file(cluster), '--dir', dir, '--dry-run');
    assert.match(
      human,
      /^plan: 9 to issue, 0 to re-issue, 0 to renew, 0 unchanged; 7 kubeconfigs to write\n/,
    );
    assert.match(human, /\n {2}issue {4}control-plane\/kube-apiserver +kube-apiserver: not issued yet\n/);
    assert.match(human, /\n {2}issue {4}admins\/alice +admin: not issued yet \(\+ kubeconfig\)\n/);
    const { plan, applied } = await applyJson(cluster, '--dry-run');
    assert.equal(applied, undefined);
    assert.equal(plan.length, 9);
    assert.deepEqual(
      spawnSync('find', [dir, '-type', 'f'], { encoding: 'utf8' }).stdout.trim().split('\n').sort(),
      [join(dir, 'keypair-ids.yaml'), join(dir, 'kubernetes-ca.crt'), join(dir, 'kubernetes-ca.key')],
    );
  });

  test('apply issues every bundle and kubeconfig; openssl verifies each and reads the names', async () => {
    const { plan, applied } = await applyJson(cluster);
    assert.ok(plan.every((p) => p.action === 'issue'));
    assert.deepEqual(applied, { certificates: 9, kubeconfigs: 7, files: 25, out: dir });
    const ca = join(dir, 'kubernetes-ca.crt');
    for (const { path } of plan) {
      const certificate = join(dir, `${path}.crt`);
      assert.equal(verify(ca, certificate), `${certificate}: OK`);
      assert.equal(modeOf(certificate), 0o644);
      assert.equal(modeOf(join(dir, `${path}.key`)), 0o600);
    }
    const apiServer = opensslText(read(join(dir, 'control-plane/kube-apiserver.crt')));
    assert.match(apiServer, /Subject: CN = kubernetes-master\n/);
    assert.match(
      apiServer,
      /DNS:kubernetes, DNS:kubernetes\.default, DNS:kubernetes\.default\.svc, DNS:kubernetes\.default\.svc\.cluster\.local, DNS:api\.example\.com, DNS:api\.internal\.example\.com, IP Address:100\.64\.0\.1, IP Address:127\.0\.0\.1, IP Address:10\.0\.0\.10\n/,
    );
    assert.match(apiServer, /TLS Web Server Authentication\n/);
    assert.match(
      opensslText(read(join(dir, 'admins/alice.crt'))),
      /Subject: O = system:masters, CN = alice\n/,
    );
    assert.match(
      opensslText(read(join(dir, 'control-plane/kube-controller-manager.crt'))),
      /Subject: CN = system:kube-controller-manager\n[\s\S]*TLS Web Client Authentication\n/,
    );
    assert.match(
      opensslText(read(join(dir, 'nodes/node-a/kubelet-server.crt'))),
      /DNS:node-a\.internal, IP Address:10\.0\.0\.11\n/,
    );
    for (const kubeconfig of ['admins/alice', 'nodes/node-b/kubelet', 'control-plane/kube-scheduler']) {
      assert.equal(modeOf(join(dir, `${kubeconfig}.kubeconfig`)), 0o600);
    }
  });

  test('a second apply keeps everything and rewrites no file', async () => {
    const before = statSync(join(dir, 'nodes/node-a/kubelet.crt')).mtimeMs;
    const { plan, applied } = await applyJson(cluster);
    assert.ok(plan.every((p) => p.action === 'keep' && p.kubeconfig !== 'write'));
    assert.deepEqual(applied, { certificates: 0, kubeconfigs: 0, files: 0, out: dir });
    assert.equal(statSync(join(dir, 'nodes/node-a/kubelet.crt')).mtimeMs, before);
  });

  test('--renew-before renews what expires sooner; a new node and a changed address are the only other changes', async () => {
    const grown = `${cluster.replace('10.0.0.11', '10.0.0.12')}  - name: node-c\n`;
    const { plan } = await applyJson(grown, '--renew-before', '19h');
    assert.deepEqual(
      Object.entries(actionsOf(plan)).filter(([, action]) => action !== 'keep'),
      [
        ['admins/alice', 'renew'],
        ['nodes/node-a/kubelet-server', 'reissue'],
        ['nodes/node-c/kubelet', 'issue'],
        ['nodes/node-c/kube-proxy', 'issue'],
      ],
    );
    assert.match(
      opensslText(read(join(dir, 'nodes/node-a/kubelet-server.crt'))),
      /IP Address:10\.0\.0\.12\n/,
    );
  });

  test('bad input: one readable line, exit code 65, nothing written', async () => {
    const fresh = newDir();
    await pki('init', '--dir', fresh);
    const cases: [string, RegExp][] = [
      ['nodes: [{name: node_a}]\nserver: https://a.example.com', /nodes\[0\]\.name: is not a valid DNS name/],
      [
        'nodes: [{name: kubernetes.default}]\nserver: https://a.example.com',
        /kubelet: name: kubernetes\.default is a name of the cluster's API server/,
      ],
      [
        'cluster: {name: example.com}\nnodes: [{name: a, names: [api.internal.example.com]}]',
        /api\.internal\.example\.com is a name of the cluster's API server/,
      ],
      ['admins: [{name: a, lifetime: soon}]\nserver: https://a.example.com', /admins\[0\]\.lifetime: /],
    ];
    for (const [text, message] of cases) {
      const path = file(text);
      await assert.rejects(pki('apply', path, '--dir', fresh), (err: Error) => {
        assert.equal(exitCodeOf(err), 65, text);
        assert.match(errorLine(err), message, text);
        assert.doesNotMatch(errorLine(err), /\n/, text);
        return true;
      });
    }
    assert.deepEqual(
      spawnSync('find', [fresh, '-type', 'f'], { encoding: 'utf8' }).stdout.trim().split('\n').length,
      3,
    );
    await fails(['apply', join(fresh, 'missing.yaml'), '--dir', fresh], 66, /cannot read apply file/);
    await fails(['apply', file(cluster), '--dir', newDir()], 66, /no CA "kubernetes-ca"/);
    await fails(['apply', file(cluster), '--dir', fresh, '--renew-before', 'soon'], 65, /--renew-before/);
  });

  test('round trip over TLS: the API server certificate and the scheduler kubeconfig authenticate each other', async () => {
    const fresh = newDir();
    await pki('init', '--dir', fresh);
    const clients: string[] = [];
    const server = createHttpsServer({ requestCert: true, rejectUnauthorized: true }, (req, res) => {
      clients.push((req.socket as TLSSocket).getPeerCertificate().subject.CN as string);
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ kind: 'NodeList', apiVersion: 'v1', metadata: {}, items: [] }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const text = `controlPlane:\n  components: [kube-apiserver, kube-scheduler]\n  server: https://127.0.0.1:${port}\n`;
      await pki('apply', file(text), '--dir', fresh);
      server.setSecureContext({
        key: read(join(fresh, 'control-plane/kube-apiserver.key')),
        cert: read(join(fresh, 'control-plane/kube-apiserver.crt')),
        ca: read(join(fresh, 'kubernetes-ca.crt')),
      });
      const config = new KubeConfig();
      config.loadFromString(read(join(fresh, 'control-plane/kube-scheduler.kubeconfig')));
      const nodes = await config.makeApiClient(CoreV1Api).listNode();
      assert.deepEqual(nodes.items, []);
      assert.deepEqual(clients, ['system:kube-scheduler']);
    } finally {
      server.close();
    }
  });
});
