import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseConfigText } from './loader.ts';
import { clientRenewalsOf } from './schema.ts';

const base = ['clusterName: c.example.com'];

function load(...lines: string[]) {
  return parseConfigText([...base, ...lines].join('\n'));
}

describe('csrApprover.clientRenewals', () => {
  test('approve and leave are read as they are written, on any cloud', () => {
    for (const cloud of ['aws', 'gce', 'metal', 'hetzner']) {
      for (const mode of ['approve', 'leave'] as const) {
        const config = load(`cloud: ${cloud}`, 'csrApprover:', `  clientRenewals: ${mode}`);
        assert.equal(config.csrApprover.clientRenewals, mode);
        assert.equal(clientRenewalsOf(config), mode, `${cloud}: the setting wins over the default`);
      }
    }
  });

  test('any other value is refused at load, naming the key and the two values', () => {
    for (const value of ['deny', 'Approve', 'true', '""', '[approve]']) {
      assert.throws(
        () => load('cloud: gce', 'csrApprover:', `  clientRenewals: ${value}`),
        (err: Error) => {
          assert.match(err.message, /csrApprover\.clientRenewals: .*expected one of "approve"\|"leave"/);
          return true;
        },
        value,
      );
    }
  });

  test('unset, it is approve only where node names are never reused (AWS with instance-id names)', () => {
    const awsServer = (...aws: string[]) => [
      'server:',
      '  provider:',
      '    aws:',
      '      nodesRoles: [nodes.c.example.com]',
      ...aws.map((line) => `      ${line}`),
    ];
    const cases: [string, string[], 'approve' | 'leave'][] = [
      ['aws, no server section (instance-id names, the AWS default)', ['cloud: aws'], 'approve'],
      ['aws with instance-id names', ['cloud: aws', ...awsServer()], 'approve'],
      [
        'aws, useIPBasedNodeNames: false',
        ['cloud: aws', ...awsServer('useIPBasedNodeNames: false')],
        'approve',
      ],
      ['aws with IP-based names', ['cloud: aws', ...awsServer('useIPBasedNodeNames: true')], 'leave'],
      ['aws with Cluster API machines', ['cloud: aws', 'capi:', '  enabled: true'], 'leave'],
      ['gce (instances are named, MIGs recreate under the name)', ['cloud: gce'], 'leave'],
      ['metal (host names)', ['cloud: metal'], 'leave'],
      ['azure', ['cloud: azure'], 'leave'],
      ['hetzner', ['cloud: hetzner'], 'leave'],
      ['digitalocean', ['cloud: digitalocean'], 'leave'],
      ['linode', ['cloud: linode'], 'leave'],
      ['openstack', ['cloud: openstack'], 'leave'],
      ['scaleway', ['cloud: scaleway'], 'leave'],
    ];
    for (const [what, lines, expected] of cases) {
      const config = load(...lines);
      assert.equal(config.csrApprover.clientRenewals, undefined, what);
      assert.equal(clientRenewalsOf(config), expected, what);
    }
  });
});
