import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { describe, test } from 'node:test';
import { ConfigError, InvalidInputError } from '../errors.ts';
import { openssl, opensslText, opensslVerify, scratchFile } from '../testing/openssl.ts';
import { bundlePem, createCa } from './ca.ts';
import { parseCsr, RequestRejectedError } from './csr.ts';
import { bytesOf, childrenOf, octetString, oid, readRoot, sequence } from './der.ts';
import { generateKey, spkiOf } from './keys.ts';
import {
  absoluteLifetimeBounds,
  backdateMs,
  issueCertificate,
  planCertificate,
  profileNamed,
  publicKeyRequest,
  validateLifetimeBounds,
} from './profiles.ts';
import { reservedNames } from './reserved-names.ts';
import { parseCertificate } from './x509.ts';

const now = new Date();
const ecCa = createCa({ now });
const rsaCa = createCa({ algorithm: 'rsa-2048', now });
const ecKey = publicKeyRequest(generateKey());
const rsaKey = publicKeyRequest(generateKey('rsa-2048'));
const minute = 60_000;
const hour = 60 * minute;

/** A CSR made by the real openssl, with its subject and extra `req` arguments. */
function opensslCsr(
  subject: string,
  extra: string[] = [],
  keyArgs = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256'],
): string {
  const keyOut = scratchFile('node.key', '');
  return openssl(['req', '-new', ...keyArgs, '-nodes', '-keyout', keyOut, '-subj', subject, ...extra]);
}

function rejection(fn: () => unknown, reason: string, message: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof RequestRejectedError, `expected RequestRejectedError, got ${String(err)}`);
    assert.equal(err.reason, reason);
    assert.match(err.message, message);
    return true;
  });
}

describe('every profile issues certificates that openssl verifies, with the right fields', () => {
  for (const [caName, ca] of [
    ['ECDSA P-256 CA', ecCa],
    ['RSA-2048 CA', rsaCa],
  ] as const) {
    test(`kubelet client certificate from an ${caName}`, () => {
      const issued = issueCertificate(ca, 'kubelet', ecKey, { name: 'node-a' }, { now });
      assert.match(opensslVerify(bundlePem(ca), issued.pem, 'sslclient'), /: OK$/);
      const text = opensslText(issued.pem);
      assert.match(text, /Subject: O = system:nodes, CN = system:node:node-a\n/);
      assert.match(text, /X509v3 Key Usage: critical\n\s+Digital Signature\n/);
      assert.match(text, /X509v3 Extended Key Usage: \n\s+TLS Web Client Authentication\n/);
      assert.match(text, /X509v3 Basic Constraints: critical\n\s+CA:FALSE\n/);
      assert.match(text, /X509v3 Subject Key Identifier/);
      assert.match(text, /X509v3 Authority Key Identifier/);
      assert.doesNotMatch(text, /Subject Alternative Name/);
      assert.match(
        text,
        ca === rsaCa
          ? /Signature Algorithm: sha256WithRSAEncryption/
          : /Signature Algorithm: ecdsa-with-SHA256/,
      );
    });
  }

  test('kubelet-server certificate carries exactly the verified names and serverAuth', () => {
    const issued = issueCertificate(
      ecCa,
      'kubelet-server',
      rsaKey,
      { name: 'node-a', dnsNames: ['node-a.ec2.internal'], ipAddresses: ['10.0.0.7', '2001:db8::7'] },
      { now },
    );
    assert.match(opensslVerify(bundlePem(ecCa), issued.pem, 'sslserver'), /: OK$/);
    const text = opensslText(issued.pem);
    // kops' subject for a serving certificate issued to a bare public key: the node's name.
    assert.match(text, /Subject: CN = node-a\n/);
    // RSA subject keys also get keyEncipherment (RSA key transport).
    assert.match(text, /X509v3 Key Usage: critical\n\s+Digital Signature, Key Encipherment\n/);
    assert.match(text, /X509v3 Extended Key Usage: \n\s+TLS Web Server Authentication\n/);
    assert.match(
      text,
      /DNS:node-a\.ec2\.internal, IP Address:10\.0\.0\.7, IP Address:2001:DB8:0:0:0:0:0:7\n/,
    );
  });

  test('kube-proxy certificate is system:kube-proxy with no organisation', () => {
    const issued = issueCertificate(ecCa, 'kube-proxy', ecKey, { name: 'node-a' }, { now });
    assert.match(opensslVerify(bundlePem(ecCa), issued.pem, 'sslclient'), /: OK$/);
    assert.match(opensslText(issued.pem), /Subject: CN = system:kube-proxy\n/);
  });

  test("kops-controller's serving certificate names itself and the admin's names", () => {
    const issued = issueCertificate(
      ecCa,
      'kops-controller',
      ecKey,
      { name: 'kops-controller.internal.example.com', ipAddresses: ['127.0.0.1'] },
      { now },
    );
    assert.match(opensslVerify(bundlePem(ecCa), issued.pem, 'sslserver'), /: OK$/);
    const text = opensslText(issued.pem);
    assert.match(text, /Subject: CN = kops-controller\.internal\.example\.com\n/);
    assert.match(text, /DNS:kops-controller\.internal\.example\.com, IP Address:127\.0\.0\.1\n/);
    assert.equal(issued.notAfter.getTime() - now.getTime() <= 30 * 24 * hour, true);
  });
});

