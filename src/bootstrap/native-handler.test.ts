import assert from 'node:assert/strict';
import { test } from 'node:test';
import { httpStatusOf, InvalidInputError, UnavailableError } from '../errors.ts';
import { CryptoPool } from '../pki/crypto-pool.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey } from '../pki/keys.ts';
import { nativeApiVersion, parseCertificatesRequest } from './native-handler.ts';

function input(kubelet: string) {
  const body = JSON.stringify({ apiVersion: nativeApiVersion, certificateSigningRequests: { kubelet } });
  return {
    body: Buffer.from(body),
    authorization: undefined,
    remoteAddress: '127.0.0.1',
    receivedAt: new Date(),
  };
}

const csr = buildCsrPem(generateKey('ecdsa-p256'), {
  subject: { commonName: 'system:node:node-a', organizations: ['system:nodes'] },
});

test('a crypto thread that stops makes a good request a 503 (retry), never a 400 or a certificate', async () => {
  const dying = new CryptoPool({
    threads: 1,
    workerUrl: new URL(`data:text/javascript,${encodeURIComponent('process.exit(1)')}`),
  });
  try {
    await assert.rejects(parseCertificatesRequest(input(csr), dying), (err) => {
      assert.ok(err instanceof UnavailableError, String(err));
      assert.equal(httpStatusOf(err), 503);
      return true;
    });
  } finally {
    await dying.close();
  }
});

test('with working threads the same request parses, and an altered one is a 400', async () => {
  const pool = new CryptoPool({ threads: 1 });
  try {
    const parsed = await parseCertificatesRequest(input(csr), pool);
    assert.equal(parsed.claimedNodeName, 'node-a');
    // Flip a byte inside the signature: the request no longer proves possession of its key.
    const der = Buffer.from(csr.replace(/-----[A-Z ]+-----|\s/g, ''), 'base64');
    der[der.length - 5] = (der[der.length - 5] as number) ^ 0xff;
    const altered = `-----BEGIN CERTIFICATE REQUEST-----\n${der.toString('base64')}\n-----END CERTIFICATE REQUEST-----\n`;
    await assert.rejects(parseCertificatesRequest(input(altered), pool), (err) => {
      assert.ok(err instanceof InvalidInputError);
      assert.match(err.message, /signature does not verify/);
      return true;
    });
  } finally {
    await pool.close();
  }
});
