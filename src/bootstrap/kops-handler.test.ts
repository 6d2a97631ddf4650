import assert from 'node:assert/strict';
import { generateKeyPairSync, type KeyObject, X509Certificate } from 'node:crypto';
import { describe, test } from 'node:test';
import { renewalProof } from '../agent/renewal.ts';
import {
  ForbiddenError,
  NotFoundError,
  RateLimitedError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { silentLogger } from '../log.ts';
import { bundlePem, type CertificateAuthority, createCa } from '../pki/ca.ts';
import { bytesOf, childrenOf, octetString, readRoot, sequence } from '../pki/der.ts';
import { generateKey, spkiOf } from '../pki/keys.ts';
import { encodePem } from '../pki/pem.ts';
import { issueCertificate, publicKeyRequest } from '../pki/profiles.ts';
import { MemfsVfs } from '../statestore/memfs-vfs.ts';
import { nodeSecretsReader } from '../statestore/secrets.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { opensslText, opensslVerify } from '../testing/openssl.ts';
import { auditSink } from './audit.ts';
import type { BootstrapContext } from './context.ts';
import { dependencyFault } from './dependency.ts';
import { type KopsOptions, kopsApiVersion, kopsBootstrap, kopsLifetimeMs } from './kops-handler.ts';
import { awsPolicy } from './policies/aws.ts';
import { type RenewalPolicyOptions, renewalPolicy } from './policies/renewal.ts';
import type { AuditRecord, BootstrapPolicy, NodeFacts } from './types.ts';

const instance: NodeFacts = {
  nodeName: 'i-0123456789abcdef0',
  instanceGroup: 'nodes-us-test-1a',
  dnsNames: ['ip-10-0-0-7.us-test-1.compute.internal'],
  ipAddresses: ['10.0.0.7'],
  evidence: { account: '123456789012' },
};

/** Stands in for the aws policy: `x-aws-sts good` is the instance above, anything else is refused. */
const stsPolicy: BootstrapPolicy = {
  name: 'aws',
  async evaluate(request) {
    if (request.proof.kind !== 'aws-sts') return { verdict: 'abstain', reasons: ['not an AWS proof'] };
    if (request.proof.token === 'good') return { verdict: 'approve', facts: instance, reasons: ['verified'] };
    return { verdict: 'deny', reasons: ['signature does not verify'] };
  },
};

// RSA-2048, as nodeup makes them; generated once for the file.
const keys: KeyObject[] = Array.from(
  { length: 3 },
  () => generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey,
);

/** nodeup's wire form: a PEM block typed RSA PUBLIC KEY that holds PKIX bytes. */
function nodeupKey(key: KeyObject): string {
  return encodePem('RSA PUBLIC KEY', spkiOf(key));
}

function setup(
  options: Partial<KopsOptions> = {},
  ready: string[] = [],
  overrides: Partial<BootstrapContext> = {},
) {
  const ca: CertificateAuthority = createCa();
  const audit: AuditRecord[] = [];
  const context: BootstrapContext = {
    ca,
    policies: [stsPolicy],
    readNode: async (name) =>
      ready.includes(name) ? { status: { conditions: [{ type: 'Ready', status: 'True' }] } } : undefined,
    apiServer: 'https://api.internal.minimal.example.com',
    audit: (record) => audit.push(record),
    logger: silentLogger,
    ...overrides,
  };
  const kops: KopsOptions = { certNames: ['kubelet', 'kubelet-server', 'kube-proxy'], ...options };
  const call = (body: unknown, authorization: string | undefined = 'x-aws-sts good') =>
    kopsBootstrap(context, kops, {
      body: Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)),
      authorization,
      remoteAddress: '10.0.0.7',
      receivedAt: new Date(),
    });
  return { ca, audit, call };
}

function nodeupRequest(ca: CertificateAuthority, extra: Record<string, unknown> = {}) {
  return {
    apiVersion: kopsApiVersion,
    certs: {
      kubelet: nodeupKey(keys[0] as KeyObject),
      'kubelet-server': nodeupKey(keys[1] as KeyObject),
      'kube-proxy': nodeupKey(keys[2] as KeyObject),
    },
    keypairIDs: { 'kubernetes-ca': ca.signer.certificate.keypairId },
    ...extra,
  };
}

