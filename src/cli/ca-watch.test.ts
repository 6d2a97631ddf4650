/**
 * The CA watch on its own: what counts as a replaced CA in each store the bootstrap server reads
 * (PEM files, a kops keyset in a state store, kops' other signers), when it is reported, and what is
 * not a replacement (the same CA written again, a rotation half written, a store that fails).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseConfig } from '../config/loader.ts';
import { exitCodeOf, type KopsError, UnavailableError } from '../errors.ts';
import { bundlePem, type CertificateAuthority, createCa, rotateCa } from '../pki/ca.ts';
import { caPemPaths, saveCa } from '../pki/folder.ts';
import { privateKeyPem } from '../pki/keys.ts';
import { keysetOf, keysetPath } from '../pki/keyset.ts';
import { MemfsVfs } from '../statestore/memfs-vfs.ts';
import { FakeClock } from '../testing/fake-clock.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { type SigningAuthoritiesSource, signingAuthoritiesSource } from './bootstrap-parts.ts';
import { authoritiesDigest, caConfirmMs, caPollMs, watchSigningAuthorities } from './ca-watch.ts';

let folders = 0;

/** A fresh in-process store holding `cas` in `layout`, and the source the server reads them from. */
async function storeWith(
  cas: CertificateAuthority[],
  layout: 'pem' | 'keyset' = 'pem',
): Promise<{ vfs: MemfsVfs; source: SigningAuthoritiesSource }> {
  const url = `memfs://ca-watch-${++folders}/clusters/c.example.com/pki`;
  const vfs = new MemfsVfs(new URL(url));
  for (const ca of cas) await saveCa(vfs, ca, layout);
  const config = parseConfig({
    clusterName: 'c.example.com',
    cloud: 'aws',
    server: { caBasePath: url, signingCAs: cas.map((ca) => ca.name) },
  });
  assert.ok(config.server);
  return { vfs, source: signingAuthoritiesSource(config.server, undefined) };
}

/** Watches `source` from what it holds now; `replaced` lists what was reported. */
async function watch(source: SigningAuthoritiesSource) {
  const clock = new FakeClock();
  const { logger, lines } = capturedLogger();
  const replaced: KopsError[] = [];
  const stop = watchSigningAuthorities({
    loaded: await source.read(),
    source,
    onReplaced: (err) => replaced.push(err),
    clock,
    logger,
  });
  const messages = () => lines.map((line) => (JSON.parse(line) as { msg: string }).msg);
  return { clock, replaced, messages, stop };
}

test('a rotated CA is reported one period and one confirming read after it was written, once, with exit code 75; then the watch stops reading', async () => {
  const ca = createCa();
  const { vfs, source } = await storeWith([ca]);
  const { clock, replaced, stop } = await watch(source);
  const rotated = rotateCa(ca);
  await saveCa(vfs, rotated, 'pem');
  await clock.advance(caPollMs - 1);
  assert.equal(replaced.length, 0, 'not before the period');
  await clock.advance(1);
  assert.equal(replaced.length, 0, 'not on one read');
  await clock.advance(caConfirmMs);
  assert.equal(replaced.length, 1);
  const [err] = replaced as [KopsError];
  assert.equal(exitCodeOf(err), 75);
  assert.equal(err.reasonCode, 'ca-replaced');
  const [oldId, newId] = [ca.signer.certificate.keypairId, rotated.signer.certificate.keypairId];
  assert.match(err.message, /^the CAs in memfs:\/\/ca-watch-\d+\/clusters\/c\.example\.com\/pki /);
  assert.ok(err.message.includes(`(kubernetes-ca: signs with ${oldId}, trusts ${oldId}; now`), err.message);
  assert.ok(
    err.message.includes(`now kubernetes-ca: signs with ${newId}, trusts ${newId}, ${oldId})`),
    err.message,
  );
  assert.equal(clock.pending, 0, 'nothing more is read');
  await clock.advance(10 * caPollMs);
  assert.equal(replaced.length, 1);
  stop();
});

