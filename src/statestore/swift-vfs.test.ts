import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { ConfigError, KopsError, NotFoundError, UnauthenticatedError, UnavailableError } from '../errors.ts';
import { startOpenStackSimulator } from '../sim/openstack/simulator.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { openVfs } from './open.ts';
import { SwiftVfs } from './swift-vfs.ts';

const sim = await startOpenStackSimulator({ containerListingLimit: 100 });
sim.swift.createContainer('kops-state');
const noSwift = await startOpenStackSimulator({ objectStore: false });
const noNova = await startOpenStackSimulator({ compute: false });
noNova.swift.createContainer('kops-state');
after(() => Promise.all([sim.close(), noSwift.close(), noNova.close()]));

const open = (
  url = 'swift://kops-state/cluster.example.com',
  env: NodeJS.ProcessEnv = sim.env,
  timeoutMs?: number,
) => openVfs(url, { env, ...(timeoutMs ? { swift: { timeoutMs } } : {}) });

describe('Swift backend (swift://container/path)', () => {
  test('opens through openVfs with the OS_* variables; the version is the ETag, polling one HEAD on a kept token (the VFS contract: open.test.ts)', async () => {
    const vfs = open('swift://kops-state/cluster.example.com/');
    assert.ok(vfs instanceof SwiftVfs);
    assert.equal(vfs.url, 'swift://kops-state/cluster.example.com');
    await vfs.write('config', 'kind: Cluster\n');
    assert.equal(
      sim.swift.getObject('kops-state', 'cluster.example.com/config')?.toString(),
      'kind: Cluster\n',
    );
    const first = await vfs.read('config');
    assert.equal(first.data.toString(), 'kind: Cluster\n');
    assert.match(first.version, /^[0-9a-f]{32}$/, 'the version is the ETag');
    sim.clearCalls();
    assert.equal(await vfs.stat('config'), first.version);
    assert.equal(sim.count('swift.object.head'), 1, 'polling is one HEAD');
    assert.equal(sim.count('tokens.create'), 0, 'the token is kept');
  });

  test('object names with spaces and other characters round-trip', async () => {
    const vfs = open('swift://kops-state/odd names');
    await vfs.write('pki/a b+c%d', 'odd');
    assert.equal(sim.swift.getObject('kops-state', 'odd names/pki/a b+c%d')?.toString(), 'odd');
    assert.deepEqual(await vfs.list('pki/'), ['pki/a b+c%d']);
  });

  test('lists past one page, paged by marker', async () => {
    for (let i = 0; i < 250; i++)
      sim.swift.putObject('kops-state', `paged/issued/${String(i).padStart(3, '0')}`, 'x');
    const vfs = openVfs('swift://kops-state/paged', { env: sim.env, swift: { pageSize: 100 } });
    sim.clearCalls();
    const names = await vfs.list('issued/');
    assert.equal(names.length, 250);
    assert.equal(names[249], 'issued/249');
    assert.equal(sim.count('swift.container.list'), 3);
  });

  test("a page size above Swift's container_listing_limit (412) falls back to Swift's own pages", async () => {
    const vfs = openVfs('swift://kops-state/paged', { env: sim.env, swift: { pageSize: 1_000 } });
    sim.clearCalls();
    assert.equal((await vfs.list('issued/')).length, 250);
    // 412, then 100 + 100 + 50 + an empty page.
    assert.equal(sim.count('swift.container.list'), 5);
  });

  test('a missing container is NotFound', async () => {
    const vfs = open('swift://no-such-container/c1');
    await assert.rejects(vfs.read('config'), NotFoundError);
    assert.equal(await vfs.stat('config'), undefined);
    await assert.rejects(vfs.list(''), /container no-such-container does not exist/);
  });

  test('5xx and throttling are retried, then Unavailable (as the S3 backend)', async () => {
    const vfs = open();
    await vfs.write('retry', 'r');
    sim.failNext(2, 503, 'swift.object.get');
    assert.equal((await vfs.read('retry')).data.toString(), 'r');
    sim.failNext(3, 503, 'swift.object.get');
    await assert.rejects(
      vfs.read('retry'),
      (err: unknown) => err instanceof UnavailableError && /HTTP 503/.test(err.message),
    );
    sim.failNext(3, 429, 'swift.object.head');
    await assert.rejects(vfs.stat('retry'), UnavailableError);
    sim.failNext(3, 500, 'swift.container.list');
    await assert.rejects(vfs.list(''), UnavailableError);
    sim.dropNext(1, 'swift.object.put');
    await vfs.write('retry', 'after a dropped connection');
    assert.equal((await vfs.read('retry')).data.toString(), 'after a dropped connection');
  });

  test('a revoked token is renewed once, and the call goes through', async () => {
    const vfs = open();
    await vfs.write('token', 't');
    sim.revokeTokens();
    sim.clearCalls();
    assert.equal((await vfs.read('token')).data.toString(), 't');
    assert.equal(sim.count('tokens.create'), 1);
  });

  test('a store that does not answer is a timeout within the deadline', async () => {
    const vfs = open(undefined, sim.env, 300);
    await vfs.write('slow', 's');
    sim.delayNext(1, 2_000, 'swift.object.get');
    const started = Date.now();
    await assert.rejects(
      vfs.read('slow'),
      (err: unknown) => err instanceof KopsError && err.kind === 'timeout',
    );
    assert.ok(Date.now() - started < 1_500);
    sim.resetFaults();
  });

  test('the deadline is on the monotonic clock: a wall clock stepped ahead while Keystone answers leaves the call its time', async (t) => {
    sim.swift.putObject('kops-state', 'cluster.example.com/stepped', 's');
    // The wall clock is mocked (and still), and stepped 2 h ahead while Keystone makes the token.
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() });
    const step = setTimeout(() => t.mock.timers.setTime(Date.now() + 7_200_000), 100);
    try {
      // A new store: its first call asks Keystone for a token.
      const vfs = open(undefined, sim.env, 2_000);
      sim.delayNext(1, 200, 'tokens.create');
      sim.delayNext(1, 100, 'swift.object.get');
      assert.equal((await vfs.read('stepped')).data.toString(), 's');
    } finally {
      clearTimeout(step);
      t.mock.timers.reset();
      sim.resetFaults();
    }
  });
});