describe('kops POST /bootstrap', () => {
  test("answers nodeup with kops' shape: Certs by name, for the verified instance, valid 455 days", async () => {
    const { ca, audit, call } = setup();
    const answer = await call(nodeupRequest(ca));
    assert.equal(answer.status, 200, String(answer.body));
    const certs = (answer.body as { Certs: Record<string, string> }).Certs;
    assert.deepEqual(Object.keys(certs).sort(), ['kube-proxy', 'kubelet', 'kubelet-server']);
    const kubelet = opensslText(certs['kubelet'] as string);
    assert.match(kubelet, /Subject: O ?= ?system:nodes, CN ?= ?system:node:i-0123456789abcdef0/);
    assert.match(kubelet, /TLS Web Client Authentication/);
    const serving = opensslText(certs['kubelet-server'] as string);
    assert.match(serving, /DNS:ip-10-0-0-7\.us-test-1\.compute\.internal, IP Address:10\.0\.0\.7/);
    assert.match(opensslText(certs['kube-proxy'] as string), /CN ?= ?system:kube-proxy/);
    const notAfter = /Not After : (.*)/.exec(kubelet)?.[1] as string;
    assert.ok(new Date(notAfter).getTime() - Date.now() > 400 * 24 * 3_600_000, notAfter);
    assert.equal(audit.at(-1)?.verdict, 'approve');
    assert.equal(audit.at(-1)?.instanceGroup, 'nodes-us-test-1a');
  });

  test('the token is verified before the body is parsed: a bad token with a garbage body is 403', async () => {
    const { call, audit } = setup();
    assert.deepEqual(await call('{garbage', 'x-aws-sts forged'), {
      status: 403,
      body: 'failed to verify token\n',
    });
    assert.deepEqual(await call('{garbage', ''), { status: 403, body: 'failed to verify token\n' });
    assert.deepEqual(await call('{garbage', 'Negotiate abc'), {
      status: 403,
      body: 'failed to verify token\n',
    });
    assert.deepEqual(audit.at(-2)?.reasons, [
      'no policy approved the request (aws abstained: not an AWS proof)',
    ]);
    assert.equal(audit.at(-1)?.decidedBy, 'authorization');
    const decode = await call('{garbage');
    assert.equal(decode.status, 400);
    assert.match(String(decode.body), /^failed to decode: /);
  });

  test('node name already Ready: 409, as kops (nodeup exits quietly)', async () => {
    const { ca, call, audit } = setup({}, [instance.nodeName]);
    assert.deepEqual(await call(nodeupRequest(ca)), { status: 409, body: 'node already registered\n' });
    assert.equal(audit.at(-1)?.decidedBy, 'node-guard');
  });

  test("kops' 400s: empty body, apiVersion, key names, keypair ids, weak keys", async () => {
    const { ca, call } = setup({ certNames: ['kubelet', 'kube-router', 'made-up', 'etcd-client-cilium'] });
    assert.equal((await call('')).status, 400);
    assert.deepEqual(await call({ ...nodeupRequest(ca), apiVersion: 'bootstrap.kops.k8s.io/v1' }), {
      status: 400,
      body: 'unexpected APIVersion\n',
    });
    const only = (certs: Record<string, string>, extra: Record<string, unknown> = {}) =>
      call({ apiVersion: kopsApiVersion, certs, ...extra });
    assert.deepEqual(await only({ 'kube-proxy': nodeupKey(keys[2] as KeyObject) }), {
      status: 400,
      body: 'failed to issue "kube-proxy": key name not enabled\n',
    });
    assert.deepEqual(await only({ 'kube-routr': nodeupKey(keys[2] as KeyObject) }), {
      status: 400,
      body: 'failed to issue "kube-routr": key name not enabled\n',
    });
    assert.deepEqual(await only({ 'made-up': nodeupKey(keys[2] as KeyObject) }), {
      status: 400,
      body: 'failed to issue "made-up": unexpected key name\n',
    });
    // Cilium's etcd client certificate needs its own CA, which this server was not given.
    assert.deepEqual(await only({ 'etcd-client-cilium': nodeupKey(keys[2] as KeyObject) }), {
      status: 400,
      body: 'failed to issue "etcd-client-cilium": no signing CA etcd-clients-ca-cilium (add it to server.signingCAs)\n',
    });
    const mismatch = await only(
      { kubelet: nodeupKey(keys[0] as KeyObject) },
      { keypairIDs: { 'kubernetes-ca': '1' } },
    );
    assert.equal(mismatch.status, 400);
    assert.match(String(mismatch.body), /keypair ID "1" for kubernetes-ca didn't match issuer's/);
    const wrongType = await only({ kubelet: encodePem('PUBLIC KEY', spkiOf(keys[0] as KeyObject)) });
    assert.equal(wrongType.status, 400);
    assert.match(String(wrongType.body), /expected RSA PUBLIC KEY/);
    const weak = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey;
    const weakAnswer = await only({ kubelet: nodeupKey(weak) });
    assert.equal(weakAnswer.status, 400);
    assert.match(String(weakAnswer.body), /too weak/);
  });

  test('attack: a public key OpenSSL cannot read (a point off its curve, extra fields) is a 400 naming the key, nothing is signed, and a readable one is certified as OpenSSL writes it', async () => {
    const { ca, audit, call } = setup();
    // Reproducers of the fuzzing campaign (tmp/fuzz-s11): a P-256 point off its curve, and an
    // ECDSA P-384 SPKI with a third element.
    for (const hex of [
      '3059301306072a8648ce3d020106082a8648ce3d0301070342000449353fab114a0c9fdbe1e3e4d0991f571e8e9d69b13a316dead89282c4d00bb5751eb2e3c3ae87f9af4e58ab393cf606ed58049c564970d6de1f89d86bc226a5',
      '3081da301006072a8648ce3d020106052b8104002203620004537d0b01648cf0c54fd2219b8098dc69938304644065383892733271b38320e84b3b025b398c4cb643716c14d82dcb9943f51b0a17740ff089f734122b957bb751eb1dd80bc7d0038c0e5c9fefd6f66399c9738794f3074ea4445c605aee956603620004537d0b01648cf0c54fd2219b8098dc69938304644065383892733271b38320e84b3b025b398c4cb643716c14d82dcb9943f51b0a17740ff089f734122b957bb751eb1dd80bc7d0038c0e5c9fefd6f66399c9738794f3074ea4445c605aee9566',
    ]) {
      const answer = await call({
        ...nodeupRequest(ca),
        certs: { kubelet: encodePem('RSA PUBLIC KEY', Buffer.from(hex, 'hex')) },
      });
      assert.equal(answer.status, 400, String(answer.body));
      assert.match(String(answer.body), /^failed to issue "kubelet": unreadable public key/);
    }
    assert.ok(!audit.some((record) => record.issued), 'nothing signed');
    // RSA parameters OpenSSL ignores (Go refuses them): the certificate carries the key as OpenSSL writes it.
    const [algorithm, keyBits] = childrenOf(readRoot(spkiOf(keys[0] as KeyObject))).map(bytesOf) as [
      Buffer,
      Buffer,
    ];
    const [rsaEncryption] = childrenOf(readRoot(algorithm)).map(bytesOf) as [Buffer];
    const odd = sequence(sequence(rsaEncryption, octetString(Buffer.of(1))), keyBits);
    const answer = await call({ ...nodeupRequest(ca), certs: { kubelet: encodePem('RSA PUBLIC KEY', odd) } });
    assert.equal(answer.status, 200, String(answer.body));
    const kubelet = new X509Certificate(
      (answer.body as { Certs: Record<string, string> }).Certs['kubelet'] as string,
    );
    assert.deepEqual(kubelet.publicKey.export({ format: 'der', type: 'spki' }), spkiOf(keys[0] as KeyObject));
  });

  test('kube-router from kubernetes-ca, and etcd-client-cilium from its own CA, each with its keypair id', async () => {
    const cilium = createCa({ name: 'etcd-clients-ca-cilium', commonName: 'etcd-clients-ca-cilium' });
    const { ca, call } = setup({
      certNames: ['kubelet', 'kube-router', 'etcd-client-cilium'],
      otherSigners: [cilium],
    });
    const certs = {
      kubelet: nodeupKey(keys[0] as KeyObject),
      'kube-router': nodeupKey(keys[1] as KeyObject),
      'etcd-client-cilium': nodeupKey(keys[2] as KeyObject),
    };
    const keypairIDs = {
      'kubernetes-ca': ca.signer.certificate.keypairId,
      'etcd-clients-ca-cilium': cilium.signer.certificate.keypairId,
    };
    const answer = await call({ apiVersion: kopsApiVersion, certs, keypairIDs });
    assert.equal(answer.status, 200, String(answer.body));
    const issued = (answer.body as { Certs: Record<string, string> }).Certs;
    const router = issued['kube-router'] as string;
    const etcd = issued['etcd-client-cilium'] as string;
    assert.match(opensslText(router), /Subject: CN ?= ?system:kube-router\n/);
    assert.match(opensslVerify(bundlePem(ca), router, 'sslclient'), /: OK$/);
    assert.match(opensslText(etcd), /Subject: CN ?= ?cilium\n/);
    assert.match(opensslText(etcd), /TLS Web Client Authentication/);
    assert.match(opensslVerify(bundlePem(cilium), etcd, 'sslclient'), /: OK$/);
    assert.throws(() => opensslVerify(bundlePem(ca), etcd, 'sslclient'), 'not signed by kubernetes-ca');

    const stale = await call({
      apiVersion: kopsApiVersion,
      certs,
      keypairIDs: { ...keypairIDs, 'etcd-clients-ca-cilium': '1' },
    });
    assert.equal(stale.status, 400);
    assert.match(String(stale.body), /keypair ID "1" for etcd-clients-ca-cilium didn't match issuer's/);
  });

  test("includeNodeConfig returns the instance group's nodeup config, or 400 when there is none", async () => {
    const read: string[] = [];
    const { ca, call } = setup({
      nodeConfig: async (group) => {
        read.push(group);
        return { nodeupConfig: `instanceGroupName: ${group}\n` };
      },
    });
    const answer = await call(nodeupRequest(ca, { includeNodeConfig: true }));
    assert.equal(answer.status, 200);
    assert.deepEqual((answer.body as { nodeConfig: unknown }).nodeConfig, {
      nodeupConfig: 'instanceGroupName: nodes-us-test-1a\n',
    });
    assert.deepEqual(read, ['nodes-us-test-1a']);
    const without = setup();
    assert.deepEqual(await without.call(nodeupRequest(without.ca, { includeNodeConfig: true })), {
      status: 400,
      body: 'failed to build node config\n',
    });
  });

  test('a request for its node config alone (no certs) is answered, audited as issuing nothing, and not counted as an issuance', async () => {
    const observed: number[] = [];
    const decisions: string[] = [];
    const { ca, audit, call } = setup(
      { nodeConfig: async (group) => ({ nodeupConfig: `instanceGroupName: ${group}\n` }) },
      [],
      {
        metrics: {
          decision: (policy, verdict) => decisions.push(`${policy}:${verdict}`),
          issued: (seconds) => observed.push(seconds),
          queueDepth: () => undefined,
          dependencyFailure: () => undefined,
          dependencyPaused: () => undefined,
        },
      },
    );
    const answer = await call({ ...nodeupRequest(ca), certs: {}, includeNodeConfig: true });
    assert.equal(answer.status, 200, String(answer.body));
    assert.deepEqual((answer.body as { Certs: unknown }).Certs, {});
    assert.deepEqual(observed, [], 'a request that issued nothing was observed as an issuance');
    const record = audit.at(-1);
    assert.equal(record?.verdict, 'approve');
    assert.equal(record?.issued, undefined);
    assert.match(String(record?.reasons), /no certificate was asked for/);
    assert.deepEqual(decisions, ['aws:approve']);
  });

  test("a dependency that fails — a policy's, the Node read, the state store — is a 503 with Retry-After, never a 403 or 500", async () => {
    const failing: BootstrapPolicy = {
      name: 'aws',
      evaluate: async () => {
        throw dependencyFault('sts', new Error('connect ECONNREFUSED'));
      },
    };
    const cases = [
      ['the policy chain', setup({}, [], { policies: [failing] }), 'AWS STS', 'aws'],
      [
        'the Node read',
        setup({}, [], {
          readNode: async () => {
            throw new RateLimitedError('read node: HTTP 429');
          },
        }),
        'the Kubernetes API server',
        'node-guard',
      ],
      [
        'the state store',
        setup({
          nodeConfig: async () => {
            throw new UnavailableError('s3 GET igconfig/node/nodes-us-test-1a/nodeupconfig.yaml: HTTP 503');
          },
        }),
        'the state store',
        'node-config',
      ],
      ...(
        [
          new UnauthenticatedError(
            's3 GET igconfig/node/nodes-us-test-1a/nodeupconfig.yaml: InvalidAccessKeyId',
          ),
          new ForbiddenError('gs GET igconfig/node/nodes-us-test-1a/nodeupconfig.yaml: HTTP 403'),
        ] as const
      ).map(
        (refusal) =>
          [
            `the state store refusing the controller's own credentials (${refusal.kind})`,
            setup({
              nodeConfig: async () => {
                throw refusal;
              },
            }),
            'the state store',
            'node-config',
          ] as const,
      ),
    ] as const;
    for (const [what, { ca, audit, call }, dependency, decidedBy] of cases) {
      const answer = await call(nodeupRequest(ca, { includeNodeConfig: true }));
      assert.equal(answer.status, 503, `${what}: ${JSON.stringify(answer)}`);
      assert.match(answer.headers?.['retry-after'] ?? '', /^\d+$/, what);
      assert.match(
        String(answer.body),
        new RegExp(`^${dependency} is unavailable.*retry in \\d+ s\n$`),
        what,
      );
      const record = audit.at(-1);
      assert.equal(record?.verdict, 'error', what);
      assert.equal(record?.decidedBy, decidedBy, what);
      assert.ok(record?.detail?.[0], `${what}: the cause, for the operator`);
    }
    const missing = setup({
      nodeConfig: async () => {
        throw new NotFoundError('no igconfig/node/nodes-us-test-1a/nodeupconfig.yaml');
      },
    });
    const answer = await missing.call(nodeupRequest(missing.ca, { includeNodeConfig: true }));
    assert.equal(answer.status, 400, "a config that is not there is the request's problem, as in kops");
  });
});