test('removing the old certificate from the bundle, or only changing the keypair id kops nodes ask for, is a replacement', async () => {
  const rotated = rotateCa(createCa());
  const { vfs, source } = await storeWith([rotated]);
  const { clock, replaced, stop } = await watch(source);
  const onlyNew = { ...rotated, certificates: [rotated.signer.certificate] };
  await vfs.write(caPemPaths('kubernetes-ca').certificate, bundlePem(onlyNew));
  await clock.advance(caPollMs + caConfirmMs);
  assert.equal(replaced.length, 1);
  stop();

  const ca = createCa();
  const ids = await storeWith([ca]);
  const relabelled = await watch(ids.source);
  await ids.vfs.write('keypair-ids.yaml', 'kubernetes-ca: "42"\n');
  await relabelled.clock.advance(caPollMs + caConfirmMs);
  assert.equal(relabelled.replaced.length, 1);
  assert.match(relabelled.replaced[0]?.message ?? '', /now kubernetes-ca: signs with 42,/);
  relabelled.stop();
});

test('the same CA written again, differently formatted, is no replacement', async () => {
  const ca = createCa();
  const { vfs, source } = await storeWith([ca]);
  const { clock, replaced, messages, stop } = await watch(source);
  const paths = caPemPaths('kubernetes-ca');
  const crlf = (text: string) => text.replace(/\n/g, '\r\n');
  await vfs.write(paths.certificate, `# written again\n${crlf(bundlePem(ca))}\n\n`);
  await vfs.write(paths.key, crlf((await vfs.read(paths.key)).data.toString()));
  await vfs.write('keypair-ids.yaml', `# ids\nkubernetes-ca:   '${ca.signer.certificate.keypairId}'\n`);
  await clock.advance(5 * caPollMs);
  assert.deepEqual(replaced, []);
  assert.deepEqual(messages(), []);
  assert.equal(authoritiesDigest(await source.read()), authoritiesDigest({ ca, otherSigners: [] }));
  stop();
});

test('a read between the files of one rotation is not acted on: the finished rotation is, and a change undone before the confirming read is nothing', async () => {
  const ca = createCa();
  const { vfs, source } = await storeWith([ca]);
  const { clock, replaced, stop } = await watch(source);
  const rotated = rotateCa(ca);
  const paths = caPemPaths('kubernetes-ca');
  // `pki rotate` writes the bundle first: the old key still finds its certificate in it.
  await vfs.write(paths.certificate, bundlePem(rotated));
  await clock.advance(caPollMs);
  await saveCa(vfs, rotated, 'pem');
  await clock.advance(caConfirmMs);
  assert.equal(replaced.length, 0, 'the read in between is not confirmed by the next');
  await clock.advance(caConfirmMs);
  assert.equal(replaced.length, 1);
  const newId = rotated.signer.certificate.keypairId;
  assert.ok(replaced[0]?.message.includes(`now kubernetes-ca: signs with ${newId},`), replaced[0]?.message);
  stop();

  const other = createCa();
  const undone = await storeWith([other]);
  const watched = await watch(undone.source);
  await undone.vfs.write(paths.certificate, bundlePem(rotateCa(other)) + bundlePem(other));
  await watched.clock.advance(caPollMs);
  await saveCa(undone.vfs, other, 'pem');
  await watched.clock.advance(caConfirmMs + 3 * caPollMs);
  assert.deepEqual(watched.replaced, []);
  watched.stop();
});

