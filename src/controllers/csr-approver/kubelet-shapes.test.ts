/**
 * The CSRs a real kubelet (1.2x–1.3x) sends, built with our own values in exactly the shape its code
 * builds them, through the approver's checks (assessCsr, then assessInstance). Sources read
 * (kubernetes/kubernetes):
 * - pkg/kubelet/certificate/kubelet.go: newGetTemplateFn (subject CN=system:node:<name>,
 *   O=[system:nodes]; DNSNames and IPAddresses from addressesToHostnamesAndIPs: Hostname addresses
 *   that parse as an IP become IP SANs, other Hostname / InternalDNS / ExternalDNS addresses DNS SANs,
 *   InternalIP / ExternalIP that parse IP SANs; deduplicated by their text, DNS names sorted, IPs
 *   sorted by String(); no expirationSeconds), NewKubeletClientCertificateManager (subject only, no SAN);
 * - staging/src/k8s.io/client-go/util/certificate/certificate_manager.go: generateCSR (an ECDSA P-256
 *   key, every rotation) and DefaultKubeletServingGetUsages / DefaultKubeletClientGetUsages (RSA key:
 *   digital signature, key encipherment, server|client auth; any other: without key encipherment;
 *   kubelets before GetUsages always sent key encipherment, with an ECDSA key too);
 * - staging/src/k8s.io/client-go/util/cert/csr.go MakeCSRFromTemplate: x509.CreateCertificateRequest,
 *   ECDSAWithSHA256 for P-256; Go writes the subject O before CN as PrintableString, IPv4 SANs as 4
 *   bytes and IPv6 as 16, DNS SANs before IP SANs, and no attributes at all without SANs;
 * - staging/src/k8s.io/client-go/util/certificate/csr/csr.go RequestCertificate: signerName, usages,
 *   expirationSeconds only when a lifetime is asked for (the kubelet asks none); the API server stamps
 *   username system:node:<name> and groups [system:nodes, system:authenticated].
 * The CSRs are made by openssl with a config in Go's shape (string_mask=default: PrintableString).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { InstanceAddress, NodeIdentity } from '../../cloud/types.ts';
import { openssl, scratchFile } from '../../testing/openssl.ts';
import {
  assessCsr,
  assessInstance,
  type InstanceCheck,
  kubeletClientSigner,
  kubeletServingSigner,
} from './checks.ts';
import type { CsrRecord } from './csr-record.ts';

const node = 'i-0f1e2d3c4b5a69788';
const user = `system:node:${node}`;

const ecKey = openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256']);
const rsaKey = openssl(['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048']);

/** A CSR as Go's x509.CreateCertificateRequest writes the kubelet's template. */
function kubeletCsr(key: string, sans: { dns?: string[]; ip?: string[] } = {}): string {
  const names = [...(sans.dns ?? []).map((d) => `DNS:${d}`), ...(sans.ip ?? []).map((ip) => `IP:${ip}`)];
  const config = [
    '[req]',
    'distinguished_name = dn',
    'prompt = no',
    'string_mask = default',
    '[dn]',
    'O = system:nodes',
    `CN = ${user}`,
    '[ext]',
    ...(names.length ? [`subjectAltName = ${names.join(',')}`] : []),
  ].join('\n');
  const args = [
    'req',
    '-new',
    '-sha256',
    '-key',
    scratchFile('key.pem', key),
    '-config',
    scratchFile('req.cnf', config),
  ];
  return openssl(names.length ? [...args, '-reqexts', 'ext'] : args);
}

function record(pem: string, spec: Partial<CsrRecord>): CsrRecord {
  return {
    name: 'csr-8x2kq',
    resourceVersion: '41',
    signerName: kubeletServingSigner,
    username: user,
    groups: ['system:nodes', 'system:authenticated'],
    usages: ['digital signature', 'server auth'],
    request: Buffer.from(pem).toString('base64'),
    decided: false,
    issued: false,
    ...spec,
  };
}

function identityWith(addresses: InstanceAddress[]): NodeIdentity {
  return {
    providerID: `aws:///eu-west-1b/${node}`,
    instanceId: node,
    instanceGroup: 'nodes-eu-west-1b',
    state: 'running',
    addresses,
  };
}

function verify(csr: CsrRecord): InstanceCheck {
  const assessment = assessCsr(csr);
  assert.equal(assessment.action, 'verify-instance', JSON.stringify(assessment));
  return assessment as InstanceCheck;
}

describe('the Go shape of the kubelet CSRs', () => {
  test('Go writes the subject as PrintableString, O before CN, and no attributes without SANs', () => {
    const client = openssl(['asn1parse'], kubeletCsr(ecKey));
    assert.match(client, /PRINTABLESTRING\s+:system:nodes[\s\S]*PRINTABLESTRING\s+:system:node:/);
    assert.match(client, /cont \[ 0 \]\s*$/m);
  });
});

describe('client renewals (kube-apiserver-client-kubelet)', () => {
  test('an ECDSA P-256 renewal, with or without key encipherment (older kubelets), goes to the instance check', () => {
    const pem = kubeletCsr(ecKey);
    for (const usages of [
      ['digital signature', 'client auth'],
      ['digital signature', 'key encipherment', 'client auth'],
    ]) {
      const check = verify(record(pem, { signerName: kubeletClientSigner, usages }));
      assert.deepEqual(check, {
        action: 'verify-instance',
        nodeName: node,
        serving: false,
        dnsNames: [],
        ipAddresses: [],
      });
      assert.equal(
        assessInstance(check, identityWith([{ type: 'InternalIP', address: '10.1.2.3' }])).action,
        'approve',
      );
    }
  });

  test('an RSA renewal with key encipherment goes to the instance check', () => {
    const check = verify(
      record(kubeletCsr(rsaKey), {
        signerName: kubeletClientSigner,
        usages: ['digital signature', 'key encipherment', 'client auth'],
      }),
    );
    assert.equal(check.serving, false);
  });
});

