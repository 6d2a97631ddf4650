import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { buildClusterInfo } from '../bootstrap/discovery.ts';
import { newBootstrapToken, storedTokenOf, tokenSecretOf } from '../bootstrap/tokens.ts';
import { KopsError } from '../errors.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import { generateKey } from '../pki/keys.ts';
import { pinOfCertificatePem } from '../pki/pin.ts';
import { issueCertificate, publicKeyRequest } from '../pki/profiles.ts';
import {
  type ClusterInfo,
  type ClusterInfoDocument,
  renderClusterInfoKubeconfig,
} from '../protocol/cluster-info.ts';
import {
  createCertificateAuthority,
  issueServingCertificate,
  type SimCertificateAuthority,
} from '../sim/tls.ts';
import { scratchFile } from '../testing/openssl.ts';
import { clusterInfoUrl, discoverCluster } from './discovery.ts';
import { startTlsProxy, type TlsProxy } from './tls-proxy.test-support.ts';

/** An answer other than 200. */
interface StatusAnswer {
  status: number;
  body: string;
  headers?: Record<string, string>;
}

/** A TLS endpoint with a certificate from `ca` that answers each request with the next document. */
async function endpoint(
  ca: SimCertificateAuthority,
  answers: () => ClusterInfoDocument | string | StatusAnswer,
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
    if (typeof answer === 'object' && 'status' in answer) {
      res.writeHead(answer.status, answer.headers ?? {});
      res.end(answer.body);
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(typeof answer === 'string' ? answer : JSON.stringify(answer));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, requests, server };
}