describe('validity', () => {
  test('starts five minutes back and lasts the profile default (24 h), less a per-node spread', () => {
    const issued = issueCertificate(ecCa, 'kubelet', ecKey, { name: 'node-a' }, { now });
    const parsed = parseCertificate(issued.der);
    assert.ok(parsed.notBefore.getTime() <= now.getTime() - backdateMs + 1000);
    const lifetime = parsed.notAfter.getTime() - now.getTime();
    assert.ok(lifetime <= 24 * hour && lifetime >= 0.9 * 24 * hour, `lifetime ${lifetime}`);
    // openssl reads the same window: "Not Before: Nov 22 02:04:12 2026 GMT".
    const text = opensslText(issued.pem);
    const notBefore = /Not Before: (.* GMT)\n/.exec(text)?.[1];
    const notAfter = /Not After : (.* GMT)\n/.exec(text)?.[1];
    assert.equal(new Date(notBefore as string).getTime(), issued.notBefore.getTime());
    assert.equal(new Date(notAfter as string).getTime(), issued.notAfter.getTime());
  });

  test('the spread is stable per node and differs between nodes', () => {
    const expiry = (name: string) =>
      issueCertificate(ecCa, 'kubelet', ecKey, { name }, { now }).notAfter.getTime();
    assert.equal(expiry('node-a'), expiry('node-a'));
    const spreads = new Set(['node-a', 'node-b', 'node-c', 'node-d'].map(expiry));
    assert.ok(spreads.size > 1);
  });

  test('a lifetime below ten minutes is raised to ten minutes, above the bound lowered to it', () => {
    const short = issueCertificate(ecCa, 'kubelet', ecKey, { name: 'node-a' }, { now, lifetimeMs: 1000 });
    assert.equal(short.notAfter.getTime() - Math.floor(now.getTime() / 1000) * 1000, 10 * minute);
    const long = issueCertificate(
      ecCa,
      'kubelet',
      ecKey,
      { name: 'node-a' },
      {
        now,
        lifetimeMs: 1000 * 24 * hour,
        bounds: { minMs: 10 * minute, maxMs: 48 * hour },
      },
    );
    assert.ok(long.notAfter.getTime() - now.getTime() <= 48 * hour);
    assert.ok(long.notAfter.getTime() - now.getTime() >= 0.9 * 48 * hour);
  });

  test('a certificate never outlives its CA', () => {
    const shortCa = createCa({ now, lifetimeMs: 2 * hour });
    const issued = issueCertificate(
      shortCa,
      'kubelet',
      ecKey,
      { name: 'node-a' },
      { now, lifetimeMs: 400 * 24 * hour },
    );
    assert.equal(issued.notAfter.getTime(), shortCa.signer.certificate.parsed.notAfter.getTime());
  });

  test('a server still running when its CA expires (or has less than the shortest lifetime left) refuses, never issuing a window that ends before it starts', () => {
    const shortCa = createCa({ now, lifetimeMs: hour });
    const issueAt = (at: Date) => () =>
      issueCertificate(shortCa, 'kubelet', ecKey, { name: 'node-a' }, { now: at });
    for (const at of [new Date(now.getTime() + 2 * hour), new Date(now.getTime() + hour - 5 * minute)]) {
      assert.throws(issueAt(at), (err: unknown) => {
        assert.ok(err instanceof ConfigError, String(err));
        assert.match(err.message, /^CA certificate ".*" expires on .*: rotate the CA$/);
        return true;
      });
    }
    const lastIssued = issueAt(new Date(now.getTime() + hour - 11 * minute))();
    assert.ok(lastIssued.notAfter.getTime() - lastIssued.notBefore.getTime() >= 10 * minute);
  });

  test('maxLifetimeMs (a renewal: the certificate it presents) shortens the lifetime to exactly it, and below the minimum refuses', () => {
    const capped = issueCertificate(
      ecCa,
      'kubelet',
      ecKey,
      { name: 'node-a' },
      { now, maxLifetimeMs: 2 * hour },
    );
    assert.equal(capped.notAfter.getTime() - Math.floor(now.getTime() / 1000) * 1000, 2 * hour);
    const longer = issueCertificate(
      ecCa,
      'kubelet',
      ecKey,
      { name: 'node-a' },
      { now, maxLifetimeMs: 48 * hour },
    );
    const usual = issueCertificate(ecCa, 'kubelet', ecKey, { name: 'node-a' }, { now });
    assert.equal(
      longer.notAfter.getTime(),
      usual.notAfter.getTime(),
      'a cap above the lifetime changes nothing',
    );
    assert.throws(
      () => issueCertificate(ecCa, 'kubelet', ecKey, { name: 'node-a' }, { now, maxLifetimeMs: 5 * minute }),
      (err: unknown) => err instanceof RequestRejectedError && err.reason === 'lifetime',
    );
  });

  test('configured bounds must stay within 10 minutes and 455 days', () => {
    assert.deepEqual(validateLifetimeBounds(absoluteLifetimeBounds), absoluteLifetimeBounds);
    assert.throws(() => validateLifetimeBounds({ minMs: minute, maxMs: hour }), InvalidInputError);
    assert.throws(() => validateLifetimeBounds({ minMs: hour, maxMs: 456 * 24 * hour }), InvalidInputError);
    assert.throws(() => validateLifetimeBounds({ minMs: 2 * hour, maxMs: hour }), InvalidInputError);
  });
});