describe('Swift: what is refused, and how it is said', () => {
  test('Keystone refusing the credentials names the OS_* variables', async () => {
    const vfs = open(undefined, { ...sim.env, OS_PASSWORD: 'wrong' });
    await assert.rejects(
      vfs.read('config'),
      (err: unknown) =>
        err instanceof UnauthenticatedError &&
        // The Keystone session's own message (the Nova client says the same), said of the store.
        /^cannot open swift:\/\/kops-state\/cluster\.example\.com: .*Keystone refused the controller's credentials for project kops/.test(
          err.message,
        ) &&
        /OS_USERNAME and OS_PASSWORD/.test(err.message),
    );
  });

  test('missing OS_* variables are a configuration error at open', () => {
    assert.throws(() => open(undefined, { ...sim.env, OS_AUTH_URL: undefined }), /OS_AUTH_URL is not set/);
    assert.throws(
      () => open(undefined, { ...sim.env, OS_REGION_NAME: undefined }),
      /OS_REGION_NAME is not set/,
    );
    assert.throws(() => open(undefined, { ...sim.env, OS_PASSWORD: undefined }), /no credentials/);
  });

  test('a catalog without an object store in the region is a configuration error', async () => {
    await assert.rejects(
      open('swift://kops-state/c1', noSwift.env).read('config'),
      (err: unknown) =>
        err instanceof ConfigError && /no public object-store \(Swift\) endpoint in region/.test(err.message),
    );
    await assert.rejects(
      open(undefined, { ...sim.env, OS_REGION_NAME: 'RegionTwo' }).read('config'),
      (err: unknown) =>
        err instanceof ConfigError && /region RegionTwo: check OS_REGION_NAME/.test(err.message),
    );
  });

  test('a token scoped to no project (no OS_PROJECT_*) says so', async () => {
    const env = { ...sim.env, OS_PROJECT_NAME: undefined, OS_PROJECT_DOMAIN_NAME: undefined };
    await assert.rejects(open(undefined, env).read('config'), /scoped to no project/);
  });

  test('Keystone down is Unavailable', async () => {
    sim.failNext(3, 503, 'tokens.create');
    await assert.rejects(
      open().read('config'),
      (err: unknown) => err instanceof UnavailableError && /Keystone/.test(err.message),
    );
  });

  test('Keystone answering 404 (an OS_AUTH_URL of the wrong path) is a configuration error, never a missing object', async () => {
    // A Keystone (or the web server in front of it) asked at a path it does not serve answers 404
    // (openstack/keystone keystone/exception.py NotFound): that is no answer about the object.
    const vfs = open('swift://kops-state/c1', {
      ...sim.env,
      OS_AUTH_URL: sim.authUrl.replace('/identity/v3', '/keystone'),
    });
    for (const call of [() => vfs.read('config'), () => vfs.stat('config'), () => vfs.list('')]) {
      await assert.rejects(
        call(),
        (err: unknown) => err instanceof ConfigError && /check OS_AUTH_URL/.test(err.message),
      );
    }
  });

  test('a URL without a container is refused', () => {
    assert.throws(() => open('swift://'), ConfigError);
    assert.throws(() => open('swift:///c1'), /no container; use swift:\/\/CONTAINER\/PATH/);
  });
});

describe('Swift: the OpenStack around it', () => {
  test('a catalog without compute (a cloud without Nova) still serves the store', async () => {
    const vfs = open('swift://kops-state/c1', noNova.env);
    await vfs.write('config', 'kind: Cluster\n');
    assert.equal((await vfs.read('config')).data.toString(), 'kind: Cluster\n');
    assert.equal(noNova.count('tokens.create'), 1);
  });

  test('with only the Swift store in the process, KOPS_OS_TLS_INSECURE_SKIP_VERIFY is said once', () => {
    const { logger, lines } = capturedLogger();
    const swift = (env: NodeJS.ProcessEnv) => openVfs('swift://kops-state/c1', { env, swift: { logger } });
    swift(sim.env);
    assert.equal(lines.length, 0, 'nothing without the variable');
    process.env['KOPS_OS_TLS_INSECURE_SKIP_VERIFY'] = 'true';
    try {
      // The controller opens the store more than once (configuration, secrets, PKI): one line.
      swift(sim.env);
      swift(sim.env);
    } finally {
      delete process.env['KOPS_OS_TLS_INSECURE_SKIP_VERIFY'];
    }
    assert.equal(lines.length, 1);
    const record = JSON.parse(lines[0] as string) as { level: string; msg: string };
    assert.equal(record.level, 'warn');
    assert.match(
      record.msg,
      /KOPS_OS_TLS_INSECURE_SKIP_VERIFY is set: .*\(Keystone, Nova, Swift\) are NOT verified/,
    );
  });
});
