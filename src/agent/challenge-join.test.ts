/**
 * `join` on a callback cloud against the real native handler on loopback: the node runs its
 * challenge server for the join, the handler's policy names that address as the cloud would, and the
 * controller calls back before issuing.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:https';
import { type AddressInfo, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join as joinPath } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { GrpcCallbackChallenger } from '../bootstrap/challenge-caller.ts';
import type { BootstrapContext } from '../bootstrap/context.ts';
import { dependencyFault } from '../bootstrap/dependency.ts';
import { submitCertificates } from '../bootstrap/native-handler.ts';
import type { BootstrapPolicy } from '../bootstrap/types.ts';
import { UnavailableError } from '../errors.ts';
import { silentLogger } from '../log.ts';
import { holdPort } from '../net/testing.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import { generateKey, privateKeyPem } from '../pki/keys.ts';
import { issueCertificate, publicKeyRequest } from '../pki/profiles.ts';
import { DeniedError } from './bootstrap-client.ts';
import { join } from './join.ts';
import { nodeFileNames } from './node-files.ts';

const clusterName = 'minimal.example.com';
const ca = createCa();
const caPem = bundlePem(ca);
let endpoint = '';
let faultsLeft = 0;
const challengeIds: string[] = [];

/** The callback cloud's policy: the instance's cloud address is where the node's challenge server listens. */
const policy: BootstrapPolicy = {
  name: 'hetzner',
  async evaluate(request) {
    if (request.challenge) challengeIds.push(request.challenge.challengeId);
    if (faultsLeft > 0) {
      faultsLeft--;
      throw dependencyFault('policy:hetzner', new UnavailableError('the cloud API is down'));
    }
    return {
      verdict: 'approve',
      facts: {
        nodeName: 'node-a',
        dnsNames: [],
        ipAddresses: ['127.0.0.1'],
        challengeEndpoint: endpoint,
        evidence: { server: '42' },
      },
      reasons: ['server 42 is ours'],
    };
  },
};

const context: BootstrapContext = {
  ca,
  policies: [policy],
  readNode: async () => undefined,
  apiServer: '',
  logger: silentLogger,
};
const challenger = new GrpcCallbackChallenger({ ca, clusterName, timeoutMs: 5000 });
let server: Server;
let url = '';
let dir = '';

before(async () => {
  const key = generateKey();
  const cert = issueCertificate(ca, 'kops-controller', publicKeyRequest(key), {
    name: 'kops-controller.internal',
    ipAddresses: ['127.0.0.1'],
  });
  server = createServer({ key: privateKeyPem(key), cert: cert.pem + caPem }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      try {
        const answer = await submitCertificates(
          context,
          {
            body: Buffer.concat(chunks),
            authorization: req.headers.authorization,
            remoteAddress: '127.0.0.1',
            receivedAt: new Date(),
          },
          { challenger },
        );
        res.writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers });
        res.end(JSON.stringify(answer.body));
      } catch (err) {
        res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '0' });
        res.end(JSON.stringify({ error: { reason: 'dependency-unavailable', message: String(err) } }));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  (context as { apiServer: string }).apiServer = url;
  dir = await mkdtemp(joinPath(tmpdir(), 'kops-challenge-join-'));
});
after(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await rm(dir, { recursive: true, force: true });
});

/** A free loopback port for the node's challenge server; the "cloud" reports it as the instance's. */
async function freeEndpoint(): Promise<string> {
  const held = await holdPort();
  await held.release();
  return `127.0.0.1:${held.port}`;
}

function refusesConnections(address: string): Promise<boolean> {
  const [host, port] = address.split(':') as [string, string];
  return new Promise((resolve) => {
    const socket = connect(Number(port), host);
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(true));
  });
}

describe('join on a callback cloud', () => {
  test('the node answers the callback: issued, written, and the challenge server is stopped afterwards', async () => {
    endpoint = await freeEndpoint();
    const out = joinPath(dir, 'answered');
    const result = await join({
      server: url,
      caBundlePem: caPem,
      nodeName: 'node-a',
      dir: out,
      proof: async () => 'x-hetzner-id 42',
      challenge: { clusterName, listen: endpoint },
      servingCertificate: false,
    });
    assert.equal(result.nodeName, 'node-a');
    assert.ok((await readdir(out)).includes(nodeFileNames.kubeconfig));
    assert.ok(await refusesConnections(endpoint), 'the challenge server must be gone after the join');
  });

  test('each attempt carries a fresh one-shot challenge (a retried request never reuses an id)', async () => {
    endpoint = await freeEndpoint();
    challengeIds.length = 0;
    faultsLeft = 1;
    await join({
      server: url,
      caBundlePem: caPem,
      nodeName: 'node-a',
      dir: joinPath(dir, 'retried'),
      proof: async () => 'x-hetzner-id 42',
      challenge: { clusterName, listen: endpoint },
      servingCertificate: false,
      retry: { initialMs: 1, maxMs: 5 },
      random: () => 0,
    });
    assert.equal(challengeIds.length, 2);
    assert.notEqual(challengeIds[0], challengeIds[1]);
  });

  test('a join that does not answer the callback is denied, and nothing is written', async () => {
    endpoint = await freeEndpoint();
    const out = joinPath(dir, 'silent');
    await assert.rejects(
      join({
        server: url,
        caBundlePem: caPem,
        nodeName: 'node-a',
        dir: out,
        proof: async () => 'x-hetzner-id 42',
        servingCertificate: false,
      }),
      (err: unknown) => err instanceof DeniedError && /callback challenge failed/.test(err.message),
    );
    assert.deepEqual(await readdir(out), []);
  });
});