test('serials are random, positive and 128 bits', () => {
  const serials = Array.from({ length: 50 }, () =>
    issueCertificate(ecCa, 'kubelet', ecKey, { name: 'node-a' }, { now }),
  );
  assert.equal(new Set(serials.map((s) => s.serialHex)).size, 50);
  for (const issued of serials) {
    const serial = parseCertificate(issued.der).serialHex;
    assert.equal(serial, issued.serialHex);
    assert.ok(serial.length <= 32, serial); // at most 16 bytes once DER's sign byte is dropped
    assert.ok(BigInt(`0x${serial}`) > 0n);
  }
});

describe('requests are re-validated against the profile and the verified identity', () => {
  test('a kubelet CSR from openssl is accepted and its key certified', () => {
    const csr = parseCsr(opensslCsr('/O=system:nodes/CN=system:node:node-a'));
    const issued = issueCertificate(ecCa, 'kubelet', csr, { name: 'node-a' }, { now });
    assert.match(opensslVerify(bundlePem(ecCa), issued.pem), /: OK$/);
    assert.deepEqual(parseCertificate(issued.der).spki, csr.spki);
  });

  test('a CSR for another node is rejected', () => {
    const csr = parseCsr(opensslCsr('/O=system:nodes/CN=system:node:node-b'));
    rejection(() => planCertificate('kubelet', csr, { name: 'node-a' }), 'subject', /CN=system:node:node-a/);
  });

  test('a kubelet CSR must carry exactly O=system:nodes', () => {
    const masters = parseCsr(opensslCsr('/O=system:masters/CN=system:node:node-a'));
    rejection(() => planCertificate('kubelet', masters, { name: 'node-a' }), 'subject', /not allowed/);
    const extraOrg = parseCsr(opensslCsr('/O=system:nodes/O=system:masters/CN=system:node:node-a'));
    rejection(() => planCertificate('kubelet', extraOrg, { name: 'node-a' }), 'subject', /not allowed/);
    const extraAttribute = parseCsr(opensslCsr('/C=US/O=system:nodes/CN=system:node:node-a'));
    rejection(() => planCertificate('kubelet', extraAttribute, { name: 'node-a' }), 'subject', /not allowed/);
  });

  test('a client CSR asking for any subjectAltName is rejected', () => {
    const csr = parseCsr(
      opensslCsr('/O=system:nodes/CN=system:node:node-a', ['-addext', 'subjectAltName=DNS:node-a']),
    );
    rejection(() => planCertificate('kubelet', csr, { name: 'node-a' }), 'san', /no subjectAltName/);
  });

  test('a serving CSR asking for names beyond the verified facts is rejected', () => {
    const csr = parseCsr(
      opensslCsr('/O=system:nodes/CN=system:node:node-a', [
        '-addext',
        'subjectAltName=DNS:node-a.internal,IP:10.0.0.9,DNS:evil.example.com',
      ]),
    );
    rejection(
      () =>
        planCertificate('kubelet-server', csr, {
          name: 'node-a',
          dnsNames: ['node-a.internal'],
          ipAddresses: ['10.0.0.9'],
        }),
      'san',
      /not verified for it: evil\.example\.com/,
    );
  });

  test('a serving CSR asking for a subset of the verified names gets exactly that subset', () => {
    const csr = parseCsr(opensslCsr('/CN=node-a', ['-addext', 'subjectAltName=IP:10.0.0.9']));
    const issued = issueCertificate(
      ecCa,
      'kubelet-server',
      csr,
      { name: 'node-a', dnsNames: ['node-a.internal'], ipAddresses: ['10.0.0.9'] },
      { now },
    );
    assert.deepEqual(issued.altNames, { dnsNames: [], ipAddresses: ['10.0.0.9'] });
    assert.match(
      opensslText(issued.pem),
      /Subject: CN = node-a\n[\s\S]*X509v3 Subject Alternative Name: \n\s+IP Address:10\.0\.0\.9\n/,
    );
  });

  test('email and URI names are never allowed', () => {
    const csr = parseCsr(opensslCsr('/CN=node-a', ['-addext', 'subjectAltName=URI:spiffe://x/y']));
    rejection(
      () => planCertificate('kubelet-server', csr, { name: 'node-a', ipAddresses: ['10.0.0.9'] }),
      'san',
      /URI/,
    );
  });

  test('a serving certificate needs at least one verified name', () => {
    rejection(() => planCertificate('kubelet-server', ecKey, { name: 'node-a' }), 'san', /at least one/);
  });

  test('usages outside the profile are rejected', () => {
    const serverAuth = parseCsr(
      opensslCsr('/O=system:nodes/CN=system:node:node-a', ['-addext', 'extendedKeyUsage=serverAuth']),
    );
    rejection(
      () => planCertificate('kubelet', serverAuth, { name: 'node-a' }),
      'extension',
      /serverAuth are not allowed/,
    );
    const agreement = parseCsr(
      opensslCsr('/O=system:nodes/CN=system:node:node-a', ['-addext', 'keyUsage=keyAgreement']),
    );
    rejection(() => planCertificate('kubelet', agreement, { name: 'node-a' }), 'extension', /keyAgreement/);
  });

  test('the identity name must be a valid node name', () => {
    assert.throws(() => planCertificate('kubelet', ecKey, { name: '../etc' }), /not a valid DNS name/);
    assert.throws(() => planCertificate('kubelet', ecKey, { name: 'Node_A' }), /not a valid DNS name/);
  });

  test('a bare public key that fails the key policy is rejected', () => {
    const weak = publicKeyRequest(generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey);
    rejection(
      () => issueCertificate(ecCa, 'kubelet', weak, { name: 'node-a' }),
      'key',
      /1024 bits is too weak/,
    );
  });

  test('attack: a bare public key OpenSSL cannot read is refused (key) and never signed, and one it reads is signed as OpenSSL writes it', () => {
    // Reproducers of the fuzzing campaign (tmp/fuzz-s11): an RSA AlgorithmIdentifier of three
    // elements, and a P-256 point off its curve, which only OpenSSL's decoding catches.
    for (const hex of [
      '3082012d301806092a864886f70d01010106092a864886f70d01010105000382010f003082010a02820101009c76d38a1b6f26cd96fc601e68f9307185a9f0f0e246bc0e26f618ddcdce1367d1a1fd186f40f656057232940093ebb0cb6d0b8e62de795e6974203cc5f1b7170f1f5c79d725483fc71a254e3588399596be3feccb7d534662d2f93b18d06f4601177fcc885568fdac20462b41c13719790488681d6b40b5599ed785c6459fcbdb7f274bb7caef368c64a9c8d3aafd5098e736a15c22503e219f43f9efe718a14254f5295397725ac76875e1912b971af24f245ce1a71c263c04c72c2afe05f0f36f6a947f7143da9cc71ff7ed866edb41afd4d8b1f5e1017e6615fc843f4016bcefce336c62803f57c5c3123cec42c56f745805a314805c9131710f998cfe050203010001',
      '3059301306072a8648ce3d020106082a8648ce3d0301070342000449353fab114a0c9fdbe1e3e4d0991f571e8e9d69b13a316dead89282c4d00bb5751eb2e3c3ae87f9af4e58ab393cf606ed58049c564970d6de1f89d86bc226a5',
    ]) {
      rejection(
        () =>
          issueCertificate(ecCa, 'kubelet', publicKeyRequest(Buffer.from(hex, 'hex')), { name: 'node-a' }),
        'key',
        /unreadable public key/,
      );
    }
    // An RSA key whose parameters OpenSSL ignores but Go refuses: certified as OpenSSL writes it.
    const key = generateKey('rsa-2048');
    const [, keyBits] = childrenOf(readRoot(spkiOf(key))).map(bytesOf) as [Buffer, Buffer];
    const odd = sequence(sequence(oid('1.2.840.113549.1.1.1'), octetString(Buffer.of(1))), keyBits);
    const issued = issueCertificate(ecCa, 'kubelet', publicKeyRequest(odd), { name: 'node-a' }, { now });
    assert.deepEqual(parseCertificate(issued.der).spki, spkiOf(key));
  });

  test('unknown profiles are input errors naming the known ones', () => {
    assert.throws(
      () => profileNamed('root'),
      /unknown certificate profile "root": use one of kubelet, kubelet-server/,
    );
  });
});