describe('kops nodeSecrets (includeNodeConfig), read from the secret store as kops-controller does', () => {
  const nodeConfig = async (group: string) => ({ nodeupConfig: `instanceGroupName: ${group}\n` });

  test("the store's dockerconfig is answered as nodeConfig.nodeSecrets.dockerconfig (base64 of its Data, as Go encodes []byte)", async () => {
    const store = new MemfsVfs(new URL(`memfs://secrets-${process.pid}-a/cluster/secrets`));
    const dockerconfig = '{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"}}}';
    await store.write('dockerconfig', JSON.stringify({ Data: Buffer.from(dockerconfig).toString('base64') }));
    await store.write('admin', JSON.stringify({ Data: Buffer.from('not for nodes').toString('base64') }));
    const { ca, call } = setup({ nodeConfig, nodeSecrets: nodeSecretsReader(store) });
    const answer = await call(nodeupRequest(ca, { includeNodeConfig: true }));
    assert.equal(answer.status, 200, String(answer.body));
    assert.deepEqual((answer.body as { nodeConfig: unknown }).nodeConfig, {
      nodeupConfig: 'instanceGroupName: nodes-us-test-1a\n',
      nodeSecrets: { dockerconfig: Buffer.from(dockerconfig).toString('base64') },
    });
    const plain = await call(nodeupRequest(ca));
    assert.equal(
      (plain.body as { nodeConfig?: unknown }).nodeConfig,
      undefined,
      'only with includeNodeConfig',
    );
  });

  test('no dockerconfig in the store: no nodeSecrets field (kops omits the empty map)', async () => {
    const store = new MemfsVfs(new URL(`memfs://secrets-${process.pid}-b/cluster/secrets`));
    const { ca, call } = setup({ nodeConfig, nodeSecrets: nodeSecretsReader(store) });
    const answer = await call(nodeupRequest(ca, { includeNodeConfig: true }));
    assert.deepEqual((answer.body as { nodeConfig: unknown }).nodeConfig, {
      nodeupConfig: 'instanceGroupName: nodes-us-test-1a\n',
    });
  });

  test('a secret that is not kops JSON is a 400 "failed to build node config"; a store that fails is a 503', async () => {
    const store = new MemfsVfs(new URL(`memfs://secrets-${process.pid}-c/cluster/secrets`));
    await store.write('dockerconfig', 'not json');
    const broken = setup({ nodeConfig, nodeSecrets: nodeSecretsReader(store) });
    assert.deepEqual(await broken.call(nodeupRequest(broken.ca, { includeNodeConfig: true })), {
      status: 400,
      body: 'failed to build node config\n',
    });
    const down = new (class extends MemfsVfs {
      override async read(): Promise<never> {
        throw new UnavailableError('s3 GET secrets/dockerconfig: HTTP 503');
      }
    })(new URL(store.url));
    const failing = setup({ nodeConfig, nodeSecrets: nodeSecretsReader(down) });
    const answer = await failing.call(nodeupRequest(failing.ca, { includeNodeConfig: true }));
    assert.equal(answer.status, 503);
    assert.equal(failing.audit.at(-1)?.verdict, 'error');
  });
});