test('a CA that cannot be read keeps the loaded one: logged once while it lasts, once when it reads again, never reported', async () => {
  const ca = createCa();
  const { vfs, source } = await storeWith([ca]);
  const { clock, replaced, messages, stop } = await watch(source);
  const paths = caPemPaths('kubernetes-ca');
  const key = (await vfs.read(paths.key)).data.toString();
  await vfs.write(paths.key, key.slice(0, key.length / 2));
  await clock.advance(5 * caPollMs);
  const cannot = `cannot read the CAs in ${source.location}; still signing with and trusting the ones loaded at start`;
  assert.deepEqual(messages(), [cannot], 'one line for five failed reads');
  await vfs.write(paths.key, key);
  await clock.advance(caPollMs);
  assert.deepEqual(messages(), [cannot, `the CAs in ${source.location} can be read again`]);
  // Gone altogether, or a key that is not the bundle's signer's: still not a replacement.
  await vfs.delete(paths.certificate);
  await clock.advance(2 * caPollMs);
  await vfs.write(paths.certificate, bundlePem(ca));
  await vfs.write(paths.key, privateKeyPem(createCa().signer.key));
  await clock.advance(2 * caPollMs + caConfirmMs);
  assert.deepEqual(replaced, []);
  assert.equal(messages().filter((m) => m === cannot).length, 3, messages().join('\n'));
  stop();
});

test('a state store that fails is no replacement either: the loaded CA stays', async () => {
  const ca = createCa();
  const { source } = await storeWith([ca]);
  let failing = false;
  const flaky: SigningAuthoritiesSource = {
    location: source.location,
    read: () => (failing ? Promise.reject(new UnavailableError('s3: 503 SlowDown')) : source.read()),
  };
  const { clock, replaced, messages, stop } = await watch(flaky);
  failing = true;
  await clock.advance(3 * caPollMs);
  assert.deepEqual(replaced, []);
  assert.equal(messages().length, 1);
  stop();
});

test('a kops keyset in the state store: a rotated keyset, and a distrusted old key, are replacements', async () => {
  const ca = createCa();
  const { vfs, source } = await storeWith([ca], 'keyset');
  const { clock, replaced, stop } = await watch(source);
  const rotated = rotateCa(ca);
  await vfs.write(keysetPath('kubernetes-ca'), keysetOf(rotated));
  await clock.advance(caPollMs + caConfirmMs);
  assert.equal(replaced.length, 1);
  stop();

  const kept = await storeWith([rotated], 'keyset');
  const watched = await watch(kept.source);
  // kops distrusts a key by stamping it, leaving it in the keyset.
  const oldId = ca.signer.certificate.keypairId;
  const distrusted = keysetOf(rotated).replace(
    `- id: "${oldId}"\n`,
    `- id: "${oldId}"\n      distrustTimestamp: "2026-01-01T00:00:00Z"\n`,
  );
  assert.notEqual(distrusted, keysetOf(rotated), 'the old key was stamped');
  await kept.vfs.write(keysetPath('kubernetes-ca'), distrusted);
  await watched.clock.advance(caPollMs + caConfirmMs);
  assert.equal(watched.replaced.length, 1);
  assert.doesNotMatch(watched.replaced[0]?.message.split('; now ')[1] ?? '', new RegExp(oldId));
  watched.stop();
});

test("kops' other signers count: a rotated etcd-clients-ca-cilium is a replacement", async () => {
  const cilium = createCa({ name: 'etcd-clients-ca-cilium' });
  const { vfs, source } = await storeWith([createCa(), cilium]);
  const { clock, replaced, stop } = await watch(source);
  await saveCa(vfs, rotateCa(cilium), 'pem');
  await clock.advance(caPollMs + caConfirmMs);
  assert.equal(replaced.length, 1);
  assert.match(replaced[0]?.message ?? '', /now kubernetes-ca: .*; etcd-clients-ca-cilium: signs with/);
  stop();
});

test('stopped, the watch reads no more', async () => {
  const ca = createCa();
  const { vfs, source } = await storeWith([ca]);
  const { clock, replaced, stop } = await watch(source);
  stop();
  assert.equal(clock.pending, 0);
  await saveCa(vfs, rotateCa(ca), 'pem');
  await clock.advance(3 * caPollMs);
  assert.deepEqual(replaced, []);
});