describe("profiles issued to nodes never name the cluster's API server, whatever names are given", () => {
  test('a kubelet serving certificate for a service name, the service IP or a wildcard is refused', () => {
    for (const [names, named] of [
      [{ dnsNames: ['node-a.internal', 'kubernetes.default.svc'] }, /kubernetes\.default\.svc/],
      [{ ipAddresses: ['10.96.0.1'] }, /10\.96\.0\.1/],
      [{ ipAddresses: ['::ffff:100.64.0.1'] }, /::ffff:100\.64\.0\.1|::ffff:6440:1/],
    ] as const) {
      rejection(
        () => issueCertificate(ecCa, 'kubelet-server', ecKey, { name: 'node-a', ...names }, { now }),
        'reserved-name',
        named,
      );
    }
    // A wildcard is not even a valid name to verify.
    assert.throws(
      () =>
        issueCertificate(
          ecCa,
          'kubelet-server',
          ecKey,
          { name: 'node-a', dnsNames: ['*.example.com'] },
          { now },
        ),
      /"\*\.example\.com" is not a valid DNS name/,
    );
    rejection(
      () => issueCertificate(ecCa, 'kubelet', ecKey, { name: 'kubernetes' }, { now }),
      'reserved-name',
      /kubelet: name: kubernetes is a name of the cluster's API server/,
    );
  });

  test("the cluster's own reserved set applies when given; the controller's serving profile is not a node's", () => {
    const reserved = reservedNames({
      clusterName: 'c.example.com',
      serviceClusterIPRanges: ['172.30.0.0/16'],
    });
    rejection(
      () =>
        issueCertificate(
          ecCa,
          'kubelet-server',
          ecKey,
          { name: 'node-a', ipAddresses: ['172.30.0.1'] },
          { now, reserved },
        ),
      'reserved-name',
      /172\.30\.0\.1/,
    );
    // With the cluster's range known, kubeadm's default service IP is an ordinary address.
    const issued = issueCertificate(
      ecCa,
      'kubelet-server',
      ecKey,
      { name: 'node-a', ipAddresses: ['10.96.0.1'] },
      { now, reserved },
    );
    assert.deepEqual(issued.altNames.ipAddresses, ['10.96.0.1']);
    const controller = issueCertificate(
      ecCa,
      'kops-controller',
      ecKey,
      { name: 'kops-controller.internal.c.example.com' },
      { now, reserved },
    );
    assert.deepEqual(controller.altNames.dnsNames, ['kops-controller.internal.c.example.com']);
  });
});
