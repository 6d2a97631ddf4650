import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdir, mkdtemp, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ConfigError, exitCodeOf, UnauthenticatedError } from '../errors.ts';
import { type CertificateAuthority, createCa } from '../pki/ca.ts';
import { generateKey, privateKeyPem } from '../pki/keys.ts';
import { issueCertificate, type ProfileName, publicKeyRequest } from '../pki/profiles.ts';
import { decodeRenewalToken } from '../protocol/renewal-proof.ts';
import { nodeFileNames } from './node-files.ts';
import { readCurrentCredentials, renewalProof } from './renewal.ts';

const ca = createCa();
let root = '';
let count = 0;
before(async () => {
  root = await mkdtemp(join(tmpdir(), 'kops-renewal-'));
});
after(() => rm(root, { recursive: true, force: true }));

/** A --dir holding a client certificate of `profile` for node-a and its key (another key when `mismatched`). */
async function nodeDir(
  options: {
    profile?: ProfileName;
    lifetimeMs?: number;
    issuedAt?: Date;
    mismatched?: boolean;
    name?: string;
    incarnationId?: string;
    issuer?: CertificateAuthority;
  } = {},
) {
  const dir = join(root, `dir-${count++}`);
  await mkdir(dir);
  const key = generateKey();
  const issued = issueCertificate(
    options.issuer ?? ca,
    options.profile ?? 'kubelet',
    publicKeyRequest(key),
    {
      name: options.name ?? 'node-a',
      dnsNames: [],
      ipAddresses: [],
      ...(options.incarnationId ? { incarnationId: options.incarnationId } : {}),
    },
    {
      ...(options.issuedAt ? { now: options.issuedAt } : {}),
      ...(options.lifetimeMs ? { lifetimeMs: options.lifetimeMs } : {}),
    },
  );
  await writeFile(join(dir, nodeFileNames.clientCertificate), issued.pem);
  await writeFile(
    join(dir, nodeFileNames.clientKey),
    privateKeyPem(options.mismatched ? generateKey() : key),
  );
  return dir;
}

describe('join --renew: the current credentials', () => {
  test("reads the node name from the certificate and signs each attempt's body with its key", async () => {
    const current = await readCurrentCredentials(await nodeDir());
    assert.equal(current.nodeName, 'node-a');
    const header = (await renewalProof(current, 'minimal.example.com')(Buffer.from('{}'))) as string;
    assert.match(header, /^x-kops-renewal [A-Za-z0-9_-]+$/);
    const proof = decodeRenewalToken(header.slice('x-kops-renewal '.length));
    assert.equal(proof.audience, 'kops-controller.minimal.example.com');
    assert.ok(proof.certificate.equals(current.certificate.raw));
  });

  test('a missing directory, a key of another certificate or a non-node certificate: a config error naming the problem', async () => {
    const cases: [string, () => Promise<unknown>, RegExp][] = [
      [
        'missing',
        () => readCurrentCredentials(join(root, 'nowhere')),
        /cannot read the current kubelet credentials/,
      ],
      [
        'mismatched',
        async () => readCurrentCredentials(await nodeDir({ mismatched: true })),
        /is not the certificate of/,
      ],
      [
        'not a node',
        async () => readCurrentCredentials(await nodeDir({ profile: 'kube-proxy' })),
        /not a node's client certificate/,
      ],
    ];
    for (const [what, attempt, message] of cases) {
      await assert.rejects(attempt(), (err) => err instanceof ConfigError && message.test(err.message), what);
    }
  });

  test('an expired certificate: refused as the server would refuse it (unauthenticated, exit 77), naming the way back', async () => {
    const dir = await nodeDir({ issuedAt: new Date(Date.now() - 3 * 86_400_000), lifetimeMs: 86_400_000 });
    await assert.rejects(readCurrentCredentials(dir), (err) => {
      assert.ok(err instanceof UnauthenticatedError, String(err));
      assert.equal(exitCodeOf(err), 77);
      assert.match(err.message, /expired on .* join it again with a cloud proof or token$/);
      return true;
    });
  });

  test('a certificate expired only by this machine’s clock (stepped far ahead) is refused naming this clock and its time', async () => {
    // Issued now for a day; this machine's clock says it is a year later.
    const dir = await nodeDir({ lifetimeMs: 86_400_000 });
    const yearAhead = new Date(Date.now() + 365 * 86_400_000);
    await assert.rejects(readCurrentCredentials(dir, yearAhead), (err) => {
      assert.ok(err instanceof UnauthenticatedError, String(err));
      assert.match(
        err.message,
        new RegExp(
          `expired on \\S+ by this machine's clock \\(now ${yearAhead.toISOString().replace(/[.]/g, '\\.')}; if that is wrong, set the clock and renew\\): an expired node cannot renew`,
        ),
      );
      return true;
    });
  });

  test('each attempt is dated by the wall clock of that attempt: a clock stepped between attempts dates the next proof by the new time', async () => {
    const current = await readCurrentCredentials(await nodeDir());
    let wall = new Date('2026-03-01T10:00:00.000Z');
    const proof = renewalProof(current, 'minimal.example.com', () => wall);
    const timestampOf = async () =>
      decodeRenewalToken(((await proof(Buffer.from('{}'))) as string).slice('x-kops-renewal '.length))
        .timestamp;
    assert.equal(await timestampOf(), '2026-03-01T10:00:00.000Z');
    wall = new Date('2026-03-01T08:00:00.000Z'); // chrony stepped it back two hours
    assert.equal(await timestampOf(), '2026-03-01T08:00:00.000Z');
  });
});

