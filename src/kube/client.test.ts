import assert from 'node:assert/strict';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { ApiException } from '@kubernetes/client-node';
import { parse, stringify } from 'yaml';
import {
  ConfigError,
  ConflictError,
  ForbiddenError,
  GoneError,
  InvalidInputError,
  NotFoundError,
  RateLimitedError,
  TooLargeError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { fromApiException, unlessNotFound } from './api-errors.ts';
import { loadKubeConfig, makeClients } from './client.ts';

function kubeconfigYaml(contexts: string[], current: string): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: contexts.map((c) => ({ name: c, cluster: { server: `https://${c}.example.com:6443` } })),
    users: [{ name: 'admin', user: { token: 'not-a-real-token' } }],
    contexts: contexts.map((c) => ({ name: c, context: { cluster: c, user: 'admin' } })),
    'current-context': current,
  });
}

async function scratch(): Promise<{ dir: string; empty: string; noSa: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'kube-client-'));
  const empty = join(dir, 'home');
  await mkdir(empty);
  return { dir, empty, noSa: join(dir, 'no-service-account') };
}

const configErrorMatching = (pattern: RegExp) => (err: unknown) =>
  err instanceof ConfigError && pattern.test(err.message);

describe('loadKubeConfig', () => {
  test('nothing to load is a ConfigError, never a silent localhost:8080', async () => {
    const { empty, noSa } = await scratch();
    assert.throws(
      () => loadKubeConfig({ env: {}, homeDir: empty, serviceAccountDir: noSa }),
      configErrorMatching(/no Kubernetes configuration found.*pass --kubeconfig FILE/),
    );
  });

  test('an explicit file wins; a missing one is named', async () => {
    const { dir, empty, noSa } = await scratch();
    const file = join(dir, 'kc.yaml');
    await writeFile(file, kubeconfigYaml(['a', 'b'], 'a'));
    const { kubeConfig, source } = loadKubeConfig({
      kubeconfig: file,
      env: {},
      homeDir: empty,
      serviceAccountDir: noSa,
    });
    assert.equal(source, file);
    assert.equal(kubeConfig.getCurrentCluster()?.server, 'https://a.example.com:6443');
    assert.throws(
      () => loadKubeConfig({ kubeconfig: join(dir, 'nope'), env: {} }),
      configErrorMatching(/kubeconfig .*nope does not exist/),
    );
  });

  test('$KUBECONFIG lists are merged, then ~/.kube/config is used', async () => {
    const { dir, empty, noSa } = await scratch();
    const one = join(dir, 'one.yaml');
    const two = join(dir, 'two.yaml');
    await writeFile(one, kubeconfigYaml(['a'], 'a'));
    await writeFile(two, kubeconfigYaml(['b'], 'b'));
    assert.throws(
      () =>
        loadKubeConfig({
          env: { KUBECONFIG: join(dir, 'missing.yaml') },
          homeDir: empty,
          serviceAccountDir: noSa,
        }),
      configErrorMatching(/none of the files in \$KUBECONFIG exists/),
    );
    const merged = loadKubeConfig({
      env: { KUBECONFIG: `${one}:${join(dir, 'missing.yaml')}:${two}` },
      homeDir: empty,
      serviceAccountDir: noSa,
    });
    assert.deepEqual(
      merged.kubeConfig.getContexts().map((c) => c.name),
      ['a', 'b'],
    );
    assert.equal(merged.kubeConfig.getCurrentContext(), 'a');

    await mkdir(join(empty, '.kube'));
    await writeFile(join(empty, '.kube', 'config'), kubeconfigYaml(['home'], 'home'));
    const home = loadKubeConfig({ env: {}, homeDir: empty, serviceAccountDir: noSa });
    assert.equal(home.kubeConfig.getCurrentContext(), 'home');
  });

  test('--context selects a context; an unknown one lists the contexts', async () => {
    const { dir } = await scratch();
    const file = join(dir, 'kc.yaml');
    await writeFile(file, kubeconfigYaml(['prod', 'staging'], 'prod'));
    const { kubeConfig } = loadKubeConfig({ kubeconfig: file, context: 'staging' });
    assert.equal(kubeConfig.getCurrentCluster()?.server, 'https://staging.example.com:6443');
    assert.throws(
      () => loadKubeConfig({ kubeconfig: file, context: 'qa' }),
      configErrorMatching(/context "qa" is not in kubeconfig .*; its contexts: prod, staging/),
    );
  });

  test('a current-context that names no context is a ConfigError', async () => {
    const { dir } = await scratch();
    const file = join(dir, 'kc.yaml');
    await writeFile(file, kubeconfigYaml(['a'], 'missing'));
    assert.throws(
      () => loadKubeConfig({ kubeconfig: file }),
      configErrorMatching(/no usable current context/),
    );
  });

  test('a kubeconfig that selects no context says so and how to pick one', async () => {
    const { dir } = await scratch();
    for (const current of [undefined, '']) {
      const file = join(dir, `kc-${current === undefined ? 'absent' : 'empty'}.yaml`);
      const yaml = { ...(parse(kubeconfigYaml(['prod', 'staging'], 'x')) as Record<string, unknown>) };
      if (current === undefined) delete yaml['current-context'];
      else yaml['current-context'] = current;
      await writeFile(file, stringify(yaml));
      assert.throws(
        () => loadKubeConfig({ kubeconfig: file }),
        (err: unknown) => {
          assert.ok(err instanceof ConfigError);
          assert.equal(
            err.message,
            `kubeconfig ${file} sets no current-context; pass --context NAME (its contexts: prod, staging) ` +
              'or select one with `kubectl config use-context NAME`',
          );
          return true;
        },
      );
    }
    const none = join(dir, 'kc-none.yaml');
    await writeFile(
      none,
      stringify({ apiVersion: 'v1', kind: 'Config', clusters: [], contexts: [], users: [] }),
    );
    assert.throws(
      () => loadKubeConfig({ kubeconfig: none }),
      configErrorMatching(
        /^kubeconfig \S+ defines no context; pass another --kubeconfig, or add one with `kubectl config set-context`$/,
      ),
    );
  });

  test('in a pod it uses the service-account token, CA and namespace', async () => {
    const { dir, empty } = await scratch();
    const sa = join(dir, 'sa');
    await mkdir(sa);
    await writeFile(join(sa, 'token'), 'token-from-kubelet');
    await writeFile(join(sa, 'ca.crt'), 'ca');
    await writeFile(join(sa, 'namespace'), 'kube-system\n');
    const env = { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' };
    const { kubeConfig, source } = loadKubeConfig({ env, homeDir: empty, serviceAccountDir: sa });
    assert.match(source, /in-cluster/);
    assert.equal(kubeConfig.getCurrentCluster()?.server, 'https://[fd00::1]:443');
    assert.equal(kubeConfig.getCurrentCluster()?.caFile, join(sa, 'ca.crt'));
    assert.equal(kubeConfig.getContextObject(kubeConfig.getCurrentContext())?.namespace, 'kube-system');
    assert.throws(
      () => loadKubeConfig({ env: {}, homeDir: empty, serviceAccountDir: sa }),
      configErrorMatching(/KUBERNETES_SERVICE_HOST is not set/),
    );
  });

  test('makeClients builds the API clients', async () => {
    const { dir } = await scratch();
    const file = join(dir, 'kc.yaml');
    await writeFile(file, kubeconfigYaml(['a'], 'a'));
    const clients = makeClients(loadKubeConfig({ kubeconfig: file }).kubeConfig);
    assert.equal(typeof clients.core.listNode, 'function');
    assert.equal(typeof clients.coordination.replaceNamespacedLease, 'function');
    assert.equal(typeof clients.certificates.listCertificateSigningRequest, 'function');
  });
});

describe('fromApiException', () => {
  const status = (code: number, message: string) =>
    new ApiException(code, 'x', JSON.stringify({ kind: 'Status', code, message }), {});

  test('maps status codes to typed errors with the apiserver message', () => {
    const cases: [number, new (...args: never[]) => Error][] = [
      [400, InvalidInputError],
      [401, UnauthenticatedError],
      [403, ForbiddenError],
      [404, NotFoundError],
      [409, ConflictError],
      [410, GoneError],
      [422, InvalidInputError],
      // The object is over the API server's size limit: sending it again fails again.
      [413, TooLargeError],
      [429, RateLimitedError],
      [500, UnavailableError],
      [503, UnavailableError],
      // Any other answer from the API server is a fault to retry, not the caller's input.
      [301, UnavailableError],
      [405, UnavailableError],
      [408, UnavailableError],
    ];
    for (const [code, type] of cases) {
      const err = fromApiException(status(code, `reason ${code}`), 'read node n1');
      assert.ok(err instanceof type, `${code} → ${type.name}`);
      assert.match(err.message, new RegExp(`^read node n1: HTTP ${code}: reason ${code}`));
    }
  });

  test('401 and 403 say what the operator can do', () => {
    assert.equal(
      fromApiException(status(401, 'Unauthorized'), 'list nodes').message,
      'list nodes: HTTP 401: Unauthorized; check the kubeconfig credentials',
    );
    assert.equal(
      fromApiException(status(403, 'nodes is forbidden'), 'list nodes').message,
      'list nodes: HTTP 403: nodes is forbidden; grant the permission in RBAC',
    );
  });

  test('unlessNotFound: the object, undefined for 404, a typed error for any other failure', async () => {
    assert.equal(await unlessNotFound(async () => 'csr', 'read csr x'), 'csr');
    assert.equal(await unlessNotFound(() => Promise.reject(status(404, 'gone')), 'read csr x'), undefined);
    await assert.rejects(
      unlessNotFound(() => Promise.reject(status(503, 'busy')), 'read csr x'),
      (err: Error) => err instanceof UnavailableError && err.message === 'read csr x: HTTP 503: busy',
    );
    await assert.rejects(
      unlessNotFound(() => {
        throw status(403, 'no');
      }, 'read csr x'),
      ForbiddenError,
    );
  });

  test("keeps the apiserver's status and Retry-After (delta-seconds) as typed facts", () => {
    const busy = fromApiException(
      new ApiException(429, 'x', '{}', { 'retry-after': '7' }),
      'create configmap',
    );
    assert.equal(busy.upstreamStatus, 429);
    assert.equal(busy.retryAfterSeconds, 7);
    const dated = new ApiException(503, 'x', '{}', { 'retry-after': 'Wed, 21 Oct 2026 07:28:00 GMT' });
    assert.equal(fromApiException(dated).upstreamStatus, 503);
    assert.equal(fromApiException(dated).retryAfterSeconds, undefined);
  });

  test('network failures and watch errors are mapped too', () => {
    const refused = fromApiException(new TypeError('fetch failed'), 'list nodes');
    assert.ok(refused instanceof UnavailableError);
    assert.match(refused.message, /cannot reach the API server \(fetch failed\)/);
    const watchGone = Object.assign(new Error('Gone'), { statusCode: 410 });
    assert.ok(fromApiException(watchGone) instanceof GoneError);
  });
});
