import 'reflect-metadata';
import assert from 'node:assert/strict';
import { webcrypto } from 'node:crypto';
import { after, before, test } from 'node:test';
import {
  AuthorityInfoAccessExtension,
  BasicConstraintsExtension,
  KeyUsageFlags,
  KeyUsagesExtension,
  X509CertificateGenerator,
} from '@peculiar/x509';
import * as pkijs from 'pkijs';
import { Registry } from 'prom-client';
import {
  type AttestationSigner,
  createAttestationAuthority,
  issueAttestationSigner,
  signAttestedContent,
} from '../../sim/azure/attestation.ts';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import { cloudCallsTimed, cloudRequests } from '../../testing/cloud-calls.ts';
import { cloudCallMetrics } from '../metrics.ts';
import { AttestedDocumentVerifier, formatAttestedTime, nonceForBody } from './attested-document.ts';
import { AiaIntermediates } from './intermediates.ts';

let sim: AzureSimulator;
const body = Buffer.from('{"aia":1}');

before(async () => {
  sim = await startAzureSimulator();
});
after(() => sim.close());

/** A document as Azure sends it: the signer's certificate only. */
function leafOnly(): Promise<string> {
  const now = new Date();
  return signAttestedContent(
    {
      nonce: nonceForBody(body),
      vmId: 'vm-1',
      subscriptionId: 'sub',
      timeStamp: { createdOn: formatAttestedTime(now) },
    },
    sim.authority.signer,
    'leaf',
  );
}

function verifier(intermediates: AiaIntermediates) {
  return new AttestedDocumentVerifier({ roots: [sim.authority.rootPem], fetchIntermediates: intermediates });
}

test('a leaf-only document verifies through the issuer its AIA names in the repository, fetched once', async () => {
  const aia = new AiaIntermediates({ baseUrl: sim.pkiUrl });
  sim.clearCalls();
  assert.equal((await verifier(aia).verify(await leafOnly(), body)).vmId, 'vm-1');
  assert.equal((await verifier(aia).verify(await leafOnly(), body)).vmId, 'vm-1');
  assert.equal(sim.count('pki.certificate'), 1);
});

test('AIA URLs outside the repository are never fetched; inside ones take its scheme', () => {
  const aia = new AiaIntermediates({ baseUrl: 'https://www.microsoft.com/pkiops/certs' });
  assert.equal(
    aia.normalise(
      'http://www.microsoft.com/pkiops/certs/Microsoft%20Azure%20RSA%20TLS%20Issuing%20CA%2004.crt',
    ),
    'https://www.microsoft.com/pkiops/certs/Microsoft%20Azure%20RSA%20TLS%20Issuing%20CA%2004.crt',
  );
  for (const url of [
    'http://evil.example/pkiops/certs/a.crt',
    'http://www.microsoft.com:8080/pkiops/certs/a.crt',
    'http://user@www.microsoft.com/pkiops/certs/a.crt',
    'http://www.microsoft.com/pkiops/certs/a.crt?x=1',
    'http://www.microsoft.com/pkiops/certs/a.crt#f',
    'http://www.microsoft.com/pkiops/certsX/a.crt',
    'http://www.microsoft.com/pkiops/certs/../../evil.crt',
    'http://www.microsoft.com/pkiops/certs/%2e%2e/%2e%2e/evil.crt',
    'ftp://www.microsoft.com/pkiops/certs/a.crt',
    'http://www.microsoft.com/pkiops/certs/%E0%A4%A.crt',
    'not a url',
  ]) {
    assert.equal(aia.normalise(url), undefined, url);
  }
});

test('the repository failing is an UnavailableError, remembered for a while; a 404 is no chain', async () => {
  sim.failNext(1, 503, 'pki.certificate');
  const failing = new AiaIntermediates({ baseUrl: sim.pkiUrl });
  await assert.rejects(verifier(failing).verify(await leafOnly(), body), { name: 'UnavailableError' });
  sim.clearCalls();
  await assert.rejects(verifier(failing).verify(await leafOnly(), body), { name: 'UnavailableError' });
  assert.equal(sim.count('pki.certificate'), 0, 'the failure is not fetched again within 5 minutes');
  const missing = new AiaIntermediates({
    baseUrl: sim.pkiUrl,
    fetch: async () => new Response('', { status: 404 }),
  });
  await assert.rejects(verifier(missing).verify(await leafOnly(), body), {
    name: 'UnauthenticatedError',
    message: /does not chain/,
  });
  // A repository the signer's AIA does not point into is not asked at all.
  sim.clearCalls();
  const elsewhere = new AiaIntermediates({ baseUrl: `${sim.pkiUrl}/elsewhere` });
  await assert.rejects(verifier(elsewhere).verify(await leafOnly(), body), /does not chain/);
  assert.equal(sim.count('pki.certificate'), 0);
});

test("a certificate that is not the signer's issuer is not taken as it", async () => {
  const root = Buffer.from(sim.authority.root.certificate.rawData);
  const wrong = new AiaIntermediates({ baseUrl: sim.pkiUrl, fetch: async () => new Response(root) });
  await assert.rejects(verifier(wrong).verify(await leafOnly(), body), { name: 'UnauthenticatedError' });
});

/** A document signed by `signer`, as Azure sends it (the leaf alone). */
function signedBy(signer: AttestationSigner): Promise<string> {
  return signAttestedContent(
    {
      nonce: nonceForBody(body),
      vmId: 'vm-x',
      subscriptionId: 'sub',
      timeStamp: { createdOn: formatAttestedTime(new Date()) },
    },
    signer,
    'leaf',
  );
}

/** A fetch that answers 404 to everything and keeps what it was asked. */
function notFoundFetch(asked: string[]): typeof globalThis.fetch {
  return async (input) => {
    asked.push(String(input));
    return new Response('', { status: 404 });
  };
}

