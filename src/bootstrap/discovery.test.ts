import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api, type V1Secret } from '@kubernetes/client-node';
import { discoverCluster } from '../agent/discovery.ts';
import { UnavailableError } from '../errors.ts';
import { makeClients } from '../kube/client.ts';
import { createCa } from '../pki/ca.ts';
import { pinOfCertificatePem } from '../pki/pin.ts';
import {
  detachedJws,
  parseClusterInfoDocument,
  renderClusterInfoKubeconfig,
} from '../protocol/cluster-info.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { createCertificateAuthority, issueServingCertificate } from '../sim/tls.ts';
import { FakeClock } from '../testing/fake-clock.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { silentApiServer } from '../testing/silent-server.ts';
import {
  buildClusterInfo,
  ClusterInfoPublisher,
  clusterInfoHandler,
  configMapClusterInfoSource,
} from './discovery.ts';
import {
  apiTokenSource,
  newBootstrapToken,
  storedTokenOf,
  tokenSecretOf,
  WatchedTokenSecrets,
} from './tokens.ts';

const ca = createCa({ commonName: 'kubernetes-ca' });
const caPem = ca.certificates[0]?.pem as string;

describe('signing the cluster-info document', () => {
  test('signatures only for tokens that may sign now', () => {
    const now = new Date('2026-01-01T00:00:00Z');
    const token = (options: Parameters<typeof newBootstrapToken>[0]) =>
      storedTokenOf(tokenSecretOf(newBootstrapToken({ now, ...options })));
    const signer = token({ usages: ['signing'] });
    const authOnly = token({ usages: ['authentication'] });
    const expired = token({ now: new Date('2025-01-01T00:00:00Z') });
    const kubeconfig = renderClusterInfoKubeconfig({
      servers: ['https://api.example.com'],
      caBundlePem: caPem,
    });
    const doc = buildClusterInfo(
      kubeconfig,
      [signer, authOnly, expired].map((t) => t!),
      now,
      { other: 'kept', 'jws-kubeconfig-stale00': 'dropped' },
    );
    assert.deepEqual(
      Object.keys(doc.data).sort(),
      ['jws-kubeconfig-' + signer?.id, 'kubeconfig', 'other'].sort(),
    );
    assert.equal(
      doc.data[`jws-kubeconfig-${signer?.id}`],
      detachedJws(kubeconfig, signer!.id, signer!.secret),
    );
  });
});

