/**
 * `cfssl serve` (Debian golang-cfssl) as the plain comparison's other signer: the same CA, a serving
 * certificate from it, the same CSRs, over TLS.
 */
import { execFileSync, spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { servingCertificate } from '../../src/bootstrap/server.ts';
import { bundlePem, type CertificateAuthority } from '../../src/pki/ca.ts';
import { privateKeyPem } from '../../src/pki/keys.ts';
import { toolPath } from '../../src/testing/tools.ts';
import { post, warmUp } from './client.ts';
import { kubeletCsr } from './nodes.ts';
import type { PlainSigner } from './plain.ts';
import { cpuSecondsOf, exited } from './server-process.ts';
import type { ServerProcess, StormNode, StormRequest } from './types.ts';
import { cfsslCertificate } from './verify.ts';

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

/** The version line of the cfssl binary, or why it cannot run here. */
function cfsslBinary(): { path: string; version: string } | { unavailable: string } {
  try {
    const path = toolPath('cfssl');
    const out = execFileSync(path, ['version'], { encoding: 'utf8', timeout: 10_000 });
    return { path, version: /Version:\s*(\S+)/.exec(out)?.[1] ?? out.split('\n')[0] ?? 'unknown' };
  } catch (err) {
    return { unavailable: `cfssl (Debian golang-cfssl) cannot run here: ${(err as Error).message}` };
  }
}

/** The PEM files of the CA and the serving certificate, and the command line that serves with them. */
async function cfsslArgs(
  dir: string,
  port: number,
  pems: { caCert: string; caKey: string; tlsCert: string; tlsKey: string },
): Promise<string[]> {
  const file = async (name: string, text: string) => {
    const path = join(dir, name);
    await writeFile(path, text, { mode: 0o600 });
    return path;
  };
  const signing = { default: { expiry: '8760h', usages: ['digital signature', 'client auth'] } };
  return [
    'serve',
    '-address=127.0.0.1',
    `-port=${port}`,
    `-ca=${await file('ca.pem', pems.caCert)}`,
    `-ca-key=${await file('ca-key.pem', pems.caKey)}`,
    `-config=${await file('cfssl.json', JSON.stringify({ signing }))}`,
    `-tls-cert=${await file('tls.pem', pems.tlsCert)}`,
    `-tls-key=${await file('tls-key.pem', pems.tlsKey)}`,
    '-loglevel=5',
  ];
}

/**
 * `cfssl serve` with the same CA over TLS (a serving certificate from the same CA), signing client
 * certificates with a default profile; resolves once it answers a signing request.
 */
async function startCfssl(
  binary: string,
  dir: string,
  pems: { caCert: string; caKey: string; tlsCert: string; tlsKey: string },
  probe: StormRequest,
): Promise<ServerProcess> {
  const port = await freePort();
  const child = spawn(binary, await cfsslArgs(dir, port, pems), { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString('utf8')).slice(-2000);
  });
  const url = `https://127.0.0.1:${port}`;
  const stop = async () => {
    child.kill();
    await exited(child);
  };
  const deadline = Date.now() + 15_000;
  for (;;) {
    const reply = await post(url, probe, { caPem: pems.caCert }, false);
    if (reply.status === 200) break;
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(
        `cfssl serve did not sign (${reply.status} ${reply.text.slice(0, 200)}); its log: ${stderr.trim()}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { url, cpuSeconds: () => cpuSecondsOf(child.pid as number), stop };
}

/** `cfssl serve` with the same CA, warmed up, for the same CSRs; or why cfssl could not run here. */
export async function startCfsslSigner(
  ca: CertificateAuthority,
  nodes: readonly StormNode[],
  dir: string,
  concurrency: number,
): Promise<{ version: string; signer: PlainSigner } | { unavailable: string }> {
  const binary = cfsslBinary();
  if ('unavailable' in binary) return binary;
  const caPem = bundlePem(ca);
  const signRequest = (csrPem: string) => ({
    path: '/api/v1/cfssl/sign',
    body: JSON.stringify({ certificate_request: csrPem }),
  });
  const probe = signRequest(kubeletCsr('warm-up'));
  const tls = servingCertificate(ca, { name: 'cfssl', ipAddresses: ['127.0.0.1'] });
  let server: ServerProcess;
  try {
    const pems = { caCert: caPem, caKey: privateKeyPem(ca.signer.key), tlsCert: tls.cert, tlsKey: tls.key };
    server = await startCfssl(binary.path, dir, pems, probe);
  } catch (err) {
    return { unavailable: (err as Error).message };
  }
  await warmUp(server.url, probe, caPem, { nodes: nodes.length, concurrency }).catch(async (err: unknown) => {
    await server.stop();
    throw err;
  });
  const requests = nodes.map((node) => signRequest(node.csrPem));
  return {
    version: binary.version,
    signer: {
      name: `cfssl ${binary.version}`,
      server,
      requests,
      check: { nodes, certificateOf: cfsslCertificate, caPem },
    },
  };
}
