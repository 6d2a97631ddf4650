import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { signAwsStsProof } from '../agent/aws-proof.ts';
import { newBootstrapToken, tokenSecretOf } from '../bootstrap/tokens.ts';
import { exitCodeOf } from '../errors.ts';
import { makeClients } from '../kube/client.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey } from '../pki/keys.ts';
import { nativeApiVersion } from '../protocol/bootstrap-api.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { startAwsSimulator } from '../sim/aws/server.ts';
import { createCertificateRequest } from '../sim/tls.ts';
import { runCli, runCliResult } from '../testing/cli.ts';
import { explainInput } from './explain.ts';
import { errorLine } from './main.ts';

const root = mkdtempSync(join(tmpdir(), 'kops-explain-'));
let csr = '';
after(() => rmSync(root, { recursive: true, force: true }));
before(async () => {
  csr = (await createCertificateRequest({ name: 'system:node:worker-1', groups: ['system:nodes'] })).csr;
});

function file(name: string, text: string): string {
  const path = join(root, name);
  writeFileSync(path, text);
  return path;
}

function conf(name: string, config: object): string {
  return file(name, JSON.stringify({ clusterName: 'c.example.com', cloud: 'aws', ...config }));
}

function explain(...args: string[]): Promise<string> {
  return runCli('explain', ...args);
}

/** Runs explain on a request it denies: prints the verdicts, then fails with exit code 77. */
async function explainDenied(...args: string[]): Promise<string> {
  const { output, error } = await runCliResult('explain', ...args);
  assert.equal(exitCodeOf(error), 77, String(error));
  return output;
}

test('explain --csr evaluates every policy and marks the deciding one', async () => {
  const chain = conf('stock.json', {
    bootstrap: {
      policies: [{ name: 'queue' }, { name: 'always-reject' }, { name: 'insecure-always-approve' }],
    },
  });
  const json = JSON.parse(await explain('--conf', chain, '--csr', file('node.csr', csr), '-o', 'json'));
  assert.deepEqual(
    json.trail.map((r: { policy: string; verdict: string; decides: boolean }) => [
      r.policy,
      r.verdict,
      r.decides,
    ]),
    [
      ['queue', 'queue', true],
      ['always-reject', 'deny', false],
      ['insecure-always-approve', 'approve', false],
    ],
  );
  assert.equal(json.decision.verdict, 'queue');
  assert.equal(json.request.claimedNodeName, 'worker-1');
  const table = await explain('--conf', chain, '--csr', file('node.csr', csr));
  assert.match(table, /^POLICY\s+VERDICT\s+DECIDES\s+NODE\s+GROUP\s+REASONS/);
  assert.match(table, /insecure-always-approve\s+approve\s+worker-1/);
  assert.match(table, /=> queue\s+queue\s+yes/);
});

test('explain exits 77 on a denial, after printing every verdict, so scripts can use it', async () => {
  const chain = conf('reject.json', {
    bootstrap: { policies: [{ name: 'always-reject' }, { name: 'insecure-always-approve' }] },
  });
  const { output, error } = await runCliResult('explain', '--conf', chain, '--csr', file('node.csr', csr));
  assert.match(output, /=> always-reject\s+deny\s+yes/);
  assert.equal(exitCodeOf(error), 77);
  assert.match(errorLine(error), /^the request would be denied by always-reject: /);
  // A queued request is not a refusal: a person decides later.
  const queued = conf('queue.json', { bootstrap: { policies: [{ name: 'queue' }] } });
  assert.match(await explain('--conf', queued, '--csr', file('node.csr', csr)), /=> queue\s+queue\s+yes/);
});

test('explain --request with an x-aws-sts proof replays it to STS; the proof stays usable', async () => {
  const sim = await startAwsSimulator({ throttling: false });
  const saved = { ...process.env };
  try {
    const instanceId = 'i-0123456789abcdef0';
    sim.ec2.addInstances([
      { id: instanceId, zone: 'us-east-1a', cluster: 'c.example.com', instanceGroup: 'nodes' },
    ]);
    const credentials = sim.sts.addInstanceProfileSession('nodes.c.example.com', instanceId);
    // The controller's own AWS clients reach the simulator through the SDK's standard environment.
    Object.assign(process.env, {
      AWS_ENDPOINT_URL: sim.endpoint,
      AWS_ACCESS_KEY_ID: sim.credentials.accessKeyId,
      AWS_SECRET_ACCESS_KEY: sim.credentials.secretAccessKey,
    });
    const body = {
      apiVersion: nativeApiVersion,
      nodeName: instanceId,
      certificateSigningRequests: { kubelet: csr },
    };
    const authorization = signAwsStsProof(JSON.stringify(body), credentials, sim.region, 1);
    const request = file('aws-request.json', JSON.stringify({ ...body, authorization }));
    const config = conf('aws.json', {
      server: { provider: { aws: { nodesRoles: ['nodes.c.example.com'], Region: sim.region } } },
      bootstrap: { policies: [{ name: 'aws', stsEndpoint: sim.endpoint }, { name: 'queue' }] },
    });
    const first = JSON.parse(await explain('--conf', config, '--request', request, '-o', 'json'));
    assert.equal(first.decision.verdict, 'approve', JSON.stringify(first));
    assert.equal(first.decision.policy, 'aws');
    assert.equal(first.decision.node, instanceId);
    assert.equal(first.decision.instanceGroup, 'nodes');
    assert.equal(first.trail[1].verdict, 'queue', 'later policies are evaluated too');
    const again = JSON.parse(await explain('--conf', config, '--request', request, '-o', 'json'));
    assert.equal(again.decision.verdict, 'approve', 'a dry run spends no cluster-wide replay marker');
  } finally {
    process.env = saved;
    await sim.close();
  }
});

