import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import {
  buildClusterInfo,
  type ClusterInfoDocument,
  renderClusterInfoKubeconfig,
} from '../bootstrap/discovery.ts';
import { newBootstrapToken, storedTokenOf, tokenSecretOf } from '../bootstrap/tokens.ts';
import { KopsError } from '../errors.ts';
import { pinOfCertificatePem } from '../pki/pin.ts';
import {
  createCertificateAuthority,
  issueServingCertificate,
  type SimCertificateAuthority,
} from '../sim/tls.ts';
import { scratchFile } from '../testing/openssl.ts';
import { clusterInfoUrl, discoverCluster } from './discovery.ts';

/** A TLS endpoint with a certificate from `ca` that answers each request with the next document. */
async function endpoint(
  ca: SimCertificateAuthority,
  answers: () => ClusterInfoDocument | string,
): Promise<{
  url: string;
  requests: string[];
  server: Server;
}> {
  const serving = await issueServingCertificate(ca);
  const requests: string[] = [];
  const server = createServer({ key: serving.privateKey, cert: serving.certificate }, (req, res) => {
    requests.push(req.url ?? '');
    const answer = answers();
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(typeof answer === 'string' ? answer : JSON.stringify(answer));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, requests, server };
}

/** Expects a typed error of `kind` whose details name `reason` (when given). */
function failsWith(kind: string, reason?: string) {
  return (err: unknown) => {
    assert.ok(err instanceof KopsError, String(err));
    assert.equal(err.kind, kind, err.message);
    if (reason) assert.equal(err.details?.['reason'], reason);
    return true;
  };
}

describe('discoverCluster', () => {
  let clusterCa: SimCertificateAuthority;
  let otherCa: SimCertificateAuthority;
  let pin = '';
  let kubeconfig = '';
  const token = newBootstrapToken();
  const presented = `${token.id}.${token.secret}`;
  let document: ClusterInfoDocument;
  const servers: Server[] = [];
  const start = async (ca: SimCertificateAuthority, answers: () => ClusterInfoDocument | string) => {
    const e = await endpoint(ca, answers);
    servers.push(e.server);
    return e;
  };

  before(async () => {
    clusterCa = await createCertificateAuthority('cluster-ca');
    otherCa = await createCertificateAuthority('someone-else');
    pin = pinOfCertificatePem(clusterCa.certificate);
    kubeconfig = renderClusterInfoKubeconfig({
      servers: ['https://api.example.com', 'https://10.0.0.1:6443'],
      caBundlePem: clusterCa.certificate,
    });
    document = buildClusterInfo(kubeconfig, [storedTokenOf(tokenSecretOf(token))!], new Date());
  });
  after(() => {
    for (const server of servers) server.close();
  });

  test('good pin and token: two fetches, servers and CA returned', async () => {
    const e = await start(clusterCa, () => document);
    const found = await discoverCluster({
      url: e.url,
      caPins: [pin.toUpperCase().replace('SHA256', 'sha256')],
      token: presented,
    });
    assert.deepEqual(found, {
      server: 'https://api.example.com',
      servers: ['https://api.example.com', 'https://10.0.0.1:6443'],
      caBundlePem: clusterCa.certificate,
      verifiedTokenId: token.id,
    });
    assert.deepEqual(e.requests, ['/cluster-info', '/cluster-info']);
  });

  test('a pin alone, without a token, is enough', async () => {
    const e = await start(clusterCa, () => document);
    assert.equal(
      (await discoverCluster({ url: `${e.url}/cluster-info`, caPins: [pin] })).server,
      'https://api.example.com',
    );
  });

  test('--ca-file: one fetch, verified from the start', async () => {
    const e = await start(clusterCa, () => document);
    const caFile = scratchFile('cluster-ca.crt', clusterCa.certificate);
    const found = await discoverCluster({ url: e.url, caFile, token: presented });
    assert.equal(found.caBundlePem, clusterCa.certificate);
    assert.equal(e.requests.length, 1);
    const impostor = await start(otherCa, () => document);
    await assert.rejects(
      discoverCluster({ url: impostor.url, caFile }),
      failsWith('forbidden', 'tls-verification'),
    );
  });

  test('wrong CA pin', async () => {
    const e = await start(clusterCa, () => document);
    await assert.rejects(
      discoverCluster({ url: e.url, caPins: [pinOfCertificatePem(otherCa.certificate)], token: presented }),
      (err: unknown) =>
        failsWith('forbidden', 'ca-pin-mismatch')(err) && /matches --ca-pin/.test(String(err)),
    );
    assert.equal(e.requests.length, 1, 'no second fetch after a pin mismatch');
  });

  test('forged JWS', async () => {
    const forged = buildClusterInfo(
      kubeconfig.replace('https://api.example.com', 'https://evil.example.com'),
      [{ ...storedTokenOf(tokenSecretOf(token))!, secret: 'guessedsecret000' }],
      new Date(),
    );
    const e = await start(clusterCa, () => forged);
    await assert.rejects(
      discoverCluster({ url: e.url, caPins: [pin], token: presented }),
      failsWith('unauthenticated', 'jws-invalid'),
    );
  });

  test('no signature for this token id is retryable', async () => {
    const unsigned = buildClusterInfo(kubeconfig, [], new Date());
    const e = await start(clusterCa, () => unsigned);
    await assert.rejects(
      discoverCluster({ url: e.url, caPins: [pin], token: presented }),
      failsWith('unavailable', 'jws-missing'),
    );
  });

  test('man in the middle: a different kubeconfig on the unverified fetch than on the verified one', async () => {
    // The attacker keeps the genuine CA (so the pin matches) but points the node at its own API server.
    const tampered = buildClusterInfo(
      kubeconfig.replace('https://api.example.com', 'https://evil.example.com'),
      [],
      new Date(),
    );
    let calls = 0;
    const e = await start(clusterCa, () => (calls++ === 0 ? tampered : document));
    await assert.rejects(
      discoverCluster({ url: e.url, caPins: [pin] }),
      failsWith('forbidden', 'kubeconfig-mismatch'),
    );
  });

  test('an impostor endpoint that copies the genuine document fails the verified fetch', async () => {
    const e = await start(otherCa, () => document);
    await assert.rejects(
      discoverCluster({ url: e.url, caPins: [pin] }),
      failsWith('forbidden', 'tls-verification'),
    );
  });

  test('bad input and bad answers are clear errors', async () => {
    await assert.rejects(discoverCluster({ url: 'https://127.0.0.1:1' }), /--ca-pin sha256/);
    await assert.rejects(
      discoverCluster({ url: 'https://127.0.0.1:1', caPins: ['sha256:abc'] }),
      /invalid CA pin/,
    );
    await assert.rejects(discoverCluster({ url: 'http://127.0.0.1:1', caPins: [pin] }), /must be https/);
    const e = await start(clusterCa, () => 'not json');
    await assert.rejects(discoverCluster({ url: e.url, caPins: [pin] }), failsWith('invalid'));
    await assert.rejects(
      discoverCluster({ url: e.url, caPins: [pin], token: 'not-a-token' }),
      failsWith('invalid'),
    );
    const big = await start(clusterCa, () => 'x'.repeat(2 * 1024 * 1024));
    await assert.rejects(discoverCluster({ url: big.url, caPins: [pin] }), failsWith('too-large'));
  });

  test('the endpoint URL gets /cluster-info unless it names a path', () => {
    assert.equal(String(clusterInfoUrl('https://h:3988')), 'https://h:3988/cluster-info');
    assert.equal(
      String(clusterInfoUrl('https://h/api/v1/namespaces/kube-public/configmaps/cluster-info')),
      'https://h/api/v1/namespaces/kube-public/configmaps/cluster-info',
    );
  });
});