/** PEM certificates as one bundle (the simulator's PEM has no final newline, which OpenSSL needs between blocks). */
function pemBundle(...pems: string[]): string {
  return pems.map((pem) => (pem.endsWith('\n') ? pem : `${pem}\n`)).join('');
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
  const start = async (
    ca: SimCertificateAuthority,
    answers: () => ClusterInfoDocument | string | StatusAnswer,
  ) => {
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
      caBundlePem: pemBundle(clusterCa.certificate),
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
    assert.equal(found.caBundlePem, pemBundle(clusterCa.certificate));
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

  describe('through a TLS man in the middle that holds a certificate from its own CA', () => {
    let attackerCa: SimCertificateAuthority;
    let attackerCertificate: { cert: string; key: string };
    const proxies: TlsProxy[] = [];
    const evilServer = 'https://127.0.0.1:6443';
    before(async () => {
      attackerCa = await createCertificateAuthority('attacker-ca');
      const serving = await issueServingCertificate(attackerCa);
      attackerCertificate = { cert: serving.certificate, key: serving.privateKey };
    });
    after(async () => {
      for (const proxy of proxies) await proxy.close();
    });
    const intercept = async (
      rewrite: (info: ClusterInfo) => ClusterInfo,
      connection?: (index: number) => 'relay' | 'terminate',
    ) => {
      const genuine = await start(clusterCa, () => document);
      const proxy = await startTlsProxy({
        upstream: genuine.url,
        certificate: attackerCertificate,
        rewrite,
        ...(connection ? { connection } : {}),
      });
      proxies.push(proxy);
      return { proxy, genuine };
    };

    test('an extra CA appended to the genuine bundle is refused, naming its subject and pin', async () => {
      const { proxy } = await intercept((info) => ({
        ...info,
        caBundlePem: pemBundle(info.caBundlePem, attackerCa.certificate),
      }));
      await assert.rejects(discoverCluster({ url: proxy.url, caPins: [pin] }), (err: unknown) => {
        failsWith('forbidden', 'ca-not-pinned')(err);
        const message = (err as Error).message;
        assert.match(message, /CN=attacker-ca/);
        assert.ok(message.includes(pinOfCertificatePem(attackerCa.certificate)), message);
        return true;
      });
      assert.equal(proxy.requests.length, 1, 'no verified fetch through the attacker');
    });

    test("the attacker's API server URL and CA: refused before anything is trusted", async () => {
      const { proxy } = await intercept(() => ({
        servers: [evilServer],
        caBundlePem: pemBundle(clusterCa.certificate, attackerCa.certificate),
      }));
      await assert.rejects(
        discoverCluster({ url: proxy.url, caPins: [pin] }),
        failsWith('forbidden', 'ca-not-pinned'),
      );
    });

    test('the CA replaced by the attacker’s fails the pin', async () => {
      const { proxy } = await intercept((info) => ({ ...info, caBundlePem: attackerCa.certificate }));
      await assert.rejects(
        discoverCluster({ url: proxy.url, caPins: [pin] }),
        failsWith('forbidden', 'ca-pin-mismatch'),
      );
    });

    test('the genuine bundle with a foreign server URL fails the verified fetch', async () => {
      const { proxy } = await intercept((info) => ({ ...info, servers: [evilServer] }));
      await assert.rejects(
        discoverCluster({ url: proxy.url, caPins: [pin] }),
        failsWith('forbidden', 'tls-verification'),
      );
      assert.deepEqual(proxy.connections, ['terminate', 'terminate']);
    });

    test('first fetch through the attacker, second relayed to the genuine server: the kubeconfigs differ', async () => {
      const { proxy, genuine } = await intercept(
        (info) => ({ ...info, servers: [evilServer] }),
        (index) => (index === 0 ? 'terminate' : 'relay'),
      );
      await assert.rejects(
        discoverCluster({ url: proxy.url, caPins: [pin] }),
        failsWith('forbidden', 'kubeconfig-mismatch'),
      );
      assert.deepEqual(proxy.connections, ['terminate', 'relay']);
      assert.equal(genuine.requests.length, 2, 'the attacker fetched once, the node once (relayed)');
    });

    test('with a token, any rewrite breaks the signature', async () => {
      const { proxy } = await intercept((info) => ({
        ...info,
        caBundlePem: pemBundle(info.caBundlePem, attackerCa.certificate),
      }));
      await assert.rejects(
        discoverCluster({ url: proxy.url, caPins: [pin], token: presented }),
        failsWith('unauthenticated', 'jws-invalid'),
      );
    });
  });

  test('a CA the cluster itself publishes but the node did not pin is refused, even with a valid token', async () => {
    const twoCas = renderClusterInfoKubeconfig({
      servers: ['https://api.example.com'],
      caBundlePem: pemBundle(clusterCa.certificate, otherCa.certificate),
    });
    const signed = buildClusterInfo(twoCas, [storedTokenOf(tokenSecretOf(token))!], new Date());
    const e = await start(clusterCa, () => signed);
    await assert.rejects(
      discoverCluster({ url: e.url, caPins: [pin], token: presented }),
      (err: unknown) =>
        failsWith('forbidden', 'ca-not-pinned')(err) &&
        (err as Error).message.includes(`CN=someone-else (${pinOfCertificatePem(otherCa.certificate)})`),
    );
    // Both pins (a CA rotation): trusted, and the bundle handed on holds exactly the pinned CAs.
    const found = await discoverCluster({
      url: e.url,
      caPins: [pin, pinOfCertificatePem(otherCa.certificate)],
      token: presented,
    });
    assert.equal(found.caBundlePem, pemBundle(clusterCa.certificate, otherCa.certificate));
  });

  test('a bundle block OpenSSL would read but the pin check would not is refused, never passed on', async () => {
    // "TRUSTED CERTIFICATE" is OpenSSL's own PEM type, which Node's `ca` option also loads.
    const smuggled = pemBundle(
      clusterCa.certificate,
      otherCa.certificate.replace(/CERTIFICATE/g, 'TRUSTED CERTIFICATE'),
    );
    const caData = Buffer.from(smuggled).toString('base64');
    const kubeconfigText = kubeconfig.replace(
      /certificate-authority-data: \S+/g,
      `certificate-authority-data: ${caData}`,
    );
    const e = await start(clusterCa, () => buildClusterInfo(kubeconfigText, [], new Date()));
    await assert.rejects(discoverCluster({ url: e.url, caPins: [pin] }), (err: unknown) => {
      failsWith('invalid')(err);
      assert.match((err as Error).message, /TRUSTED CERTIFICATE, expected CERTIFICATE/);
      return true;
    });
    assert.equal(e.requests.length, 1, 'no verified fetch with the smuggled CA');
  });

  test('--ca-file: a CA in the document that the file does not hold is refused', async () => {
    const twoCas = buildClusterInfo(
      renderClusterInfoKubeconfig({
        servers: ['https://api.example.com'],
        caBundlePem: pemBundle(clusterCa.certificate, otherCa.certificate),
      }),
      [],
      new Date(),
    );
    const e = await start(clusterCa, () => twoCas);
    const caFile = scratchFile('cluster-ca-only.crt', clusterCa.certificate);
    await assert.rejects(
      discoverCluster({ url: e.url, caFile }),
      (err: unknown) =>
        failsWith('forbidden', 'ca-not-pinned')(err) && /CN=someone-else/.test((err as Error).message),
    );
  });

  test('permanent answers are final, with the URL, the status and the reason', async () => {
    const cases = [
      { status: 400, kind: 'invalid' },
      { status: 401, kind: 'unauthenticated' },
      { status: 403, kind: 'forbidden' },
      { status: 404, kind: 'not-found' },
      { status: 405, kind: 'invalid' },
    ];
    for (const { status, kind } of cases) {
      const e = await start(clusterCa, () => ({
        status,
        body: JSON.stringify({ kind: 'Status', message: `refused with ${status}` }),
        headers: { 'content-type': 'application/json' },
      }));
      await assert.rejects(discoverCluster({ url: e.url, caPins: [pin] }), (err: unknown) => {
        failsWith(kind)(err);
        assert.match(
          (err as Error).message,
          new RegExp(`^GET ${e.url}/cluster-info answered ${status} .*refused with ${status}`),
        );
        return true;
      });
    }
  });

  test('503 and 429 are retryable and carry their Retry-After', async () => {
    const busy = await start(clusterCa, () => ({
      status: 503,
      body: '{"error":{"reason":"not-published","message":"cluster-info is not published yet"}}',
      headers: { 'retry-after': '7' },
    }));
    await assert.rejects(discoverCluster({ url: busy.url, caPins: [pin] }), (err: unknown) => {
      failsWith('unavailable')(err);
      assert.equal((err as KopsError).details?.['retryAfterSeconds'], 7);
      assert.match((err as Error).message, /answered 503 .*not published yet \(not-published\)/);
      return true;
    });
    const limited = await start(clusterCa, () => ({
      status: 429,
      body: '',
      headers: { 'retry-after': '2' },
    }));
    await assert.rejects(discoverCluster({ url: limited.url, caPins: [pin] }), (err: unknown) => {
      failsWith('rate-limited')(err);
      assert.equal((err as KopsError).details?.['retryAfterSeconds'], 2);
      return true;
    });
  });

  test('the endpoint URL gets cluster-info under its path, unless it names the document', () => {
    assert.equal(String(clusterInfoUrl('https://h:3988')), 'https://h:3988/cluster-info');
    assert.equal(String(clusterInfoUrl('https://lb:3988/kops')), 'https://lb:3988/kops/cluster-info');
    assert.equal(String(clusterInfoUrl('https://lb:3988/kops/')), 'https://lb:3988/kops/cluster-info');
    assert.equal(String(clusterInfoUrl('https://h:3988/cluster-info')), 'https://h:3988/cluster-info');
    assert.equal(
      String(clusterInfoUrl('https://h/api/v1/namespaces/kube-public/configmaps/cluster-info')),
      'https://h/api/v1/namespaces/kube-public/configmaps/cluster-info',
    );
  });

  test('an endpoint with a path prefix (a load balancer path): both fetches read cluster-info under it', async () => {
    const e = await start(clusterCa, () => document);
    const found = await discoverCluster({ url: `${e.url}/kops`, caPins: [pin] });
    assert.equal(found.server, 'https://api.example.com');
    assert.deepEqual(e.requests, ['/kops/cluster-info', '/kops/cluster-info']);
  });
});

