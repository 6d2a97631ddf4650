import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { servingCertificate } from '../bootstrap/server.ts';
import { parseConfig } from '../config/loader.ts';
import { InvalidInputError, NotFoundError } from '../errors.ts';
import { eventually } from '../net/testing.ts';
import { createCa } from '../pki/ca.ts';
import { MemfsVfs } from '../statestore/memfs-vfs.ts';
import { FakeClock } from '../testing/fake-clock.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { keepServingTlsCurrent, nodeConfigReader, servingTls } from './bootstrap-parts.ts';

const configBase = 'memfs://bootstrap-parts/clusters/c.example.com';

test('nodeConfigReader: the instance group’s nodeupconfig.yaml verbatim, as kops on every cloud', async () => {
  await new MemfsVfs(new URL(configBase)).write('igconfig/node/nodes/nodeupconfig.yaml', 'kubelet: {}\n');
  const read = nodeConfigReader(
    parseConfig({ clusterName: 'c.example.com', cloud: 'aws', configBase }),
    undefined,
  );
  assert.deepEqual(await read?.('nodes'), { nodeupConfig: 'kubelet: {}\n' });
  await assert.rejects(read?.('other') ?? Promise.resolve(), (err) => {
    assert.ok(err instanceof NotFoundError);
    assert.doesNotMatch(err.message, /metal/);
    return true;
  });
  // Bytes kops never writes (not UTF-8) are refused naming the file, never served with replacements.
  await new MemfsVfs(new URL(configBase)).write(
    'igconfig/node/latin/nodeupconfig.yaml',
    Buffer.from([0x6b, 0x3a, 0x20, 0xe9, 0x0a]),
  );
  await assert.rejects(read?.('latin') ?? Promise.resolve(), (err) => {
    assert.ok(err instanceof InvalidInputError, String(err));
    assert.match(err.message, /igconfig\/node\/latin\/nodeupconfig\.yaml: not UTF-8 text/);
    return true;
  });
});

test('nodeConfigReader on metal: a missing file says that kops builds it there and this controller does not', async () => {
  const read = nodeConfigReader(
    parseConfig({ clusterName: 'c.example.com', cloud: 'metal', configBase }),
    undefined,
  );
  await assert.rejects(read?.('workers') ?? Promise.resolve(), (err) => {
    assert.ok(err instanceof NotFoundError, 'still a missing file: kops’ 400, not a dependency fault');
    assert.match(err.message, /igconfig\/node\/workers\/nodeupconfig\.yaml/);
    assert.match(err.message, /on metal the Go kops-controller builds/);
    return true;
  });
});

const messages = (lines: string[]) => lines.map((line) => (JSON.parse(line) as { msg: string }).msg);

test('a self-issued serving certificate is issued again at two thirds of its lifetime; a failed issue is tried again in 10 minutes', async () => {
  const ca = createCa();
  const config = parseConfig({ clusterName: 'c.example.com', cloud: 'aws', server: {} });
  const serving = await servingTls(config, ca, { ipAddresses: ['10.0.0.1'] });
  const first = new X509Certificate(serving.tls.cert);
  assert.match(first.subjectAltName ?? '', /DNS:kops-controller\.internal\.c\.example\.com/);
  const lifetimeMs = first.validToDate.getTime() - first.validFromDate.getTime();
  const clock = new FakeClock();
  const { logger, lines } = capturedLogger();
  const applied: string[] = [];
  let refuse = false;
  const reissue = serving.reissue as NonNullable<typeof serving.reissue>;
  const stop = keepServingTlsCurrent(
    {
      ...serving,
      reissue: () => {
        if (refuse) throw new Error('CA certificate expires within the shortest lifetime issued');
        return reissue();
      },
    },
    (tls) => applied.push(tls.cert),
    { clock, logger },
  );
  await clock.advance((2 / 3) * lifetimeMs - 1);
  assert.equal(applied.length, 0);
  await clock.advance(1);
  assert.equal(applied.length, 1);
  const second = new X509Certificate(applied[0] as string);
  assert.notEqual(second.serialNumber, first.serialNumber);
  assert.equal(second.subjectAltName, first.subjectAltName);
  refuse = true;
  await clock.advance((2 / 3) * (second.validToDate.getTime() - second.validFromDate.getTime()));
  assert.equal(applied.length, 1);
  refuse = false;
  await clock.advance(10 * 60_000);
  assert.equal(applied.length, 2);
  assert.deepEqual(messages(lines), [
    'serving certificate issued again',
    'cannot issue the serving certificate again; the one served expires unless this succeeds',
    'serving certificate issued again',
  ]);
  stop();
  assert.equal(clock.pending, 0);
});

test('configured certificate files are served again once they change and their key matches; half a rotation is not', async () => {
  const ca = createCa();
  const dir = mkdtempSync(join(tmpdir(), 'serving-files-'));
  const [certFile, keyFile] = [join(dir, 'kops-controller.crt'), join(dir, 'kops-controller.key')];
  const write = (tls: { key: string; cert: string }) => {
    writeFileSync(certFile, tls.cert);
    writeFileSync(keyFile, tls.key);
  };
  const issue = () => servingCertificate(ca, { name: 'kops-controller' });
  const first = issue();
  write(first);
  const config = parseConfig({
    clusterName: 'c.example.com',
    cloud: 'aws',
    server: { serverCertificatePath: certFile, serverKeyPath: keyFile },
  });
  const serving = await servingTls(config, ca, undefined);
  assert.deepEqual(serving.tls, first);
  const clock = new FakeClock();
  const { logger, lines } = capturedLogger();
  const applied: string[] = [];
  const stop = keepServingTlsCurrent(serving, (tls) => applied.push(tls.cert), { clock, logger });
  // A minute on, and until the files have been read and the next reading is timed.
  const poll = async () => {
    await clock.advance(60_000);
    assert.equal(await eventually(() => clock.pending, 1), 1);
  };
  await poll();
  assert.deepEqual(applied, []);
  // nodeup rewrites the certificate first: until the key follows, the one served stays.
  const rotated = issue();
  writeFileSync(certFile, rotated.cert);
  await poll();
  assert.deepEqual(applied, []);
  writeFileSync(keyFile, rotated.key);
  await poll();
  assert.deepEqual(applied, [rotated.cert]);
  assert.deepEqual(messages(lines), [
    'cannot serve the server certificate files; still serving the last ones read',
    'server certificate files changed; serving them',
    'server certificate files read again',
  ]);
  stop();
  assert.equal(clock.pending, 0);
});
