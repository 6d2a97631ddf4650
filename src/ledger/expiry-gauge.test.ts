/**
 * End to end: a node joins through the bootstrap server as `run` builds it (kops' nodeup request, the
 * aws policy against the AWS simulator), its certificate lands in the ledger in the simulated API
 * server, and the leader's gauge exports its expiry; a new controller (restart, another leader) exports
 * the same from the API server alone.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync, X509Certificate } from 'node:crypto';
import { request } from 'node:https';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { signAwsStsProof } from '../agent/aws-proof.ts';
import { kopsApiVersion } from '../bootstrap/kops-handler.ts';
import { httpsNodeReader } from '../bootstrap/node-guard.ts';
import { type ConfiguredBootstrap, startConfiguredBootstrap } from '../cli/bootstrap-server.ts';
import { parseConfig } from '../config/loader.ts';
import { makeClients } from '../kube/client.ts';
import { bundlePem, type CertificateAuthority, createCa } from '../pki/ca.ts';
import { spkiOf } from '../pki/keys.ts';
import { encodePem } from '../pki/pem.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import { msToStop } from '../testing/leadership.ts';
import { CertificateExpiryGauge, expiryGaugeName, lifetimeGaugeName } from './expiry-gauge.ts';
import { epochSeconds, type LedgerEntry } from './ledger.ts';
import { ConfigMapLedgerStore } from './store.ts';

const cluster = 'ledger.example.com';
const instanceId = 'i-0123456789abcdef1';

/** The gauge's value for a kind and instance group in a registry's exposition, if exported. */
async function gaugeValue(registry: Registry, kind: string, group: string): Promise<number | undefined> {
  const line = (await registry.metrics())
    .split('\n')
    .find((l) => l.startsWith(`${expiryGaugeName}{kind="${kind}",instance_group="${group}"}`));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

describe('certificate expiry ledger, from a join to the gauge', () => {
  let aws: AwsSimulator;
  let kube: SimApiServer;
  let ca: CertificateAuthority;
  let boot: ConfiguredBootstrap;
  const registry = new Registry();

  before(async () => {
    aws = await startAwsSimulator({ throttling: false });
    aws.ec2.addInstances([
      {
        id: instanceId,
        zone: 'us-east-1a',
        cluster,
        instanceGroup: 'nodes-us-east-1a',
        privateIp: '10.1.2.4',
      },
    ]);
    kube = await startApiServer();
    ca = createCa();
    boot = await startConfiguredBootstrap({
      config: parseConfig({
        clusterName: cluster,
        cloud: 'aws',
        server: {
          Listen: ':3988',
          provider: { aws: { nodesRoles: [`nodes.${cluster}`], Region: aws.region } },
          certNames: ['kubelet', 'kube-proxy'],
        },
        bootstrap: { policies: [{ name: 'aws', stsEndpoint: aws.endpoint }] },
      }),
      kubeConfig: kube.kubeConfig(),
      vfsOptions: {},
      cloud: { aws: { endpoint: aws.endpoint, credentials: aws.credentials } },
      registry,
      server: { listen: '127.0.0.1:0', serverNames: { ipAddresses: ['127.0.0.1'] }, ca },
    });
  });
  after(async () => {
    await boot.close();
    await kube.close();
    await aws.close();
  });

  /** nodeup's request for a kubelet and a kube-proxy certificate; resolves with the certificates. */
  function join(): Promise<Record<string, string>> {
    const key = () =>
      encodePem('RSA PUBLIC KEY', spkiOf(generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey));
    const body = JSON.stringify({
      apiVersion: kopsApiVersion,
      certs: { kubelet: key(), 'kube-proxy': key() },
      keypairIDs: {},
    });
    const credentials = aws.sts.addInstanceProfileSession(`nodes.${cluster}`, instanceId);
    const authorization = signAwsStsProof(body, credentials, aws.region, 1);
    return new Promise((resolve, reject) => {
      const req = request(
        `${boot.server.url}/bootstrap`,
        { method: 'POST', ca: bundlePem(ca), headers: { 'content-type': 'application/json', authorization } },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c));
          res.on('end', () =>
            res.statusCode === 200
              ? resolve((JSON.parse(text) as { Certs: Record<string, string> }).Certs)
              : reject(new Error(`${res.statusCode}: ${text}`)),
          );
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  }

  test('the leader exports the earliest expiry per kind and instance group; a restarted controller the same', async () => {
    const certs = await join();
    await boot.ledger.flush();
    const notAfter = (pem: string) => epochSeconds(new Date(new X509Certificate(pem).validTo));

    const gauge = boot.components.find((c) => c.name === 'certificate-expiry-gauge');
    assert.ok(gauge, 'the gauge is one of the leader-only components');
    assert.equal(
      await gaugeValue(registry, 'kubelet', 'nodes-us-east-1a'),
      undefined,
      'not exported before leading',
    );
    const leading = new AbortController();
    const running = gauge.start(leading.signal);
    try {
      // The component reads the ledger as it starts; wait for that read (bounded by the test timeout).
      let value = await gaugeValue(registry, 'kubelet', 'nodes-us-east-1a');
      while (value === undefined) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        value = await gaugeValue(registry, 'kubelet', 'nodes-us-east-1a');
      }
      assert.equal(value, notAfter(certs['kubelet'] as string));
      assert.equal(
        await gaugeValue(registry, 'kube-proxy', 'nodes-us-east-1a'),
        notAfter(certs['kube-proxy'] as string),
      );
      assert.equal(await gaugeValue(registry, 'ca', ''), notAfter(ca.signer.certificate.pem));
      const lifetime = (pem: string) =>
        notAfter(pem) - epochSeconds(new Date(new X509Certificate(pem).validFrom));
      assert.equal(
        Number(
          (await registry.metrics())
            .split('\n')
            .find((l) =>
              l.startsWith(`${lifetimeGaugeName}{kind="kubelet",instance_group="nodes-us-east-1a"}`),
            )
            ?.split(' ')
            .at(-1),
        ),
        lifetime(certs['kubelet'] as string),
      );
      const serving = await gaugeValue(registry, 'kops-controller-serving', '');
      assert.ok(
        serving !== undefined && serving > epochSeconds(new Date()),
        `serving certificate: ${serving}`,
      );
    } finally {
      leading.abort();
      await running;
    }
    assert.equal(
      await gaugeValue(registry, 'kubelet', 'nodes-us-east-1a'),
      undefined,
      'a former leader exports nothing',
    );

    // A new process (a restart, or another replica taking the lease): only the API server is shared.
    const restarted = new Registry();
    const fresh = new CertificateExpiryGauge({
      store: new ConfigMapLedgerStore({ core: makeClients(kube.kubeConfig()).core }),
      registry: restarted,
    });
    await fresh.refresh();
    assert.equal(
      await gaugeValue(restarted, 'kubelet', 'nodes-us-east-1a'),
      notAfter(certs['kubelet'] as string),
    );
  });
});

describe('the expiry gauge when leadership ends during a slow read', () => {
  const day = 86_400;
  const now = epochSeconds(new Date());
  /** A kubelet certificate of one day's lifetime with an hour left: its renewal is late, so it would alert. */
  const late = (instance: string, notAfter = now + 3600): LedgerEntry => ({
    kind: 'kubelet',
    instanceGroup: 'nodes',
    instance,
    serial: `s-${instance}`,
    notBefore: notAfter - day,
    notAfter,
  });
  let sim: SimApiServer;
  let namespace = 0;

  before(async () => {
    sim = await startApiServer();
    sim.store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'alive' } });
  });
  after(async () => {
    await sim.close();
  });

  /** A ledger of its own namespace holding `entries`, read through client-node as the gauge's store is. */
  async function ledger(entries: LedgerEntry[]): Promise<ConfigMapLedgerStore> {
    const { core } = makeClients(sim.kubeConfig());
    const name = `slow-${namespace++}`;
    await core.createNamespace({ body: { metadata: { name } } });
    const store = new ConfigMapLedgerStore({ core, namespace: name });
    await store.add(entries);
    return store;
  }

  /** Counts the requests for `resource` and `verb` reaching the simulator while `count` is called. */
  function arrivals(resource: string, verb: string): { count: () => number; restore: () => void } {
    let seen = 0;
    const plan = sim.faults.plan.bind(sim.faults);
    sim.faults.plan = (r, v, ns) => {
      if (r === resource && v === verb) seen++;
      return plan(r, v, ns);
    };
    return {
      count: () => seen,
      restore: () => {
        sim.faults.plan = plan;
        sim.faults.reset();
      },
    };
  }

  async function until(what: string, check: () => boolean): Promise<void> {
    for (let i = 0; i < 500 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.ok(check(), `never happened: ${what}`);
  }

  /** Rejects after `ms`: a refresh that does not end in time fails the test instead of hanging it. */
  function within<T>(ms: number, work: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    return Promise.race([
      work,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`not done within ${ms} ms`)), ms);
      }),
    ]).finally(() => clearTimeout(timer));
  }

  /** Leads until `arrived`, then ends the term; returns how long the gauge took to stop. */
  async function stopWhen(gauge: CertificateExpiryGauge, arrived: () => boolean): Promise<number> {
    const leading = new AbortController();
    const run = gauge.start(leading.signal);
    try {
      await until('the slow call is in flight', arrived);
      return msToStop(leading, run);
    } finally {
      leading.abort();
      await run;
    }
  }

  test('the ledger list is slow (API server brownout): the gauge stops within a second', async () => {
    const store = await ledger([late('alive')]);
    const lists = arrivals('configmaps', 'list');
    try {
      sim.faults.latency(5_000, { resource: 'configmaps', verbs: ['list'] });
      const gauge = new CertificateExpiryGauge({ store, registry: new Registry(), intervalMs: 50 });
      const ms = await stopWhen(gauge, () => lists.count() > 0);
      assert.ok(ms < 1_000, `stopped ${Math.round(ms)} ms after leadership ended`);
    } finally {
      lists.restore();
    }
  });

  test('the Node lookups are slow: the gauge stops within a second and removes nothing', async () => {
    const gone = ['gone-1', 'gone-2', 'gone-3', 'gone-4'];
    const store = await ledger([late('alive'), ...gone.map((name) => late(name))]);
    const readNode = httpsNodeReader(sim.kubeConfig());
    const reads = arrivals('nodes', 'get');
    try {
      sim.faults.latency(3_000, { resource: 'nodes', verbs: ['get'] });
      const gauge = new CertificateExpiryGauge({
        store,
        nodeExists: async (name) => (await readNode(name)) !== undefined,
        registry: new Registry(),
        intervalMs: 50,
      });
      const ms = await stopWhen(gauge, () => reads.count() > 0);
      assert.ok(ms < 1_000, `stopped ${Math.round(ms)} ms after leadership ended`);
      assert.equal(gauge.earliest(), undefined, 'a former leader exports nothing');
    } finally {
      reads.restore();
    }
    // The lookups answered after the term ended: nothing was removed on their word.
    await new Promise((resolve) => setTimeout(resolve, 3_500));
    assert.deepEqual((await store.list()).map((e) => e.instance).sort(), ['alive', ...gone]);
  });

  test('a refresh cut short by the abort keeps what was exported before', async () => {
    const store = await ledger([late('alive', now + 7200)]);
    const gauge = new CertificateExpiryGauge({ store, registry: new Registry() });
    await gauge.refresh();
    const before = gauge.earliest();
    assert.equal(before?.[0]?.notAfter, now + 7200);
    await store.add([late('alive-too')]);
    const lists = arrivals('configmaps', 'list');
    try {
      sim.faults.latency(3_000, { resource: 'configmaps', verbs: ['list'] });
      const leading = new AbortController();
      const refresh = gauge.refresh(leading.signal);
      await until('the list is in flight', () => lists.count() > 0);
      leading.abort();
      await assert.rejects(within(1_000, refresh), (err: Error) => err.name === 'AbortError');
      assert.equal(gauge.earliest(), before, 'nothing new published');
    } finally {
      lists.restore();
    }
  });

  test('Node lookups that never answer cost the read its deadline, not 200 lookups of 10 s each', async () => {
    const gone = Array.from({ length: 50 }, (_, i) => `hung-${i}`);
    const store = await ledger(gone.map((name) => late(name)));
    let asked = 0;
    const gauge = new CertificateExpiryGauge({
      store,
      nodeExists: () => {
        asked++;
        return new Promise<boolean>(() => undefined);
      },
      registry: new Registry(),
      readTimeoutMs: 200,
    });
    await within(2_000, gauge.refresh());
    assert.ok(asked > 0);
    assert.equal(gauge.earliest()?.length, 1, 'exported, the unanswered nodes counted as existing');
    assert.equal((await store.list()).length, gone.length, 'nothing removed on a lookup that did not answer');
  });
});