test('kops path: a policy whose proof is the source address refuses a NotReady Node of the name too (409), as kops OpenStack', async () => {
  const sourceOnly: BootstrapPolicy = {
    name: 'openstack',
    async evaluate() {
      return {
        verdict: 'approve',
        facts: { ...instance, firstJoinOnly: true },
        reasons: ['from its address'],
      };
    },
  };
  const notReady = async () => ({ status: { conditions: [{ type: 'Ready', status: 'False' }] } });
  const firstOnly = setup({}, [], { policies: [sourceOnly], readNode: notReady });
  assert.equal((await firstOnly.call(nodeupRequest(firstOnly.ca))).status, 409);
  const fresh = setup({}, [], { policies: [sourceOnly] });
  assert.equal((await fresh.call(nodeupRequest(fresh.ca))).status, 200);
});

describe('kops path: renewal (x-kops-renewal) through /bootstrap', () => {
  const clusterName = 'minimal.example.com';
  const dayMs = 86_400_000;
  const cilium = createCa({ name: 'etcd-clients-ca-cilium', commonName: 'etcd-clients-ca-cilium' });
  const allNames = ['kubelet', 'kubelet-server', 'kube-proxy', 'kube-router', 'etcd-client-cilium'];
  const fromTheCloud: RenewalPolicyOptions['addressesOf'] = async () => ({
    dnsNames: instance.dnsNames,
    ipAddresses: instance.ipAddresses,
    instanceGroup: instance.instanceGroup as string,
  });

  /**
   * The instance's node renews through /bootstrap with its current kubelet client certificate (valid
   * `presentedLifetimeMs`, or `current`), asking for `names`; its Node is registered and Ready.
   */
  async function renew(
    names: readonly string[],
    options: {
      presentedLifetimeMs?: number;
      addressesOf?: RenewalPolicyOptions['addressesOf'] | null;
      current?: { ca: CertificateAuthority; certificate: X509Certificate; key: KeyObject };
      issueOptions?: BootstrapContext['issueOptions'];
    } = {},
  ) {
    const ca = options.current?.ca ?? createCa();
    const key = options.current?.key ?? generateKey('ecdsa-p256');
    const identity = { name: instance.nodeName, dnsNames: [], ipAddresses: [] };
    const lifetimeMs = options.presentedLifetimeMs ?? dayMs;
    const presented =
      options.current?.certificate ??
      new X509Certificate(
        issueCertificate(ca, 'kubelet', publicKeyRequest(key), identity, { lifetimeMs }).pem,
      );
    const addressesOf = options.addressesOf === undefined ? fromTheCloud : options.addressesOf;
    const policy = renewalPolicy({ clusterName, ca, ...(addressesOf ? { addressesOf } : {}) });
    const audit: AuditRecord[] = [];
    const context: BootstrapContext = {
      ca,
      policies: [stsPolicy, policy],
      readNode: async () => ({ status: { conditions: [{ type: 'Ready', status: 'True' }] } }),
      apiServer: 'https://api.internal.minimal.example.com',
      audit: (record) => audit.push(record),
      logger: silentLogger,
      ...(options.issueOptions ? { issueOptions: options.issueOptions } : {}),
    };
    const body = Buffer.from(
      JSON.stringify({
        apiVersion: kopsApiVersion,
        certs: Object.fromEntries(
          names.map((name, i) => [name, nodeupKey(keys[i % keys.length] as KeyObject)]),
        ),
      }),
    );
    const current = { nodeName: instance.nodeName, certificate: presented, key };
    const authorization = (await renewalProof(current, clusterName)(body)) as string;
    const answer = await kopsBootstrap(
      context,
      { certNames: allNames, otherSigners: [cilium] },
      { body, authorization, remoteAddress: '10.0.0.7', receivedAt: new Date() },
    );
    const certs = (answer.body as { Certs?: Record<string, string> }).Certs ?? {};
    const issued = Object.entries(certs).map(([n, pem]) => [n, new X509Certificate(pem)] as const);
    return { answer, audit, presented, issued, ca };
  }

  const validityMs = (c: X509Certificate) => Date.parse(c.validTo) - Date.parse(c.validFrom);

  test('a renewal of a Ready node (the renewal policy proved its current key) is not blocked by the 409 guard; a first join of it still is', async () => {
    const { answer, audit, issued } = await renew(['kubelet']);
    assert.equal(answer.status, 200, String(answer.body));
    assert.equal(audit.at(-1)?.verdict, 'approve');
    assert.deepEqual(
      issued.map(([name]) => name),
      ['kubelet'],
    );
    const join = setup({}, [instance.nodeName]);
    assert.equal((await join.call(nodeupRequest(join.ca))).status, 409);
  });

  test("attack: a renewal never outlives the certificate it presents: a 1-day kubelet certificate renews into certificates of at most 1 day, not kops' 455", async () => {
    const { answer, presented, issued } = await renew(['kubelet', 'kubelet-server']);
    assert.equal(answer.status, 200, String(answer.body));
    assert.equal(issued.length, 2);
    for (const [name, certificate] of issued) {
      assert.ok(
        validityMs(certificate) <= validityMs(presented),
        `${name}: valid ${validityMs(certificate) / dayMs} days, the presented certificate ${validityMs(presented) / dayMs}`,
      );
    }
  });

  test('renewing the renewed certificate again keeps its lifetime: it is not shortened by the per-node spread each time', async () => {
    const first = await renew(['kubelet']);
    assert.equal(first.answer.status, 200, String(first.answer.body));
    const renewed = first.issued[0]?.[1] as X509Certificate;
    const current = { ca: first.ca, certificate: renewed, key: keys[0] as KeyObject };
    const second = await renew(['kubelet'], { current });
    assert.equal(second.answer.status, 200, String(second.answer.body));
    const again = second.issued[0]?.[1] as X509Certificate;
    assert.ok(validityMs(again) <= validityMs(renewed));
    assert.ok(
      validityMs(renewed) - validityMs(again) <= 2_000,
      `${validityMs(renewed)} then ${validityMs(again)}`,
    );
  });

  test('a presented certificate valid for less than the shortest lifetime this server issues is refused (403), not lengthened', async () => {
    const { answer, audit } = await renew(['kubelet'], {
      presentedLifetimeMs: 10 * 60_000,
      issueOptions: { bounds: { minMs: 3_600_000, maxMs: kopsLifetimeMs } },
    });
    assert.deepEqual(answer, {
      status: 403,
      body: 'failed to issue: the certificate it renews was valid for less than the shortest lifetime this server issues (60 min)\n',
    });
    assert.equal(audit.at(-1)?.verdict, 'deny');
    assert.equal(audit.at(-1)?.decidedBy, 'renewal');
  });

  test("a kops node's 455-day kubelet certificate renews its kubelet and kubelet-server certificates for 455 days again, the serving one for the cloud's addresses", async () => {
    const { answer, presented, issued } = await renew(['kubelet', 'kubelet-server'], {
      presentedLifetimeMs: kopsLifetimeMs,
    });
    assert.equal(answer.status, 200, String(answer.body));
    for (const [name, certificate] of issued) {
      assert.ok(validityMs(certificate) > 400 * dayMs, `${name}: ${certificate.validTo}`);
      assert.ok(validityMs(certificate) <= validityMs(presented), name);
    }
    const serving = issued.find(([name]) => name === 'kubelet-server')?.[1];
    assert.equal(serving?.subjectAltName, 'DNS:ip-10-0-0-7.us-test-1.compute.internal, IP Address:10.0.0.7');
  });

  test('attack: a kubelet certificate does not renew into the certificates of other identities (kube-proxy, kube-router, etcd-client-cilium): 403, audited, nothing issued', async () => {
    for (const other of ['kube-proxy', 'kube-router', 'etcd-client-cilium']) {
      const { answer, audit } = await renew(['kubelet', other], { presentedLifetimeMs: kopsLifetimeMs });
      assert.equal(answer.status, 403, `${other}: ${JSON.stringify(answer)}`);
      assert.equal(
        answer.body,
        `failed to issue "${other}": a renewal renews the node's own certificates (kubelet, kubelet-server) only\n`,
      );
      const record = audit.at(-1);
      assert.equal(record?.verdict, 'deny', other);
      assert.equal(record?.decidedBy, 'renewal', other);
      assert.equal(record?.nodeName, instance.nodeName, other);
      assert.ok(!audit.some((r) => r.issued), `${other}: nothing issued`);
    }
  });

  test('a renewal without verified addresses gets no serving certificate on /bootstrap either (403); its client certificate it does', async () => {
    const serving = await renew(['kubelet', 'kubelet-server'], { addressesOf: null });
    assert.equal(serving.answer.status, 403, JSON.stringify(serving.answer));
    assert.match(String(serving.answer.body), /^failed to issue "kubelet-server": /);
    assert.equal(serving.audit.at(-1)?.verdict, 'deny');
    const client = await renew(['kubelet'], { addressesOf: null });
    assert.equal(client.answer.status, 200, String(client.answer.body));
  });

  test('facts marked as a renewal without the renewal proof of that certificate are a server fault: 500, audited, nothing issued', async () => {
    const confused: BootstrapPolicy = {
      name: 'confused',
      async evaluate() {
        return { verdict: 'approve', facts: { ...instance, renewalOf: '0a1b' }, reasons: ['renewed?'] };
      },
    };
    const { ca, audit, call } = setup({}, [instance.nodeName], { policies: [confused] });
    assert.deepEqual(await call(nodeupRequest(ca)), { status: 500, body: 'internal error\n' });
    assert.equal(audit.at(-1)?.verdict, 'error');
    assert.ok(!audit.some((r) => r.issued), 'nothing issued');
  });
});