const repository = 'https://www.microsoft.com/pkiops/certs';

test('attack: a forged signer naming 150 issuer URLs in the repository makes one request fetch at most 2 of them, each at most once across requests, and every fetch is counted', async () => {
  // tmp/volume/azure-aia-fanout.ts: a self-made signer whose AIA lists 150 URLs under Microsoft's
  // repository made the controller fetch all 150 for one unauthenticated request, uncounted.
  const attacker = await createAttestationAuthority('eastus', 'Attacker Root');
  const urls = Array.from({ length: 150 }, (_, i) => `${repository}/forged-${i}.crt`);
  const signer = await issueAttestationSigner(
    attacker.issuing,
    ['eastus.metadata.azure.com'],
    [],
    urls as unknown as string, // the extension takes a list, as a certificate may carry one
  );
  const registry = new Registry();
  const asked: string[] = [];
  const aia = new AiaIntermediates({ fetch: notFoundFetch(asked), cloudCalls: cloudCallMetrics(registry) });
  const document = await signedBy(signer);
  await assert.rejects(verifier(aia).verify(document, body), /does not chain/);
  assert.deepEqual(asked, urls.slice(0, 2));
  // The same URLs again within 5 minutes: remembered, not fetched.
  await assert.rejects(verifier(aia).verify(document, body), /does not chain/);
  assert.equal(asked.length, 2);
  assert.deepEqual(await cloudRequests(registry), { 'azure pki.certificate rejected': 2 });
  assert.equal(await cloudCallsTimed(registry, 'azure', 'pki.certificate'), 2);
});

test('the 2 issuer URLs a chain may follow count over its hops: an intermediate fetched on the way leaves one for its own issuer', async () => {
  const attacker = await createAttestationAuthority('eastus', 'Attacker Root');
  const pair = (await webcrypto.subtle.generateKey(
    {
      name: 'RSASSA-PKCS1-v1_5',
      hash: 'SHA-256',
      publicExponent: new Uint8Array([1, 0, 1]),
      modulusLength: 2048,
    },
    true,
    ['sign', 'verify'],
  )) as webcrypto.CryptoKeyPair;
  const middle = await X509CertificateGenerator.create({
    subject: 'CN=Attacker Middle CA',
    issuer: attacker.root.certificate.subject,
    publicKey: pair.publicKey,
    signingKey: attacker.root.privateKey,
    signingAlgorithm: { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' },
    extensions: [
      new BasicConstraintsExtension(true, 0, true),
      new KeyUsagesExtension(KeyUsageFlags.keyCertSign, true),
      new AuthorityInfoAccessExtension({ caIssuers: [`${repository}/b.crt`, `${repository}/c.crt`] }),
    ],
    notBefore: new Date(Date.now() - 3_600_000),
    notAfter: new Date(Date.now() + 86_400_000),
  });
  const signer = await issueAttestationSigner(
    { certificate: middle, privateKey: pair.privateKey },
    ['eastus.metadata.azure.com'],
    [],
    `${repository}/a.crt`,
  );
  const asked: string[] = [];
  const aia = new AiaIntermediates({
    fetch: async (input) => {
      asked.push(String(input));
      return String(input).endsWith('/a.crt')
        ? new Response(Buffer.from(middle.rawData))
        : new Response('', { status: 404 });
    },
  });
  await assert.rejects(verifier(aia).verify(await signedBy(signer), body), /does not chain/);
  assert.deepEqual(asked, [`${repository}/a.crt`, `${repository}/b.crt`]);
});

test('requests that need the same issuer at once share one fetch of it', async () => {
  const signer = await issueAttestationSigner(
    sim.authority.issuing,
    ['eastus.metadata.azure.com'],
    [],
    `${repository}/shared.crt`,
  );
  const leaf = pkijs.Certificate.fromBER(signer.leaf.certificate.rawData);
  // Each fetch waits until both requests have asked: they overlap, whatever the order.
  const waiting: ((response: Response) => void)[] = [];
  const aia = new AiaIntermediates({
    fetch: () => new Promise<Response>((resolve) => waiting.push(resolve)),
  });
  const first = aia.chainFor(leaf);
  const second = aia.chainFor(leaf);
  const fetches = waiting.length;
  for (const answer of waiting) answer(new Response(Buffer.from(sim.authority.issuing.certificate.rawData)));
  const [a, b] = await Promise.all([first, second]);
  assert.equal(fetches, 1);
  assert.equal(a.length, 1);
  assert.ok(a[0] === b[0], 'the one certificate fetched');
});

test("the repository's failures are faults naming the URL quoted and cut: a forged URL does not make a fault of kilobytes", async () => {
  const long = `${repository}/${'x'.repeat(5_000)}.crt`;
  const signer = await issueAttestationSigner(sim.authority.issuing, ['eastus.metadata.azure.com'], [], long);
  const leaf = pkijs.Certificate.fromBER(signer.leaf.certificate.rawData);
  for (const fetch of [
    async () => {
      throw new TypeError('fetch failed');
    },
    async () => new Response('', { status: 503 }),
    // An answer cut off midway: a fault like no answer, not the document's.
    async () =>
      new Response(
        new ReadableStream({
          pull: (controller) => controller.error(new Error('connection reset')),
        }),
      ),
  ]) {
    await assert.rejects(new AiaIntermediates({ fetch }).chainFor(leaf), (err: Error) => {
      assert.equal(err.name, 'UnavailableError');
      assert.match(err.message, /"https:\/\/www\.microsoft\.com\/pkiops\/certs\/x+"… \(5043 characters\)/);
      assert.ok(err.message.length < 300, `${err.message.length} characters`);
      return true;
    });
  }
});