describe('GET /cluster-info handler', () => {
  let document: ReturnType<typeof buildClusterInfo> | undefined;
  let failing = false;
  const server = createServer(
    clusterInfoHandler(() => {
      if (failing) throw new Error('boom');
      return document;
    }),
  );
  let url = '';
  before(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/cluster-info`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  test('503 before a document exists or when the source fails, then the ConfigMap JSON', async () => {
    const early = await fetch(url);
    assert.equal(early.status, 503);
    assert.equal(((await early.json()) as { error: { reason: string } }).error.reason, 'not-published');
    document = buildClusterInfo('kubeconfig: x', [], new Date());
    const response = await fetch(url);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('content-type'), 'application/json');
    assert.deepEqual(parseClusterInfoDocument(await response.text()), document);
    failing = true;
    const failed = await fetch(url);
    assert.equal(failed.status, 503);
    assert.doesNotMatch(await failed.text(), /boom/);
    failing = false;
  });

  test('only GET and HEAD', async () => {
    assert.equal((await fetch(url, { method: 'HEAD' })).status, 200);
    const post = await fetch(url, { method: 'POST', body: 'x' });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get('allow'), 'GET, HEAD');
    assert.equal(((await post.json()) as { error: { reason: string } }).error.reason, 'method-not-allowed');
  });
});

describe('GET /cluster-info while the API server is down', () => {
  test('one warning when reads start failing, then one every ten minutes with the count, and one line when they work again: not one per request', async () => {
    const clock = new FakeClock();
    const { logger, lines } = capturedLogger();
    let down = true;
    const document = buildClusterInfo('kubeconfig: x', [], new Date());
    const server = createServer(
      clusterInfoHandler(
        () => {
          if (down) {
            throw new UnavailableError(
              'read configmap kube-public/cluster-info: HTTP 503: the server is currently unable to handle the request',
            );
          }
          return document;
        },
        logger,
        clock,
      ),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/cluster-info`;
    const get = async () => {
      const response = await fetch(url);
      await response.arrayBuffer();
      return response.status;
    };
    const written = () =>
      lines
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .map((r) => [r['level'], r['msg'], r['failures'], r['repeated']]);
    try {
      for (let i = 0; i < 30; i++) assert.equal(await get(), 503);
      assert.deepEqual(written(), [['warn', 'cannot read cluster-info', 1, undefined]]);
      await clock.advance(600_000);
      assert.equal(await get(), 503);
      down = false;
      assert.equal(await get(), 200);
      assert.equal(await get(), 200);
      assert.deepEqual(written(), [
        ['warn', 'cannot read cluster-info', 1, undefined],
        ['warn', 'cannot read cluster-info', 31, 29],
        ['info', 'cluster-info read again', 31, undefined],
      ]);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

/** Polls `check` until it holds; fails after `withinMs`, a bound generous enough for a loaded machine. */
async function waitFor(what: string, check: () => Promise<boolean>, withinMs = 15_000): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`not within ${withinMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('publisher against the simulated apiserver', () => {
  let sim: SimApiServer;
  let core: CoreV1Api;
  before(async () => {
    sim = await startApiServer();
    core = makeClients(sim.kubeConfig()).core;
  });
  after(() => sim.close());

  /** The ConfigMap's data; empty while there is none. */
  const readData = async (): Promise<Record<string, string>> =>
    core.readNamespacedConfigMap({ name: 'cluster-info', namespace: 'kube-public' }).then(
      (configMap) => configMap.data ?? {},
      () => ({}),
    );

  test('creates cluster-info, signs new tokens, drops deleted ones, and writes only on change', async () => {
    const secrets: V1Secret[] = [];
    const source = { get: async () => undefined, list: async () => secrets };
    const kubeconfig = renderClusterInfoKubeconfig({
      servers: ['https://api.example.com'],
      caBundlePem: caPem,
    });
    const publisher = new ClusterInfoPublisher({ core, source, kubeconfig: () => kubeconfig });

    assert.equal((await publisher.sync()).written, true);
    assert.deepEqual(await readData(), { kubeconfig });
    assert.equal((await publisher.sync()).written, false, 'unchanged: no write');

    const token = newBootstrapToken();
    secrets.push(tokenSecretOf(token));
    assert.equal((await publisher.sync()).written, true);
    const data = await readData();
    assert.equal(data[`jws-kubeconfig-${token.id}`], detachedJws(kubeconfig, token.id, token.secret));

    secrets.length = 0;
    assert.equal((await publisher.sync()).written, true);
    assert.deepEqual(await readData(), { kubeconfig });
  });

  test('the ConfigMap source serves what was published, reading once per max age', async () => {
    await core
      .deleteNamespacedConfigMap({ name: 'cluster-info', namespace: 'kube-public' })
      .catch(() => undefined);
    const clock = new FakeClock();
    const source = configMapClusterInfoSource(core, { clock, maxAgeMs: 5000 });
    assert.equal(await source(), undefined, 'nothing published yet');
    await clock.advance(5000);
    const kubeconfig = renderClusterInfoKubeconfig({
      servers: ['https://api3.example.com'],
      caBundlePem: caPem,
    });
    await core.createNamespacedConfigMap({
      namespace: 'kube-public',
      body: { metadata: { name: 'cluster-info' }, data: { kubeconfig } },
    });
    const [a, b] = await Promise.all([source(), source()]);
    assert.deepEqual(a, buildClusterInfo(kubeconfig, [], new Date()));
    assert.equal(a, b, 'concurrent requests share one read');
    await core.deleteNamespacedConfigMap({ name: 'cluster-info', namespace: 'kube-public' });
    assert.deepEqual(await source(), a, 'cached within the max age');
    await clock.advance(5000);
    assert.equal(await source(), undefined, 're-read after the max age');
  });

  test('end to end: published by the leader, served over TLS from the ConfigMap, discovered by a node', async () => {
    const clusterCa = await createCertificateAuthority('e2e-cluster-ca');
    const serving = await issueServingCertificate(clusterCa);
    const token = newBootstrapToken();
    await core.createNamespacedSecret({ namespace: 'kube-system', body: tokenSecretOf(token) });
    const kubeconfig = renderClusterInfoKubeconfig({
      servers: ['https://api.e2e.example.com'],
      caBundlePem: clusterCa.certificate,
    });
    const secrets = await core.listNamespacedSecret({ namespace: 'kube-system' });
    const source = { get: async () => undefined, list: async () => secrets.items };
    await new ClusterInfoPublisher({ core, source, kubeconfig: () => kubeconfig }).sync();
    const server = createHttpsServer(
      { key: serving.privateKey, cert: serving.certificate },
      clusterInfoHandler(configMapClusterInfoSource(core)),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const found = await discoverCluster({
        url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
        caPins: [pinOfCertificatePem(clusterCa.certificate)],
        token: `${token.id}.${token.secret}`,
      });
      // The node keeps the pinned CA as canonical PEM, so compare the certificate, not its line ending.
      assert.deepEqual(
        { ...found, caBundlePem: found.caBundlePem.trim() },
        {
          server: 'https://api.e2e.example.com',
          servers: ['https://api.e2e.example.com'],
          caBundlePem: clusterCa.certificate.trim(),
          verifiedTokenId: token.id,
        },
      );
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await core.deleteNamespacedSecret({ name: `bootstrap-token-${token.id}`, namespace: 'kube-system' });
    }
  });

  test('a token signs cluster-info within seconds of its creation, and a deleted one stops signing', async () => {
    const source = new WatchedTokenSecrets({ kubeConfig: sim.kubeConfig(), api: apiTokenSource(core) });
    source.start();
    const kubeconfig = renderClusterInfoKubeconfig({
      servers: ['https://api4.example.com'],
      caBundlePem: caPem,
    });
    const stop = new AbortController();
    const run = new ClusterInfoPublisher({ core, source, kubeconfig: () => kubeconfig }).start(stop.signal);
    const signed = async (token: { id: string; secret: string }) =>
      (await readData())[`jws-kubeconfig-${token.id}`] === detachedJws(kubeconfig, token.id, token.secret);
    try {
      await waitFor('cluster-info is published', async () => (await readData())['kubeconfig'] === kubeconfig);
      const token = newBootstrapToken();
      await core.createNamespacedSecret({ namespace: 'kube-system', body: tokenSecretOf(token) });
      // `token create`, then at once `join --token`: discovery needs the signature now, not in a minute.
      await waitFor('the new token signs cluster-info', () => signed(token), 10_000);
      await core.deleteNamespacedSecret({ name: `bootstrap-token-${token.id}`, namespace: 'kube-system' });
      await waitFor('the deleted token no longer signs', async () => !(await signed(token)), 10_000);
    } finally {
      stop.abort();
      await run;
      await source.stop();
    }
  });

  test('a pass of the signer lists the token Secrets from its watch, from the API server only while the watch is not current', async () => {
    const api = apiTokenSource(core);
    let apiLists = 0;
    const counted = {
      get: api.get,
      list: () => {
        apiLists++;
        return api.list();
      },
    };
    const source = new WatchedTokenSecrets({ kubeConfig: sim.kubeConfig(), api: counted });
    const kubeconfig = renderClusterInfoKubeconfig({
      servers: ['https://api5.example.com'],
      caBundlePem: caPem,
    });
    const publisher = new ClusterInfoPublisher({ core, source, kubeconfig: () => kubeconfig });
    await publisher.sync();
    assert.equal(apiLists, 1, 'no watch yet: read from the API server');
    source.start();
    try {
      const token = newBootstrapToken();
      await core.createNamespacedSecret({ namespace: 'kube-system', body: tokenSecretOf(token) });
      await waitFor('the watch is current', async () => source.isCurrent());
      for (let i = 0; i < 3; i++) await publisher.sync();
      assert.equal(apiLists, 1, 'every later pass read the watch');
      assert.equal(
        (await readData())[`jws-kubeconfig-${token.id}`],
        detachedJws(kubeconfig, token.id, token.secret),
      );
      await core.deleteNamespacedSecret({ name: `bootstrap-token-${token.id}`, namespace: 'kube-system' });
    } finally {
      await source.stop();
    }
  });
});

/** A GET of `url` within `ms`: its status and Retry-After, or undefined when it is still unanswered. */
async function getWithin(
  url: string,
  ms: number,
): Promise<{ status: number; retryAfter: string | null } | undefined> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(ms) });
    await response.arrayBuffer();
    return { status: response.status, retryAfter: response.headers.get('retry-after') };
  } catch (err) {
    if ((err as Error).name === 'TimeoutError') return undefined;
    throw err;
  }
}

describe('GET /cluster-info from an API server that accepts the connection and never answers', () => {
  test('each request is answered 503 with Retry-After at the read deadline, and the next request reads again', async () => {
    const silent = await silentApiServer();
    const core = silent.kubeConfig.makeApiClient(CoreV1Api);
    const server = createServer(clusterInfoHandler(configMapClusterInfoSource(core, { timeoutMs: 200 })));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/cluster-info`;
    try {
      // Two at once share the one read, and both get the answer of its deadline.
      const first = await Promise.all([getWithin(url, 5_000), getWithin(url, 5_000)]);
      for (const answer of first) {
        assert.ok(answer, 'GET /cluster-info was still unanswered 5 s after its 200 ms read deadline');
        assert.equal(answer.status, 503);
        assert.match(answer.retryAfter ?? '', /^[1-9][0-9]*$/);
      }
      assert.equal(silent.accepted(), 1, 'concurrent requests share one read');
      // The failed read is not kept: the next request is a new read, not a wait on the old one.
      const second = await getWithin(url, 5_000);
      assert.equal(second?.status, 503, 'the next GET waited on the wedged read');
      assert.equal(silent.accepted(), 2);
      // And each abandoned read closed its connection.
      const deadline = Date.now() + 2_000;
      while (silent.open() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.equal(silent.open(), 0, 'an abandoned read still holds its connection');
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      silent.close();
    }
  });
});
