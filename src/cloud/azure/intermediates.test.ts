import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { signAttestedContent } from '../../sim/azure/attestation.ts';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
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