describe('serving requests (kubelet-serving)', () => {
  const cloud: InstanceAddress[] = [
    { type: 'InternalDNS', address: 'ip-10-1-2-3.eu-west-1.compute.internal' },
    { type: 'ExternalIP', address: '2a05:d018:0000:0000:0000:0000:0000:00a1' },
    { type: 'Hostname', address: 'ip-10-1-2-3.eu-west-1.compute.internal' },
    { type: 'InternalIP', address: '10.1.2.3' },
    { type: 'ExternalDNS', address: 'ec2-52-1-2-3.eu-west-1.compute.amazonaws.com' },
    { type: 'ExternalIP', address: '52.1.2.3' },
  ];
  const sans = {
    // Sorted as the kubelet sorts them: DNS names by text, IPs by their String() form.
    dns: ['ec2-52-1-2-3.eu-west-1.compute.amazonaws.com', 'ip-10-1-2-3.eu-west-1.compute.internal'],
    ip: ['10.1.2.3', '2a05:d018::a1', '52.1.2.3'],
  };

  for (const [key, keyName, usages] of [
    [ecKey, 'ECDSA', ['digital signature', 'server auth']],
    [ecKey, 'ECDSA (older kubelets)', ['digital signature', 'key encipherment', 'server auth']],
    [rsaKey, 'RSA', ['digital signature', 'key encipherment', 'server auth']],
  ] as const) {
    test(`${keyName} with [${usages.join(', ')}]: exactly the cloud's names, in the kubelet's order, are approved`, () => {
      const check = verify(record(kubeletCsr(key, sans), { usages: [...usages] }));
      assert.deepEqual(check.dnsNames, sans.dns);
      // IPv4 as 4 bytes, IPv6 as 16, read back in RFC 5952 form.
      assert.deepEqual(check.ipAddresses, sans.ip);
      assert.equal(assessInstance(check, identityWith(cloud)).action, 'approve');
    });
  }

  test('the same IP spelt twice by the node (deduplicated by text, not value) is approved', () => {
    const check = verify(
      record(kubeletCsr(ecKey, { dns: sans.dns, ip: ['10.1.2.3', '10.1.2.3', '52.1.2.3'] }), {}),
    );
    assert.equal(assessInstance(check, identityWith(cloud)).action, 'approve');
  });

  test('a DNS-only request (AllowDNSOnlyNodeCSR) is assessed like any other', () => {
    const check = verify(record(kubeletCsr(ecKey, { dns: ['ip-10-1-2-3.eu-west-1.compute.internal'] }), {}));
    assert.equal(assessInstance(check, identityWith(cloud)).action, 'approve');
  });

  test('a Hostname address that is an IP is requested as an IP SAN, and approved as the cloud names it', () => {
    // addressesToHostnamesAndIPs: a Hostname that parses as an IP goes to IPAddresses.
    const metal: InstanceAddress[] = [
      { type: 'InternalIP', address: '192.168.10.21' },
      { type: 'Hostname', address: '192.168.10.22' },
    ];
    const check = verify(record(kubeletCsr(ecKey, { ip: ['192.168.10.21', '192.168.10.22'] }), {}));
    assert.equal(assessInstance({ ...check, nodeName: node }, identityWith(metal)).action, 'approve');
  });

  test('an IPv4-mapped cloud address matches the 4-byte SAN Go writes for it', () => {
    // Go's marshalSANs writes ip.To4() when it is an IPv4 address, ::ffff:a.b.c.d included.
    const check = verify(record(kubeletCsr(ecKey, { ip: ['10.1.2.3'] }), {}));
    const mapped = identityWith([{ type: 'InternalIP', address: '::ffff:10.1.2.3' }]);
    assert.equal(assessInstance(check, mapped).action, 'approve');
  });

  test('a cloud address that is no IP is skipped (the kubelet skips it too), not a fault', () => {
    const odd = [
      ...cloud,
      { type: 'InternalIP', address: '' } as const,
      { type: 'ExternalIP', address: 'n/a' } as const,
    ];
    const check = verify(record(kubeletCsr(ecKey, sans), {}));
    assert.equal(assessInstance(check, identityWith(odd)).action, 'approve');
  });

  test('a name or address the cloud does not confirm is denied, however the rest matches', () => {
    for (const extra of [
      { dns: ['kubernetes.default.svc'] },
      { ip: ['10.1.2.4'] },
      { ip: ['2a05:d018::a2'] },
    ]) {
      const check = verify(
        record(
          kubeletCsr(ecKey, {
            dns: [...sans.dns, ...(extra.dns ?? [])],
            ip: [...sans.ip, ...(extra.ip ?? [])],
          }),
          {},
        ),
      );
      assert.equal(assessInstance(check, identityWith(cloud)).reason, 'SubjectAltNamesNotOfInstance');
    }
  });

  test('client usages on a serving request are denied (the set compare is exact)', () => {
    // The API server refuses duplicate usages (pkg/apis/certificates/validation), so a set compare is exact.
    const pem = kubeletCsr(ecKey, sans);
    const denied = assessCsr(
      record(pem, { usages: ['digital signature', 'key encipherment', 'client auth'] }),
    );
    assert.equal(denied.action, 'deny');
  });
});
