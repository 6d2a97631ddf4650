/**
 * KOPS_OS_TLS_INSECURE_SKIP_VERIFY (kops sets it for `spec.cloudProvider.openstack.insecureSkipVerify`):
 * Keystone, and the Swift state store, on a certificate the controller does not trust are refused
 * without it and reached with it; no other client is affected.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { after, afterEach, before, test } from 'node:test';
import { createServer, type Server } from 'node:tls';
import { ForbiddenError, KopsError } from '../../errors.ts';
import { httpsRequest } from '../../net/https-client.ts';
import { type OpenStackSimulator, startOpenStackSimulator } from '../../sim/openstack/simulator.ts';
import { createCertificateAuthority, issueServingCertificate } from '../../sim/tls.ts';
import { SwiftVfs } from '../../statestore/swift-vfs.ts';
import { capturedLogger } from '../../testing/log-capture.ts';
import { KeystoneSession } from './keystone.ts';
import { createOpenStackProvider } from './provider.ts';

let sim: OpenStackSimulator;
/** The whole OpenStack (Keystone and Swift) on HTTPS, on the same untrusted certificate. */
let tlsSim: OpenStackSimulator;
let front: Server;
let authUrl: string;
const sockets = new Set<Socket>();

before(async () => {
  sim = await startOpenStackSimulator();
  // Keystone behind TLS on a certificate from a CA nobody trusts (a self-signed installation).
  const ca = await createCertificateAuthority('self-signed-keystone');
  const serving = await issueServingCertificate(ca);
  tlsSim = await startOpenStackSimulator({ tls: { key: serving.privateKey, cert: serving.certificate } });
  tlsSim.swift.createContainer('kops-state');
  const simUrl = new URL(sim.authUrl);
  front = createServer({ key: serving.privateKey, cert: serving.certificate }, (client) => {
    const upstream = connect(Number(simUrl.port), '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => s.destroy());
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
  const { port } = front.address() as { port: number };
  authUrl = `https://127.0.0.1:${port}${simUrl.pathname}`;
});
after(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((resolve) => front.close(resolve));
  await Promise.all([sim.close(), tlsSim.close()]);
});
afterEach(() => {
  delete process.env['KOPS_OS_TLS_INSECURE_SKIP_VERIFY'];
});

const session = () => new KeystoneSession({ auth: { ...sim.passwordAuth, authUrl } });

/** Log lines, and a logger that writes them. */
test('without the variable, Keystone on an untrusted certificate is refused', async () => {
  await assert.rejects(session().token(), ForbiddenError);
});

test('with KOPS_OS_TLS_INSECURE_SKIP_VERIFY=true the OpenStack clients skip verification, and only they', async () => {
  process.env['KOPS_OS_TLS_INSECURE_SKIP_VERIFY'] = 'true';
  const token = await session().token();
  assert.ok(token.token.length > 0);
  // The project's HTTP client, used by every other cloud, still verifies.
  await assert.rejects(
    httpsRequest({ url: new URL(authUrl), timeoutMs: 5_000, maxBodyBytes: 1024 }),
    ForbiddenError,
  );
});

test('the provider says so once, loudly, at start-up', () => {
  process.env['KOPS_OS_TLS_INSECURE_SKIP_VERIFY'] = 'true';
  const { lines, logger } = capturedLogger();
  createOpenStackProvider({
    clusterName: 'c.example.com',
    auth: { ...sim.passwordAuth, authUrl },
    logger,
  }).close();
  assert.equal(lines.length, 1);
  const record = JSON.parse(lines[0] as string) as { level: string; msg: string };
  assert.equal(record.level, 'warn');
  assert.match(record.msg, /KOPS_OS_TLS_INSECURE_SKIP_VERIFY is set: .*NOT verified/);
  // Without it, nothing is said.
  delete process.env['KOPS_OS_TLS_INSECURE_SKIP_VERIFY'];
  createOpenStackProvider({
    clusterName: 'c.example.com',
    auth: { ...sim.passwordAuth, authUrl },
    logger,
  }).close();
  assert.equal(lines.length, 1);
});

test('the Swift state store on an untrusted certificate is refused without the variable, and works with it', async () => {
  const { lines, logger } = capturedLogger();
  const store = () => new SwiftVfs(new URL('swift://kops-state/c1'), { auth: tlsSim.passwordAuth, logger });
  await assert.rejects(store().read('config'), ForbiddenError);
  assert.equal(tlsSim.count('swift.object.get'), 0);

  process.env['KOPS_OS_TLS_INSECURE_SKIP_VERIFY'] = 'true';
  // Keystone and the object requests alike: the token and then every object call over TLS.
  const vfs = store();
  await vfs.write('config', 'kind: Cluster\n');
  assert.equal((await vfs.read('config')).data.toString(), 'kind: Cluster\n');
  assert.deepEqual(await vfs.list(''), ['config']);
  assert.equal(tlsSim.count('tokens.create'), 1);
  // The provider of this process said it already (the test before): the store says it no more.
  assert.deepEqual(lines, []);
  // Other clients still verify Swift's certificate.
  await assert.rejects(
    httpsRequest({ url: new URL(tlsSim.swift.storageUrl), timeoutMs: 5_000, maxBodyBytes: 1024 }),
    (err: unknown) => err instanceof KopsError && err.kind === 'forbidden',
  );
});
