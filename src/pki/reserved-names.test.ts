import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { RequestRejectedError } from './csr.ts';
import {
  assertNoReservedNames,
  defaultReservedNames,
  firstServiceIp,
  reservedDnsNameProblem,
  reservedIpProblem,
  reservedNames,
} from './reserved-names.ts';

describe('reserved names', () => {
  test("the service IP is the first address of the service range, as kOps' WellKnownServiceIP", () => {
    assert.equal(firstServiceIp('100.64.0.0/13'), '100.64.0.1');
    assert.equal(firstServiceIp('10.96.0.0/12'), '10.96.0.1');
    // Host bits set in the range are masked off first.
    assert.equal(firstServiceIp('10.100.7.9/16'), '10.100.0.1');
    assert.equal(firstServiceIp('fd00:5e4f:ce::/108'), 'fd00:5e4f:ce::1');
    for (const bad of ['10.0.0.0', '10.0.0.0/33', '10.0.0.0/32', 'x/8', '::/128', '']) {
      assert.throws(() => firstServiceIp(bad), InvalidInputError, bad);
    }
  });

  test("without cluster facts: the kubernetes service's names and both common service IPs", () => {
    assert.deepEqual([...defaultReservedNames.dnsNames].sort(), [
      'kubernetes',
      'kubernetes.default',
      'kubernetes.default.svc',
      'kubernetes.default.svc.cluster.local',
    ]);
    assert.deepEqual([...defaultReservedNames.ipAddresses].sort(), ['10.96.0.1', '100.64.0.1']);
  });

  test("with cluster facts: the cluster's domain, API names, service range and API server hosts", () => {
    const reserved = reservedNames({
      clusterName: 'c.example.com',
      clusterDomain: 'corp.local',
      serviceClusterIPRanges: ['172.30.0.0/16', 'fd00::/108'],
      apiServerHosts: ['API.Example.COM.', '203.0.113.10', '[2001:db8::10]'],
    });
    for (const name of [
      'kubernetes.default.svc.corp.local',
      'kubernetes.default.svc.cluster.local',
      'api.c.example.com',
      'api.internal.c.example.com',
      'kops-controller.internal.c.example.com',
      'api.example.com',
    ]) {
      assert.ok(reserved.dnsNames.has(name), name);
    }
    assert.deepEqual([...reserved.ipAddresses].sort(), [
      '172.30.0.1',
      '2001:db8::10',
      '203.0.113.10',
      'fd00::1',
    ]);
    // A known range replaces the defaults.
    assert.equal(reservedIpProblem('10.96.0.1', reserved), undefined);
  });

  test('names match as TLS clients match them: any case, a trailing dot, IPv4-mapped IPv6, an address written as a name', () => {
    const reserved = defaultReservedNames;
    for (const name of [
      'kubernetes.default.svc',
      'KUBERNETES.default.Svc',
      'kubernetes.default.svc.',
      '10.96.0.1',
    ]) {
      assert.ok(reservedDnsNameProblem(name, reserved), name);
    }
    for (const address of ['10.96.0.1', '::ffff:10.96.0.1', '::ffff:a60:1', '100.64.0.1']) {
      assert.ok(reservedIpProblem(address, reserved), address);
    }
    assert.match(reservedDnsNameProblem('*.example.com', reserved) ?? '', /wildcard/);
    assert.match(reservedDnsNameProblem('a.*.example.com', reserved) ?? '', /wildcard/);
    for (const name of ['node-a.internal', 'kubernetes.example.com', 'default.svc']) {
      assert.equal(reservedDnsNameProblem(name, reserved), undefined, name);
    }
    for (const address of ['10.96.0.2', '100.64.0.2', '::1']) {
      assert.equal(reservedIpProblem(address, reserved), undefined, address);
    }
  });

  test('the refusal is a RequestRejectedError (400 reserved-name) that names what and where', () => {
    assert.throws(
      () =>
        assertNoReservedNames(
          [
            { what: 'node name', dnsNames: ['node-a'] },
            {
              what: 'kubelet-server: subjectAltName',
              dnsNames: ['node-a.internal'],
              ipAddresses: ['10.96.0.1'],
            },
          ],
          defaultReservedNames,
        ),
      (err: unknown) => {
        assert.ok(err instanceof RequestRejectedError);
        assert.equal(err.reason, 'reserved-name');
        assert.equal(err.kind, 'invalid');
        assert.equal(err.details?.['reason'], 'reserved-name');
        assert.match(
          err.message,
          /^kubelet-server: subjectAltName: 10\.96\.0\.1 is an address of the cluster's API server/,
        );
        return true;
      },
    );
    assertNoReservedNames(
      [{ what: 'fine', dnsNames: ['node-a'], ipAddresses: ['10.0.0.1'] }],
      defaultReservedNames,
    );
  });
});