/**
 * The kubelet's own rotated pair, as k8s.io/client-go/util/certificate/certificate_store.go `Update`
 * writes it into its --cert-dir: `kubelet-client-<2006-01-02-15-04-05>.pem`, 0600, the certificate
 * then the key in one PEM file, and `kubelet-client-current.pem` a link to its absolute path.
 */
async function kubeletRotated(dir: string, options: { lifetimeMs?: number; issuedAt?: Date } = {}) {
  const key = generateKey();
  const issued = issueCertificate(
    ca,
    'kubelet',
    publicKeyRequest(key),
    { name: 'node-a', dnsNames: [], ipAddresses: [] },
    {
      ...(options.issuedAt ? { now: options.issuedAt } : {}),
      ...(options.lifetimeMs ? { lifetimeMs: options.lifetimeMs } : {}),
    },
  );
  const pair = join(dir, 'kubelet-client-2026-01-02-03-04-05.pem');
  await writeFile(pair, `${issued.pem.trimEnd()}\n${privateKeyPem(key)}`, { mode: 0o600 });
  await symlink(pair, join(dir, 'kubelet-client-current.pem'));
  return { pair, serial: new X509Certificate(issued.pem).serialNumber };
}

describe('join --renew: the pair the kubelet uses now', () => {
  // The kubelet's certificate store looks first at kubelet-client-current.pem, then at
  // kubelet-client.crt and .key in its --cert-dir (certificate_store.go `Current`): once the kubelet
  // has rotated its certificate, the files join wrote are no longer its credentials.
  const expiredJoinPair = { issuedAt: new Date(Date.now() - 3 * 86_400_000), lifetimeMs: 86_400_000 };

  test('a certificate the kubelet rotated (kubelet-client-current.pem) proves the renewal when join’s own has expired', async () => {
    const dir = await nodeDir(expiredJoinPair);
    const { serial } = await kubeletRotated(dir);
    const current = await readCurrentCredentials(dir);
    assert.equal(current.nodeName, 'node-a');
    assert.equal(current.certificate.serialNumber, serial);
  });

  test("join's pair that names its machine is presented over the kubelet's rotated one that names none (the KCM's), so unmarked: refuse does not refuse a node that joined with its cloud proof", async () => {
    const marked = await nodeDir({ incarnationId: 'i-0b' });
    const { serial } = await kubeletRotated(marked);
    const current = await readCurrentCredentials(marked);
    assert.notEqual(current.certificate.serialNumber, serial, "join's marked pair, not the kubelet's");
    assert.equal(current.nodeName, 'node-a');

    // Otherwise the kubelet's pair, as before: join's names no machine, has expired, is another node's,
    // is not of its own key, or is another CA's (after a CA rotation the kubelet's may be the only one
    // the server still trusts; the two CAs bear one name).
    for (const options of [
      {},
      { incarnationId: 'i-0b', ...expiredJoinPair },
      { incarnationId: 'i-0b', name: 'node-b' },
      { incarnationId: 'i-0b', mismatched: true },
      { incarnationId: 'i-0b', issuer: createCa() },
    ]) {
      const dir = await nodeDir(options);
      const rotated = await kubeletRotated(dir);
      assert.equal(
        (await readCurrentCredentials(dir)).certificate.serialNumber,
        rotated.serial,
        JSON.stringify(options),
      );
    }
  });

  test('a kubelet-client-current.pem link whose file is gone is skipped, as the kubelet skips it', async () => {
    const dir = await nodeDir();
    const { pair } = await kubeletRotated(dir);
    await unlink(pair);
    const current = await readCurrentCredentials(dir);
    assert.equal(current.nodeName, 'node-a');
  });

  test('an expired kubelet-client-current.pem gives way to join’s pair, as the kubelet falls back to its kubeconfig', async () => {
    const dir = await nodeDir();
    await kubeletRotated(dir, expiredJoinPair);
    const current = await readCurrentCredentials(dir);
    assert.equal(current.certificate.validToDate > new Date(), true);
  });

  test('both expired: refused naming the kubelet’s pair; an unreadable one is a config error, as the kubelet fails on it', async () => {
    const dir = await nodeDir(expiredJoinPair);
    await kubeletRotated(dir, expiredJoinPair);
    await assert.rejects(readCurrentCredentials(dir), (err) => {
      assert.ok(err instanceof UnauthenticatedError, String(err));
      assert.match(err.message, /kubelet-client-current\.pem expired on /);
      return true;
    });
    const garbled = await nodeDir();
    await writeFile(join(garbled, 'kubelet-client-current.pem'), 'not a pem\n');
    await assert.rejects(
      readCurrentCredentials(garbled),
      (err) => err instanceof ConfigError && /kubelet-client-current\.pem/.test(err.message),
    );
  });
});