describe('discovery on a machine whose clock is wrong', () => {
  test('a certificate out of its validity by this machine’s clock is a fault naming the clock (retried until the clock is set), not an impostor', async () => {
    // The pinned CA's own clock made it a month ago; this machine's clock is an hour behind the
    // server's, or a day and more ahead of it.
    const ca = createCa({ now: new Date(Date.now() - 30 * 86_400_000) });
    const caPem = bundlePem(ca);
    const kubeconfig = renderClusterInfoKubeconfig({
      servers: ['https://api.example.com'],
      caBundlePem: caPem,
    });
    const document = buildClusterInfo(kubeconfig, [], new Date());
    // An impostor's certificate (another CA) that has expired too fails with CERT_HAS_EXPIRED as well:
    // OpenSSL reports the last problem it found. It stays an impostor.
    const impostor = createCa({ now: new Date(Date.now() - 30 * 86_400_000) });
    const cases: [string, Date, number | undefined, RegExp, typeof ca][] = [
      ['behind', new Date(Date.now() + 3_600_000), undefined, /is not valid yet by this machine's clock/, ca],
      ['ahead', new Date(Date.now() - 3 * 86_400_000), 86_400_000, /has expired by this machine's clock/, ca],
      ['impostor', new Date(Date.now() - 3 * 86_400_000), 86_400_000, /someone else/, impostor],
    ];
    for (const [what, issuedAt, lifetimeMs, message, issuer] of cases) {
      const key = generateKey();
      const serving = issueCertificate(
        issuer,
        'kops-controller',
        publicKeyRequest(key),
        { name: 'kops-controller.internal', ipAddresses: ['127.0.0.1'] },
        { now: issuedAt, ...(lifetimeMs ? { lifetimeMs } : {}) },
      );
      const server = createServer(
        { key: key.export({ format: 'pem', type: 'pkcs8' }), cert: serving.pem },
        (_req, res) => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify(document));
        },
      );
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      try {
        const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
        await assert.rejects(
          discoverCluster({ url, caPins: [pinOfCertificatePem(caPem)] }),
          (err: unknown) => {
            if (issuer === impostor) {
              failsWith('forbidden', 'tls-verification')(err);
              assert.match((err as Error).message, message, what);
              return true;
            }
            failsWith('unavailable')(err);
            assert.match((err as Error).message, message, what);
            assert.match(
              (err as Error).message,
              /\(now \d{4}-[\d-]+T[\d:.]+Z\): check this machine's clock/,
              what,
            );
            assert.doesNotMatch((err as Error).message, /someone else/, what);
            return true;
          },
        );
      } finally {
        server.closeAllConnections();
        server.close();
      }
    }
  });
});
