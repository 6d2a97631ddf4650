import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { parseConfig } from '../config/loader.ts';
import { reservedDnsNameProblem, reservedIpProblem } from '../pki/reserved-names.ts';
import { parseCluster } from '../statestore/kops-types.ts';
import { clusterApiNamesOf, clusterSpecApiNames, loadReservedNames } from './reserved-names.ts';

const v1alpha2 = `
apiVersion: kops.k8s.io/v1alpha2
kind: Cluster
metadata:
  name: c.example.com
spec:
  cloudProvider: aws
  clusterDNSDomain: corp.local
  serviceClusterIPRange: 100.64.0.0/13
  masterPublicName: api.c.example.com
  additionalSans:
    - k8s.example.org
    - 198.51.100.7
`;

const v1alpha3 = `
apiVersion: kops.k8s.io/v1alpha3
kind: Cluster
metadata:
  name: d.example.com
spec:
  cloudProvider:
    aws: {}
  networking:
    serviceClusterIPRange: 172.30.0.0/16
  api:
    publicName: kube.d.example.com
    additionalSANs:
      - 2001:db8::443
`;

describe('the reserved names of a cluster', () => {
  test('read from a kops Cluster spec in either API version', () => {
    assert.deepEqual(clusterSpecApiNames(parseCluster(v1alpha2)), {
      clusterName: 'c.example.com',
      clusterDomain: 'corp.local',
      serviceClusterIPRanges: ['100.64.0.0/13'],
      apiServerHosts: ['api.c.example.com', 'k8s.example.org', '198.51.100.7'],
    });
    assert.deepEqual(clusterSpecApiNames(parseCluster(v1alpha3)), {
      clusterName: 'd.example.com',
      serviceClusterIPRanges: ['172.30.0.0/16'],
      apiServerHosts: ['kube.d.example.com', '2001:db8::443'],
    });
  });

  test('the API server URLs count by host; a loopback URL names no API server', () => {
    const names = clusterApiNamesOf(
      { clusterName: 'c.example.com' },
      {
        apiServers: [
          'https://api.internal.c.example.com',
          'https://203.0.113.5:6443',
          'https://[2001:db8::5]:443',
        ],
        kubeApiServer: 'https://127.0.0.1:41234',
      },
    );
    assert.deepEqual(names, {
      clusterName: 'c.example.com',
      apiServerHosts: ['api.internal.c.example.com', '203.0.113.5', '2001:db8::5'],
    });
  });

  describe('loaded when the bootstrap server starts', () => {
    let dir: string;
    before(async () => {
      dir = await mkdtemp(join(tmpdir(), 'reserved-names-'));
      await writeFile(join(dir, 'config'), v1alpha2);
    });
    after(() => rm(dir, { recursive: true, force: true }));

    test('from the state store, the config and the kubeconfig: the service IP of the real range', async () => {
      const config = parseConfig({ clusterName: 'c.example.com', cloud: 'aws', configBase: `file://${dir}` });
      const kubeConfig = new KubeConfig();
      kubeConfig.loadFromClusterAndUser(
        { name: 'in-cluster', server: 'https://100.64.0.1:443', skipTLSVerify: false },
        { name: 'sa' },
      );
      const reserved = await loadReservedNames(config, {
        apiServers: ['https://api.internal.c.example.com'],
        kubeConfig,
      });
      for (const name of [
        'kubernetes.default.svc.corp.local',
        'k8s.example.org',
        'kops-controller.internal.c.example.com',
      ]) {
        assert.ok(reservedDnsNameProblem(name, reserved), name);
      }
      assert.ok(reservedIpProblem('100.64.0.1', reserved));
      assert.ok(reservedIpProblem('198.51.100.7', reserved));
      // The cluster's range is known, so kubeadm's default is not reserved.
      assert.equal(reservedIpProblem('10.96.0.1', reserved), undefined);
    });

    test('a Cluster that cannot be read leaves the defaults and a warning, not a failure', async () => {
      const warnings: string[] = [];
      const logger = {
        warn: (_fields: unknown, message: string) => warnings.push(message),
        child: () => logger,
      } as never;
      const config = parseConfig({
        clusterName: 'e.example.com',
        cloud: 'aws',
        configBase: `file://${dir}/missing`,
      });
      const reserved = await loadReservedNames(config, { logger });
      assert.ok(reservedIpProblem('10.96.0.1', reserved));
      assert.ok(reservedIpProblem('100.64.0.1', reserved));
      assert.ok(reservedDnsNameProblem('api.internal.e.example.com', reserved));
      assert.equal(warnings.length, 1);
      assert.match(warnings[0] ?? '', /cannot read the kops Cluster/);
    });
  });
});