test('explain --token refuses a malformed token as input: exit 65, the line names --token, not the value', async () => {
  const config = conf('token-malformed.json', { bootstrap: { policies: [{ name: 'bootstrap-token' }] } });
  const { error } = await runCliResult(
    ...['explain', '--conf', config, '--csr', file('node-m.csr', csr), '--node', 'worker-9'],
    ...['--token', 'abc'],
  );
  assert.equal(exitCodeOf(error), 65, String(error));
  assert.match(errorLine(error), /^--token: the bootstrap token is not in the kubeadm format /);
  assert.ok(!errorLine(error).includes('abc'), errorLine(error));
});

test('explain --token checks a bootstrap token against the cluster', async () => {
  const api = await startApiServer();
  try {
    const token = newBootstrapToken({ usages: ['authentication'] });
    await makeClients(api.kubeConfig()).core.createNamespacedSecret({
      namespace: 'kube-system',
      body: tokenSecretOf(token),
    });
    const kubeconfig = file('kubeconfig', api.kubeconfig());
    const config = conf('token.json', { bootstrap: { policies: [{ name: 'bootstrap-token' }] } });
    const args = ['--conf', config, '--csr', file('node.csr', csr), '--kubeconfig', kubeconfig, '-o', 'json'];
    const good = JSON.parse(await explain(...args, '--token', `${token.id}.${token.secret}`));
    assert.equal(good.decision.verdict, 'approve');
    const bad = JSON.parse(await explainDenied(...args, '--token', `${token.id}.0000000000000000`));
    assert.equal(bad.decision.verdict, 'deny');
    // The operator sees why, which the node itself is never told.
    assert.deepEqual(bad.decision.reasons, [
      `bootstrap token ${token.id} is unknown, expired or its secret is wrong`,
      `detail: bootstrap token ${token.id}: wrong secret`,
    ]);
    assert.ok(!JSON.stringify(bad).includes('0000000000000000'));
  } finally {
    await api.close();
  }
});

test('explain input errors are typed, with the exit code of bad input', async () => {
  const config = conf('q.json', { bootstrap: { policies: [{ name: 'queue' }] } });
  await assert.rejects(explain('--conf', config), (err) => exitCodeOf(err) === 65);
  await assert.rejects(
    explain('--conf', config, '--request', file('bad.json', '[1]')),
    /must be a JSON object/,
  );
  await assert.rejects(explain('--conf', config, '--request', file('bad2.json', '{')), /not JSON/);
  await assert.rejects(explain('--conf', config, '--csr', join(root, 'missing.csr')), /cannot read --csr/);
  assert.throws(
    () => explainInput({ request: '{"authorization": 1}' }, {}),
    /must be the Authorization header value/,
  );
});

test('explain: a directory given as --request or --csr is one line and exit 66, never an internal error', async () => {
  const config = conf('dir.json', { bootstrap: { policies: [{ name: 'queue' }] } });
  const folder = mkdtempSync(join(root, 'a-directory-'));
  for (const flag of ['--request', '--csr']) {
    await assert.rejects(explain('--conf', config, flag, folder), (err) => {
      assert.equal(errorLine(err), `cannot read ${flag} ${folder}: is a directory`);
      assert.equal(exitCodeOf(err), 66);
      return true;
    });
  }
});

test('explain --request takes a kops nodeup body and judges it on its proof alone', async () => {
  const config = conf('kops.json', {
    bootstrap: { policies: [{ name: 'insecure-always-approve' }, { name: 'queue' }] },
  });
  const body = {
    apiVersion: 'bootstrap.kops.k8s.io/v1alpha1',
    certs: { kubelet: '-----BEGIN RSA PUBLIC KEY-----\nAAAA\n-----END RSA PUBLIC KEY-----\n' },
  };
  const json = JSON.parse(
    await explainDenied(
      '--conf',
      config,
      '--request',
      file('kops-request.json', JSON.stringify(body)),
      '-o',
      'json',
    ),
  );
  assert.equal(json.request.proof, 'none');
  assert.equal(json.request.claimedNodeName, undefined);
  assert.deepEqual(
    json.trail.map((r: { verdict: string }) => r.verdict),
    ['deny', 'queue'],
  );
  assert.match(json.trail[0].reasons[0], /names no node/);
});

test('explain refuses, as the server does before any policy runs, a request naming the API server', async () => {
  const chain = conf('approve.json', { bootstrap: { policies: [{ name: 'insecure-always-approve' }] } });
  const serving = buildCsrPem(generateKey(), {
    subject: { commonName: 'system:node:worker-1', organizations: ['system:nodes'] },
    dnsNames: ['kubernetes.default.svc.cluster.local'],
  });
  const request = file(
    'reserved.json',
    JSON.stringify({
      apiVersion: nativeApiVersion,
      certificateSigningRequests: { kubelet: csr, 'kubelet-server': serving },
    }),
  );
  await assert.rejects(explain('--conf', chain, '--request', request), (err: unknown) => {
    assert.equal(exitCodeOf(err), 65);
    assert.match(
      String((err as Error).message),
      /kubernetes\.default\.svc\.cluster\.local is a name of the cluster's API server/,
    );
    return true;
  });
  // A node name that is one of the cluster's API names, from the config's cluster name.
  await assert.rejects(
    explain('--conf', chain, '--csr', file('node.csr', csr), '--node', 'api.internal.c.example.com'),
    /api\.internal\.c\.example\.com is a name/,
  );
});
