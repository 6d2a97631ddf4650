import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { ConfigError } from '../errors.ts';
import { loadConfigFile, parseConfig, parseConfigText } from './loader.ts';

/** The config kops generates for its minimal-1.33 AWS integration test, byte for byte. */
const kopsAwsConfig =
  '{"clusterName":"minimal.example.com","cloud":"aws","configBase":"memfs://tests/minimal.example.com","secretStore":"memfs://tests/minimal.example.com/secrets","server":{"Listen":":3988","provider":{"aws":{"nodesRoles":["nodes.minimal.example.com"],"Region":"us-test-1"}},"serverKeyPath":"/etc/kubernetes/kops-controller/pki/kops-controller.key","serverCertificatePath":"/etc/kubernetes/kops-controller/pki/kops-controller.crt","caBasePath":"/etc/kubernetes/kops-controller/pki","signingCAs":["kubernetes-ca"],"certNames":["kubelet","kubelet-server","kube-proxy"]}}';

function configErrorMatching(pattern: RegExp) {
  return (err: unknown) => err instanceof ConfigError && pattern.test(err.message);
}

describe('config loader', () => {
  test('accepts the JSON kops generates for AWS, capitalised keys included', () => {
    const config = parseConfigText(kopsAwsConfig);
    assert.equal(config.clusterName, 'minimal.example.com');
    assert.equal(config.server?.Listen, ':3988');
    assert.equal(config.server?.provider.aws?.Region, 'us-test-1');
    assert.deepEqual(config.server?.provider.aws?.nodesRoles, ['nodes.minimal.example.com']);
    assert.deepEqual(config.server?.certNames, ['kubelet', 'kubelet-server', 'kube-proxy']);
  });

  test('accepts the GCE provider block with MaxTimeSkew', () => {
    const config = parseConfig({
      clusterName: 'minimal-gce.example.com',
      cloud: 'gce',
      server: {
        Listen: ':3988',
        provider: {
          gce: {
            projectID: 'testproject',
            region: 'us-test1',
            clusterName: 'minimal-gce.example.com',
            MaxTimeSkew: 300,
          },
        },
      },
    });
    assert.equal(config.server?.provider.gce?.MaxTimeSkew, 300);
  });

  test('accepts the server.useInstanceIDForNodeName of older kops versions (true: instance-id names)', () => {
    const config = parseConfig({
      clusterName: 'minimal.example.com',
      cloud: 'aws',
      discovery: { enabled: false },
      server: { useInstanceIDForNodeName: true, provider: { aws: { nodesRoles: ['nodes'] } } },
    });
    assert.equal(config.server?.useInstanceIDForNodeName, true);
    assert.throws(
      () =>
        parseConfig({
          clusterName: 'a.example.com',
          cloud: 'aws',
          server: { useInstanceIDForNodeName: true, provider: { aws: { useIPBasedNodeNames: true } } },
        }),
      configErrorMatching(
        /server\.useInstanceIDForNodeName: contradicts server\.provider\.aws\.useIPBasedNodeNames/,
      ),
    );
    assert.throws(
      () =>
        parseConfig({ clusterName: 'a.example.com', cloud: 'aws', discovery: { enabled: true, extra: 1 } }),
      configErrorMatching(/discovery\.extra: unknown field/),
    );
  });

  test('nothing is accepted and then ignored: each setting this controller cannot act on is refused, named', () => {
    const base = { clusterName: 'a.example.com', cloud: 'aws' };
    for (const [raw, refusal] of [
      [
        { discovery: { enabled: true } },
        /^config: discovery\.enabled: gossip discovery .* is not implemented/,
      ],
      [{ cacheNodeidentityInfo: false }, /^config: cacheNodeidentityInfo: false cannot be honoured/],
      [
        { server: { useInstanceIDForNodeName: false } },
        /^config: server\.useInstanceIDForNodeName: false .* is not supported/,
      ],
    ] as const) {
      assert.throws(
        () => parseConfig({ ...base, ...raw }),
        (err: Error) => {
          assert.match(err.message, refusal);
          assert.equal(err.message.split('\n').length, 1, 'one line');
          return true;
        },
      );
    }
    // What kops writes when the features are off, and the settings this controller does act on, load.
    const config = parseConfig({
      ...base,
      capi: { enabled: true },
      cacheNodeidentityInfo: true,
      enableCloudIPAM: true,
      server: { pki: {} },
    });
    assert.equal(config.enableCloudIPAM, true);
  });

  test('bootstrap.apiServers: https URLs only, at least one', () => {
    const config = parseConfig({
      clusterName: 'a.example.com',
      cloud: 'aws',
      bootstrap: { apiServers: ['https://api.a.example.com', 'https://10.0.0.10:6443'] },
    });
    assert.deepEqual(config.bootstrap.apiServers, ['https://api.a.example.com', 'https://10.0.0.10:6443']);
    for (const bad of [['http://api.a.example.com'], ['api.a.example.com'], []]) {
      assert.throws(
        () => parseConfig({ clusterName: 'a.example.com', cloud: 'aws', bootstrap: { apiServers: bad } }),
        configErrorMatching(/bootstrap\.apiServers/),
      );
    }
  });

  test('fills in leader-election and metrics defaults', () => {
    const config = parseConfig({ clusterName: 'c.example.com', cloud: 'metal' });
    assert.deepEqual(config.leaderElection, {
      enabled: true,
      namespace: 'kube-system',
      name: 'kops-controller-leader',
      leaseDuration: 15_000,
      renewDeadline: 10_000,
      retryPeriod: 2_000,
    });
    assert.equal(config.metrics.listen, ':3987');
  });

  test('bootstrap.nodeGuard: watch by default, api on request, anything else refused with the choices', () => {
    assert.equal(parseConfig({ clusterName: 'c', cloud: 'metal' }).bootstrap.nodeGuard, 'watch');
    assert.equal(
      parseConfig({ clusterName: 'c', cloud: 'metal', bootstrap: { nodeGuard: 'api' } }).bootstrap.nodeGuard,
      'api',
    );
    assert.throws(
      () => parseConfig({ clusterName: 'c', cloud: 'metal', bootstrap: { nodeGuard: 'cache' } }),
      configErrorMatching(/bootstrap\.nodeGuard: .*"watch".*"api"/),
    );
  });

  test('stateStore.pollInterval: 5s by default, a Go duration between 1s and 1h', () => {
    assert.equal(parseConfig({ clusterName: 'c', cloud: 'aws' }).stateStore.pollInterval, 5_000);
    const config = parseConfigText('clusterName: c\ncloud: aws\nstateStore:\n  pollInterval: 30s\n');
    assert.equal(config.stateStore.pollInterval, 30_000);
    for (const [pollInterval, ms] of [
      ['1s', 1_000],
      ['1h', 3_600_000],
    ] as const) {
      assert.equal(
        parseConfig({ clusterName: 'c', cloud: 'aws', stateStore: { pollInterval } }).stateStore.pollInterval,
        ms,
      );
    }
    for (const pollInterval of ['500ms', '2h', 0]) {
      assert.throws(
        () => parseConfig({ clusterName: 'c', cloud: 'aws', stateStore: { pollInterval } }),
        configErrorMatching(/stateStore\.pollInterval: must be between 1s and 1h/),
      );
    }
  });

  test('parses Go durations in YAML', () => {
    const config = parseConfigText(
      'clusterName: c\ncloud: aws\nleaderElection:\n  leaseDuration: 1m\n  renewDeadline: 40s\n  retryPeriod: 500ms\n',
    );
    assert.equal(config.leaderElection.leaseDuration, 60_000);
    assert.equal(config.leaderElection.retryPeriod, 500);
  });

  test('names the path of a wrongly typed field', () => {
    assert.throws(
      () =>
        parseConfig({ clusterName: 'c', cloud: 'aws', server: { provider: { aws: { nodesRoles: [7] } } } }),
      configErrorMatching(/server\.provider\.aws\.nodesRoles\[0\]: expected string, received number/),
    );
  });

  test('rejects unknown fields by path, so a typo never passes silently', () => {
    assert.throws(
      () => parseConfig({ clusterName: 'c', cloud: 'aws', server: { listen: ':1' } }),
      configErrorMatching(/server\.listen: unknown field/),
    );
  });

  test('rejects an unknown cloud and lists the valid ones', () => {
    assert.throws(
      () => parseConfig({ clusterName: 'c', cloud: 'vsphere' }),
      configErrorMatching(/cloud: .*"aws"/),
    );
  });

  test('requires clusterName', () => {
    assert.throws(() => parseConfig({ cloud: 'aws' }), configErrorMatching(/clusterName: expected string/));
  });

  test('rejects a bad listen address and a bad duration', () => {
    assert.throws(
      () => parseConfig({ clusterName: 'c', cloud: 'aws', server: { Listen: 'everywhere' } }),
      configErrorMatching(/server\.Listen: expected a listen address/),
    );
    assert.throws(
      () => parseConfig({ clusterName: 'c', cloud: 'aws', leaderElection: { leaseDuration: 'soon' } }),
      configErrorMatching(/leaderElection\.leaseDuration: invalid duration "soon"/),
    );
  });

  test('one line names every bad field of csrApprover.serving, even when one of them is of the wrong type', () => {
    const text = [
      'clusterName: c',
      'cloud: aws',
      'csrApprover:',
      '  serving:',
      '    dnsNamePattern: "["',
      '    ipPrefixes: [foo]',
      '    maxExpiration: banana',
    ].join('\n');
    assert.throws(
      () => parseConfigText(text, 'conf/csr.yaml'),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.doesNotMatch(err.message, /\n/);
        assert.match(err.message, /^conf\/csr\.yaml: /);
        assert.match(err.message, /csrApprover\.serving\.dnsNamePattern: "\[" is not a regular expression/);
        assert.match(err.message, /csrApprover\.serving\.ipPrefixes: "foo" is not an IP range/);
        assert.match(err.message, /csrApprover\.serving\.maxExpiration: invalid duration "banana"/);
        return true;
      },
    );
  });

  test('a listen address with a port above 65535 is refused at load, naming the file and the field', async () => {
    for (const [field, yaml] of [
      ['metrics.listen', 'metrics:\n  listen: ":99999"\n'],
      ['server.Listen', 'server:\n  Listen: 127.0.0.1:65536\n  provider:\n    aws: {}\n'],
    ] as const) {
      const dir = await mkdtemp(join(tmpdir(), 'kc-config-'));
      const path = join(dir, 'config.yaml');
      await writeFile(path, `clusterName: c\ncloud: aws\n${yaml}`);
      const port = field === 'metrics.listen' ? 99999 : 65536;
      await assert.rejects(loadConfigFile(path), (err) => {
        assert.ok(err instanceof ConfigError);
        assert.equal(err.message, `${path}: ${field}: port ${port} is out of range (0-65535)`);
        return true;
      });
    }
    for (const listen of [':0', ':65535', '[::1]:3987', '127.0.0.1:3987']) {
      assert.equal(
        parseConfig({ clusterName: 'c', cloud: 'aws', metrics: { listen } }).metrics.listen,
        listen,
      );
    }
  });

  test('a server section whose approval chain would be empty is refused, naming what to add', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kc-config-'));
    const path = join(dir, 'config.yaml');
    await writeFile(path, 'clusterName: c\ncloud: metal\nserver:\n  Listen: ":3988"\n');
    await assert.rejects(loadConfigFile(path), (err) => {
      assert.ok(err instanceof ConfigError);
      assert.equal(
        err.message,
        `${path}: server.provider: no approval policy is configured, so the bootstrap server would deny every node ` +
          '(kops refuses to start: "no verifiers"); set the cloud\'s provider as kops writes it ' +
          '(server.provider.aws, .gce, .hetzner, .openstack, .do, .scaleway, .azure or .linode), ' +
          'server.pki for kops metal, or bootstrap.policies (e.g. [{name: queue}] to approve each node by hand)',
      );
      return true;
    });
    assert.throws(
      () => parseConfigText('clusterName: c\ncloud: aws\nserver: {}\nbootstrap:\n  policies: []\n'),
      configErrorMatching(
        /^config: bootstrap\.policies: an empty chain denies every node; name at least one policy \(always-reject to deny every node on purpose\)$/,
      ),
    );
    // A provider, server.pki or a chain: accepted; without a server section nothing is served.
    for (const text of [
      'server:\n  provider:\n    hetzner: {}\n',
      'server:\n  pki: {}\n',
      'server: {}\nbootstrap:\n  policies: [{name: queue}]\n',
      'bootstrap:\n  policies: []\n',
      '',
    ]) {
      assert.equal(parseConfigText(`clusterName: c\ncloud: metal\n${text}`).cloud, 'metal', text);
    }
  });

  test('rejects leader-election timings that would let two leaders overlap', () => {
    assert.throws(
      () =>
        parseConfig({
          clusterName: 'c',
          cloud: 'aws',
          leaderElection: { leaseDuration: '5s', renewDeadline: '10s' },
        }),
      configErrorMatching(/leaderElection\.renewDeadline: must be shorter than 0\.9 × leaseDuration/),
    );
    // Shorter than leaseDuration but leaving the leader's components no time to stop before a standby
    // may take the lease: refused too.
    assert.throws(
      () =>
        parseConfig({
          clusterName: 'c',
          cloud: 'aws',
          leaderElection: { leaseDuration: '10s', renewDeadline: '9500ms', retryPeriod: '1s' },
        }),
      configErrorMatching(/leaderElection\.renewDeadline: must be shorter than 0\.9 × leaseDuration/),
    );
  });

  test('rejects a retryPeriod that would renew the lease in a tight loop, as client-go does', () => {
    // client-go refuses RetryPeriod < 1; 0 (or 1ns) made the leader write its Lease ~200 times a second.
    for (const retryPeriod of ['0s', '0', '1ns', '99ms']) {
      assert.throws(
        () => parseConfigText(`clusterName: c\ncloud: aws\nleaderElection:\n  retryPeriod: ${retryPeriod}\n`),
        (err: unknown) =>
          err instanceof ConfigError &&
          /leaderElection\.retryPeriod: must be at least 100ms/.test(err.message) &&
          !err.message.includes('\n'),
        retryPeriod,
      );
    }
    assert.equal(
      parseConfigText('clusterName: c\ncloud: aws\nleaderElection:\n  retryPeriod: 100ms\n').leaderElection
        .retryPeriod,
      100,
    );
    // client-go's NewLeaderElector: renewDeadline must exceed JitterFactor (1.2) × retryPeriod.
    for (const [renewDeadline, retryPeriod] of [
      ['10s', '10s'],
      ['6s', '5s'],
      ['1200ms', '1s'],
    ]) {
      assert.throws(
        () =>
          parseConfig({
            clusterName: 'c',
            cloud: 'aws',
            leaderElection: { renewDeadline, retryPeriod },
          }),
        configErrorMatching(
          /leaderElection\.retryPeriod: renewDeadline must be longer than 1\.2 × retryPeriod/,
        ),
        `${renewDeadline} / ${retryPeriod}`,
      );
    }
    const config = parseConfig({
      clusterName: 'c',
      cloud: 'aws',
      leaderElection: { renewDeadline: '1201ms', retryPeriod: '1s' },
    });
    assert.equal(config.leaderElection.renewDeadline, 1201);
  });

  test('bounds the leader-election timings and the deadlines of request-path calls, naming the key', () => {
    // Beyond 2^31-1 ms (24.8 days) Node fires a timer at once: 600h retryPeriods wrote the Lease in a loop.
    assert.throws(
      () =>
        parseConfig({
          clusterName: 'c',
          cloud: 'aws',
          leaderElection: { leaseDuration: '3000h', renewDeadline: '2000h', retryPeriod: '600h' },
        }),
      configErrorMatching(
        /leaderElection\.leaseDuration: must be at most 1h; leaderElection\.renewDeadline: must be at most 1h; leaderElection\.retryPeriod: must be at most 1h/,
      ),
    );
    const policies = [
      { name: 'aws', stsTimeout: '720h' },
      { name: 'hetzner', lookupTimeout: '5m1s' },
      { name: 'webhook', url: 'https://w', caFile: 'ca', certFile: 'c', keyFile: 'k', timeout: '720h' },
    ];
    for (const policy of policies) {
      const key = Object.keys(policy).find((k) => /[tT]imeout$/.test(k)) as string;
      assert.throws(
        () => parseConfig({ clusterName: 'c', cloud: 'aws', bootstrap: { policies: [policy] } }),
        configErrorMatching(new RegExp(`bootstrap\\.policies\\[0\\]\\.${key}: must be at most 5m`)),
        policy.name,
      );
    }
    const bounds = parseConfig({
      clusterName: 'c',
      cloud: 'aws',
      leaderElection: { leaseDuration: '1h', renewDeadline: '50m', retryPeriod: '10m' },
      bootstrap: { policies: [{ name: 'aws', stsTimeout: '5m' }] },
    });
    assert.equal(bounds.leaderElection.leaseDuration, 3_600_000);
  });

  test("renewal's unmarked is allow unless set; refuse is read; any other value is refused at load, naming the key", () => {
    const renewal = (spec: Record<string, unknown>) =>
      parseConfig({ clusterName: 'c', cloud: 'aws', bootstrap: { policies: [{ name: 'renewal', ...spec }] } })
        .bootstrap.policies?.[0];
    assert.deepEqual(renewal({}), { name: 'renewal', unmarked: 'allow' });
    assert.deepEqual(renewal({ unmarked: 'refuse' }), { name: 'renewal', unmarked: 'refuse' });
    for (const unmarked of ['deny', 'Refuse', true, '48h']) {
      assert.throws(
        () => renewal({ unmarked }),
        configErrorMatching(/bootstrap\.policies\[0\]\.unmarked: .*expected one of "allow"\|"refuse"/),
        String(unmarked),
      );
    }
  });

  test('bounds how old a proof may be, and kops’ MaxTimeSkew, at 15 minutes (a GCE token’s dates must stay inside its hour)', () => {
    for (const policy of [
      { name: 'aws', maxProofAge: '16m' },
      { name: 'gce', maxProofAge: '2h' },
      { name: 'azure', maxProofAge: '1h' },
    ]) {
      assert.throws(
        () => parseConfig({ clusterName: 'c', cloud: 'aws', bootstrap: { policies: [policy] } }),
        configErrorMatching(/bootstrap\.policies\[0\]\.maxProofAge: must be at most 15m/),
        policy.name,
      );
    }
    assert.throws(
      () =>
        parseConfig({
          clusterName: 'c',
          cloud: 'gce',
          server: { provider: { gce: { projectID: 'p', MaxTimeSkew: 3600 } } },
        }),
      configErrorMatching(/server\.provider\.gce\.MaxTimeSkew: must be at most 900/),
    );
    const bounds = parseConfig({
      clusterName: 'c',
      cloud: 'aws',
      bootstrap: { policies: [{ name: 'gce', maxProofAge: '15m' }] },
    });
    assert.deepEqual(bounds.bootstrap.policies?.[0], { name: 'gce', maxProofAge: 900_000 });
  });

  test('reports YAML syntax errors with a line and column', () => {
    assert.throws(
      () => parseConfigText('clusterName: c\ncloud: [aws\n'),
      configErrorMatching(/line \d+, column \d+/),
    );
  });

  test('rejects a duplicate key and a document that is not a mapping', () => {
    assert.throws(() => parseConfigText('clusterName: a\nclusterName: b\ncloud: aws\n'), ConfigError);
    assert.throws(
      () => parseConfigText('- a\n- b\n'),
      configErrorMatching(/^config: expected a mapping of settings, got a list$/),
    );
    assert.throws(
      () => parseConfigText('just words\n'),
      configErrorMatching(/^config: expected a mapping of settings, got a string$/),
    );
    assert.throws(
      () => parseConfigText(''),
      configErrorMatching(/expected a mapping of settings, got nothing/),
    );
  });

  test('what the YAML library throws rather than reports is a ConfigError naming the file: an alias bomb, an alias to no anchor, collections nested thousands deep', () => {
    // The fuzzing campaign's reproducers (tmp/fuzz-s11), in kind.
    const bomb =
      'a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n';
    for (const [text, message] of [
      [bomb, /^c\.yaml: Excessive alias count/],
      ['clusterName: *.example.com\ncloud: metal\n', /^c\.yaml: Unresolved alias/],
      // The yaml library reports some overflows of its stack itself, as a syntax error.
      [
        `clusterName: c\n${'- '.repeat(3_000)}\nbootstrap: {}\n`,
        /^c\.yaml: (?:collections nested too deeply|line \d+, column \d+: Maximum call stack size exceeded)/,
      ],
    ] as const) {
      assert.throws(() => parseConfigText(text, 'c.yaml'), configErrorMatching(message));
    }
  });

  test('a missing file says which file and how to point at another', async () => {
    await assert.rejects(
      loadConfigFile('/nonexistent/config.yaml'),
      configErrorMatching(/\/nonexistent\/config\.yaml: no such file; pass --conf/),
    );
  });

  test('loads a file from disk', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kc-config-'));
    const path = join(dir, 'config.yaml');
    await writeFile(path, kopsAwsConfig);
    const config = await loadConfigFile(path);
    assert.equal(config.cloud, 'aws');
  });
});