test("a server-side fault while signing is not the node's 400: unavailable is a 503 with Retry-After, anything else a 500; a request the profile refuses stays a 400", async () => {
  const failing = (error: Error) =>
    setup({}, [], {
      issueOptions: {
        onIssued: () => {
          throw error;
        },
      },
    });
  const down = failing(new UnavailableError('the crypto pool was closed'));
  const answer = await down.call(nodeupRequest(down.ca));
  assert.equal(answer.status, 503, JSON.stringify(answer));
  assert.match(answer.headers?.['retry-after'] ?? '', /^\d+$/);
  assert.doesNotMatch(String(answer.body), /crypto pool/, 'the cause is for the operator');
  assert.equal(down.audit.at(-1)?.verdict, 'error');
  assert.equal(down.audit.at(-1)?.decidedBy, 'issue');
  assert.match(down.audit.at(-1)?.detail?.join() ?? '', /crypto pool was closed/);

  const bug = failing(new TypeError('x is undefined'));
  assert.deepEqual(await bug.call(nodeupRequest(bug.ca)), { status: 500, body: 'internal error\n' });
  assert.equal(bug.audit.at(-1)?.verdict, 'error');
  assert.equal(bug.audit.at(-1)?.decidedBy, 'issue');

  // Facts a certificate may not carry: an invalid name (InvalidInputError), the API server's (RequestRejectedError).
  for (const [dnsName, why] of [
    ['*.example.com', /"\*\.example\.com" is not a valid DNS name/],
    ['kubernetes.default.svc', /kubernetes\.default\.svc is a name of the cluster's API server/],
  ] as const) {
    const policy: BootstrapPolicy = {
      name: 'aws',
      async evaluate() {
        return { verdict: 'approve', facts: { ...instance, dnsNames: [dnsName] }, reasons: ['verified'] };
      },
    };
    const refused = setup({}, [], { policies: [policy] });
    const rejected = await refused.call(nodeupRequest(refused.ca));
    assert.equal(rejected.status, 400, dnsName);
    assert.match(String(rejected.body), /^failed to issue: /);
    assert.match(String(rejected.body), why);
    assert.equal(refused.audit.at(-1)?.verdict, 'deny', dnsName);
    assert.equal(refused.audit.at(-1)?.decidedBy, 'profile-check', dnsName);
  }
});

test("attack: a denial's log costs a few hundred bytes, whatever the unverified proof repeats: one audit line, the second line at debug, the field quoted and cut", async () => {
  // The worst request of the volume audit (tmp/volume/bootstrap-flood.ts): a v1 proof whose Host is
  // 5,800 two-byte characters, refused for naming another host; it wrote 23.9 KB of log.
  const host = `7-${'\u00e9'.repeat(5800)}`;
  const proof = Buffer.from(JSON.stringify({ host: [host], authorization: ['AWS4-HMAC-SHA256 x'] })).toString(
    'base64',
  );
  const { logger, lines } = capturedLogger();
  const { ca, call } = setup({}, [], {
    policies: [
      awsPolicy({
        account: '123456789012',
        partition: 'aws',
        region: 'us-east-1',
        nodesRoles: ['nodes.minimal.example.com'],
        instances: {
          lookupInstance: async () => {
            throw new Error('not reached: the proof is refused before any call');
          },
        },
      }),
    ],
    audit: auditSink(logger),
    logger,
  });
  assert.deepEqual(await call(nodeupRequest(ca), `x-aws-sts ${proof}`), {
    status: 403,
    body: 'failed to verify token\n',
  });
  assert.equal(
    lines.length,
    1,
    `one line per denial, the audit record: ${lines.map((l) => l.slice(0, 120))}`,
  );
  const [line] = lines as [string];
  assert.ok(Buffer.byteLength(line) < 700, `${Buffer.byteLength(line)} B: ${line.slice(0, 300)}`);
  const record = JSON.parse(line).record as AuditRecord;
  assert.equal(record.verdict, 'deny');
  // Still says what was wrong: which field, how it starts, how long it was, what was expected.
  assert.match(
    record.reasons.join(),
    /it names host "7-é+"… \(5802 characters\), not sts\.us-east-1\.amazonaws\.com/,
  );
  // The second line is still there for whoever asks for debug.
  const debug = capturedLogger({ level: 'debug' });
  const again = setup({}, [], { audit: auditSink(debug.logger), logger: debug.logger });
  await again.call(nodeupRequest(again.ca), 'x-aws-sts forged');
  assert.deepEqual(
    debug.lines.map((l) => [JSON.parse(l).level, JSON.parse(l).msg]),
    [
      ['info', 'bootstrap deny'],
      ['debug', 'kops bootstrap: token not verified'],
    ],
  );
});
