import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { exitCodeOf } from '../../errors.ts';
import { buildCsrPem, type CsrContent } from '../../pki/csr-build.ts';
import { generateKey } from '../../pki/keys.ts';
import { assessCsr, kubeletClientSigner, kubeletServingSigner } from './checks.ts';
import type { CsrRecord } from './csr-record.ts';
import { assessResolution, servingPolicyOf } from './serving-policy.ts';

const node = 'node-a';
const user = `system:node:${node}`;

function servingRecord(content: Partial<CsrContent>, overrides: Partial<CsrRecord> = {}): CsrRecord {
  const pem = buildCsrPem(generateKey(), {
    subject: { commonName: user, organizations: ['system:nodes'] },
    ...content,
  });
  return {
    name: 'csr-1',
    resourceVersion: '1',
    signerName: kubeletServingSigner,
    username: user,
    groups: ['system:nodes', 'system:authenticated'],
    usages: ['digital signature', 'server auth'],
    request: Buffer.from(pem).toString('base64'),
    decided: false,
    issued: false,
    ...overrides,
  };
}

const named = { dnsNames: ['node-a.nodes.example.com'], ipAddresses: ['10.0.0.5'] };

function verdictOf(record: CsrRecord, settings: Parameters<typeof servingPolicyOf>[0]) {
  return assessCsr(record, servingPolicyOf(settings));
}

function deniedFor(record: CsrRecord, settings: Parameters<typeof servingPolicyOf>[0]) {
  const assessment = verdictOf(record, settings);
  assert.equal(assessment.action, 'deny', JSON.stringify(assessment));
  return assessment as { reason: string; message: string };
}

describe('serving policy: the settings of kubelet-csr-approver', () => {
  test('no settings: today’s behaviour, every well-formed serving request goes on to the cloud check', () => {
    assert.equal(
      verdictOf(servingRecord(named, { expirationSeconds: 10 * 365 * 86_400 }), {}).action,
      'verify-instance',
    );
  });

  test('dnsNamePattern: a name that does not match it in full is denied, naming it', () => {
    const settings = { dnsNamePattern: '[a-z0-9-]+\\.nodes\\.example\\.com' };
    assert.equal(verdictOf(servingRecord(named), settings).action, 'verify-instance');
    const { reason, message } = deniedFor(servingRecord({ dnsNames: ['node-a.example.org'] }), settings);
    assert.equal(reason, 'DnsNameNotAllowed');
    assert.match(message, /node-a\.example\.org does not match the allowed DNS name pattern/);
    // Matched in full: an unanchored regexp (kubelet-csr-approver's) would take a suffix or a prefix.
    for (const name of ['node-a.nodes.example.com.attacker.net', 'evil.node-a.nodes.example.com.x']) {
      assert.equal(
        deniedFor(servingRecord({ dnsNames: [name] }), settings).reason,
        'DnsNameNotAllowed',
        name,
      );
    }
    // Requests with addresses only have no name to match.
    assert.equal(verdictOf(servingRecord({ ipAddresses: ['10.0.0.5'] }), settings).action, 'verify-instance');
  });

  test('ipPrefixes: an address outside every range is denied; IPv4 and IPv6 ranges both work', () => {
    const settings = { ipPrefixes: ['10.0.0.0/16', '2001:db8::/64'] };
    assert.equal(
      verdictOf(servingRecord({ ipAddresses: ['10.0.255.1', '2001:db8::5'] }), settings).action,
      'verify-instance',
    );
    for (const address of ['10.1.0.1', '2001:db8:1::5', '192.168.0.1']) {
      const { reason, message } = deniedFor(servingRecord({ ipAddresses: ['10.0.0.5', address] }), settings);
      assert.equal(reason, 'IpAddressNotAllowed', address);
      assert.match(message, new RegExp(`${address.replace(/\./g, '\\.')} is not in the allowed IP ranges`));
    }
  });

  test('maxExpiration: a request asking for longer is denied, as kubelet-csr-approver does; at or under it, or unset, passes', () => {
    const settings = { maxExpiration: 86_400_000 };
    const { reason, message } = deniedFor(servingRecord(named, { expirationSeconds: 86_401 }), settings);
    assert.equal(reason, 'ExpirationTooLong');
    assert.match(message, /asks for 86401 s; at most 86400 s is allowed/);
    assert.equal(
      verdictOf(servingRecord(named, { expirationSeconds: 86_400 }), settings).action,
      'verify-instance',
    );
    assert.equal(verdictOf(servingRecord(named), settings).action, 'verify-instance');
  });

  test('client renewals are not held to the serving settings', () => {
    const client = servingRecord(
      {},
      {
        signerName: kubeletClientSigner,
        usages: ['digital signature', 'client auth'],
        expirationSeconds: 10 ** 8,
      },
    );
    assert.equal(
      verdictOf(client, { dnsNamePattern: 'x', ipPrefixes: ['10.0.0.0/8'], maxExpiration: 600_000 }).action,
      'verify-instance',
    );
  });

  test('bad settings are one clear input error naming the setting', () => {
    const cases: [Parameters<typeof servingPolicyOf>[0], RegExp][] = [
      [{ dnsNamePattern: '(' }, /^csrApprover\.serving\.dnsNamePattern: "\(" is not a regular expression/],
      [{ ipPrefixes: ['10.0.0.0'] }, /^csrApprover\.serving\.ipPrefixes: "10\.0\.0\.0" is not an IP range/],
      [
        { ipPrefixes: ['10.0.0.0/33'] },
        /^csrApprover\.serving\.ipPrefixes: "10\.0\.0\.0\/33" is not an IP range/,
      ],
      [{ maxExpiration: 599_000 }, /^csrApprover\.serving\.maxExpiration: must be at least 10m/],
    ];
    for (const [settings, message] of cases) {
      assert.throws(
        () => servingPolicyOf(settings),
        (err: Error) => exitCodeOf(err) === 65 && message.test(err.message),
        JSON.stringify(settings),
      );
    }
  });
});

describe('serving policy: names must resolve', () => {
  const request = { nodeName: node, serving: true, dnsNames: ['node-a.nodes.example.com'], ipAddresses: [] };

  test('off by default: nothing is looked up', () => {
    assert.equal(servingPolicyOf({}).namesMustResolve, false);
  });

  test('a name that does not resolve is denied', () => {
    const verdict = assessResolution(
      request,
      new Map([['node-a.nodes.example.com', undefined]]),
      servingPolicyOf({ namesMustResolve: true }),
    );
    assert.equal(verdict?.action, 'deny');
    assert.equal(verdict?.reason, 'NameDoesNotResolve');
    assert.match(verdict?.message ?? '', /node-a\.nodes\.example\.com does not resolve/);
  });

  test('a name resolving outside the allowed IP ranges is denied; inside, it passes', () => {
    const policy = servingPolicyOf({ namesMustResolve: true, ipPrefixes: ['10.0.0.0/16'] });
    const outside = assessResolution(
      request,
      new Map([['node-a.nodes.example.com', ['10.0.0.5', '198.51.100.7']]]),
      policy,
    );
    assert.equal(outside?.reason, 'ResolvedAddressNotAllowed');
    assert.match(
      outside?.message ?? '',
      /node-a\.nodes\.example\.com resolves to 198\.51\.100\.7, which is not in the allowed IP ranges/,
    );
    assert.equal(
      assessResolution(request, new Map([['node-a.nodes.example.com', ['10.0.0.5']]]), policy),
      undefined,
    );
  });
});
