/**
 * A renewal is bound to the machine its certificate was issued to, not to whichever machine bears the
 * node name now (red team findings 1 and 3), end to end through real sockets: the bootstrap server
 * composed from a kops config as `run` composes it (the cloud's policy, then `renewal`), the
 * simulated API server and cloud, nodes that join with their cloud proof and register a Ready Node,
 * then renewals with a node's kubelet key on the native `/v1/certificates` (the real `join`) and on
 * kops' `/bootstrap` (nodeup's body, `x-kops-renewal`).
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join as joinPath } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { signAwsStsProof } from '../agent/aws-proof.ts';
import { join } from '../agent/join.ts';
import { type CurrentCredentials, readCurrentCredentials } from '../agent/renewal.ts';
import { type ConfiguredBootstrap, startConfiguredBootstrap } from '../cli/bootstrap-server.ts';
import { formatAwsProviderID } from '../cloud/aws/providerid.ts';
import { parseConfig } from '../config/loader.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import { generateKey } from '../pki/keys.ts';
import { issueCertificate, publicKeyRequest } from '../pki/profiles.ts';
import { parseCertificate } from '../pki/x509.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import { simulatorAuth } from '../sim/gce/clients.ts';
import { type GceSimulator, startGceSimulator } from '../sim/gce/simulator.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { incarnationIn, kopsKubelet, renewalPaths } from '../testing/renewal-paths.ts';
import { ipBasedNodeName } from './policies/aws.ts';

const hourMs = 3_600_000;
// Made a month ago, so that it can have issued the kops-style certificates of the tests back then.
const ca = createCa({ now: new Date(Date.now() - 30 * 24 * hourMs) });
const caPem = bundlePem(ca);

/** One configured bootstrap server in front of a simulated API server, and what the tests need of it. */
interface Cluster {
  name: string;
  sim: SimApiServer;
  boot: ConfiguredBootstrap;
  /** Every line the server logged (the audit trail among them). */
  lines: string[];
  registry: Registry;
  root: string;
}

async function startCluster(
  name: string,
  cloudConfig: Record<string, unknown>,
  cloud: Parameters<typeof startConfiguredBootstrap>[0]['cloud'],
): Promise<Cluster> {
  const sim = await startApiServer();
  const { logger, lines } = capturedLogger();
  const registry = new Registry();
  const boot = await startConfiguredBootstrap({
    config: parseConfig({ clusterName: name, ...cloudConfig }),
    kubeConfig: sim.kubeConfig(),
    vfsOptions: {},
    cloud,
    registry,
    logger,
    server: {
      listen: '127.0.0.1:0',
      serverNames: { ipAddresses: ['127.0.0.1'] },
      ca,
      apiServer: sim.url,
      rateLimit: { burst: 10_000, ratePerSecond: 10_000 },
    },
  });
  return {
    name,
    sim,
    boot,
    lines,
    registry,
    root: await mkdtemp(joinPath(tmpdir(), 'kops-incarnation-e2e-')),
  };
}

async function stopCluster(cluster: Cluster): Promise<void> {
  await cluster.boot.close();
  await cluster.sim.close();
  await rm(cluster.root, { recursive: true, force: true });
}

/** The real `join` into a fresh directory of `cluster.root` with `proof`; resolves with the directory. */
async function joinWith(
  cluster: Cluster,
  nodeName: string,
  proof: Parameters<typeof join>[0]['proof'],
  servingCertificate = true,
): Promise<string> {
  const dir = await mkdtemp(joinPath(cluster.root, 'node-'));
  await join({
    server: cluster.boot.server.url,
    caBundlePem: caPem + cluster.sim.caCertificate,
    apiServer: cluster.sim.url,
    nodeName,
    dir,
    proof,
    servingCertificate,
    timeoutMs: 20_000,
    retry: { initialMs: 100, maxMs: 1000 },
  });
  return dir;
}

/** A Node of `name`, Ready or not, with `providerID` (what the kubelet registers). */
function registerNode(cluster: Cluster, name: string, providerID: string, ready = true): void {
  cluster.sim.store.create({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name },
    spec: { providerID },
    status: { conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] },
  } as never);
}

/** The Node of `name` is gone (the machine went away and its Node with it). */
function removeNode(cluster: Cluster, name: string): void {
  cluster.sim.store.delete('nodes', undefined, name);
}

const { renewNative, nativeRefusal, renewKops, kopsRefusal } = renewalPaths<Cluster>(caPem, joinWith);

/**
 * A kubelet client certificate as kops issues it — no incarnation extension, NotBefore 48 hours
 * before it was issued at `issuedAt` (kops' pkg/pki) — with its key.
 */
function kopsIssued(nodeName: string, issuedAt: Date): CurrentCredentials {
  const key = generateKey('ecdsa-p256');
  const issued = issueCertificate(
    ca,
    'kubelet',
    publicKeyRequest(key),
    { name: nodeName },
    // This CA backdates five minutes: issued "then", it starts 48 hours before issuedAt.
    { now: new Date(issuedAt.getTime() - 48 * hourMs + 5 * 60_000), lifetimeMs: 455 * 24 * hourMs },
  );
  const certificate = new X509Certificate(issued.pem);
  assert.equal(parseCertificate(issued.der).extensions.incarnationId, undefined);
  // Certificates carry whole seconds.
  assert.equal(
    certificate.validFromDate.getTime(),
    Math.floor(issuedAt.getTime() / 1000) * 1000 - 48 * hourMs,
  );
  return { nodeName, certificate, key };
}

describe('GCE: an instance recreated under its name (MIG recreate, autohealing)', () => {
  const zone = 'us-central1-a';
  const name = 'incarnation-gce.example.com';
  const audience = `https://kops-controller.internal.${name}:3988`;
  let gce: GceSimulator;
  let cluster: Cluster;
  let serial = 0;

  before(async () => {
    gce = await startGceSimulator();
    cluster = await startCluster(
      name,
      {
        cloud: 'gce',
        server: { Listen: ':3988', provider: { gce: { projectID: gce.world.defaultProject } } },
        bootstrap: {
          policies: [{ name: 'gce', jwksUrl: gce.jwksUri, audience }, { name: 'renewal' }],
        },
      },
      { gce: { endpoint: gce.endpoint, auth: simulatorAuth(gce) } },
    );
  });
  after(async () => {
    await stopCluster(cluster);
    await gce.close();
  });

  /** A fresh instance of the `nodes` group: its name, providerID and numeric id. */
  function launch() {
    const [instance] = gce.world.seedInstanceGroup({
      zone,
      instanceGroup: 'nodes',
      mig: `a-nodes-${++serial}`,
      count: 1,
      clusterName: name,
    });
    assert.ok(instance);
    return {
      name: instance.name,
      id: instance.id,
      providerID: `gce://${gce.world.defaultProject}/${zone}/${instance.name}`,
    };
  }

  /** The instance joins with an identity token from its metadata server and registers its Node, Ready. */
  async function joinedReady(instance: { name: string; providerID: string }): Promise<CurrentCredentials> {
    const dir = await joinWith(
      cluster,
      instance.name,
      async () => `x-gce-identity ${gce.identityToken(zone, instance.name, { audience, format: 'full' })}`,
    );
    registerNode(cluster, instance.name, instance.providerID);
    return readCurrentCredentials(dir);
  }

  test("attack: the previous machine's kubelet key renews no more, on /v1/certificates nor kops' /bootstrap; the new machine's own does", async () => {
    const first = launch();
    const stolen = await joinedReady(first);

    // The node is compromised and its key copied; the operator recreates the instance.
    const second = gce.world.recreateInstance(zone, first.name);
    assert.notEqual(second.id, first.id);
    const told = new RegExp(
      `renewal refused: the certificate was issued to another machine of that name: instance id ${first.id}, but ${first.name} is now instance id ${second.id}`,
    );
    assert.match(await nativeRefusal(cluster, stolen), told);
    assert.match(await kopsRefusal(cluster, stolen), told);
    assert.equal(incarnationIn(stolen.certificate), first.id, 'the certificate names its machine');

    // The new machine joins once the old kubelet is gone (its Node with it), and renews.
    removeNode(cluster, first.name);
    const dir = await joinWith(
      cluster,
      first.name,
      async () => `x-gce-identity ${gce.identityToken(zone, first.name, { audience, format: 'full' })}`,
    );
    registerNode(cluster, first.name, first.providerID);
    const own = await readCurrentCredentials(dir);
    assert.equal(incarnationIn(own.certificate), second.id);
    const renewed = await renewNative(cluster, own);
    assert.equal(incarnationIn(renewed.certificate), second.id, 'the renewal names the machine again');
    assert.equal(incarnationIn(kopsKubelet(await renewKops(cluster, renewed))), second.id);
    // And the stolen key is still refused afterwards.
    assert.match(await nativeRefusal(cluster, stolen), told);
  });

  test('a kops-issued certificate (no extension, NotBefore 48 h back) of the current machine renews; one issued before the recreate is refused: issued before this machine existed', async () => {
    const instance = launch();
    registerNode(cluster, instance.name, instance.providerID);
    const createdAt = new Date(Date.now() - 3 * 24 * hourMs);
    gce.world.recreateInstance(zone, instance.name, { creationTimestamp: createdAt });
    const current = kopsIssued(instance.name, new Date(createdAt.getTime() + 60_000));
    const renewed = kopsKubelet(await renewKops(cluster, current));
    assert.equal(
      incarnationIn(renewed),
      gce.world.instance(gce.world.defaultProject, zone, instance.name).id,
    );
    assert.ok((await renewNative(cluster, current)).certificate.subject.includes(instance.name));

    const previous = kopsIssued(instance.name, new Date(createdAt.getTime() - 10 * 60_000));
    const told =
      /renewal refused: the certificate was issued before this machine existed: it is valid from \S+ and instance \d+ was created \(or last started\) at /;
    assert.match(await nativeRefusal(cluster, previous), told);
    assert.match(await kopsRefusal(cluster, previous), told);
  });
});

describe('AWS with useIPBasedNodeNames: another instance takes the private IP', () => {
  const name = 'incarnation-aws.example.com';
  let aws: AwsSimulator;
  let cluster: Cluster;
  let serial = 0;

  before(async () => {
    aws = await startAwsSimulator({ throttling: false });
    cluster = await startCluster(
      name,
      {
        cloud: 'aws',
        server: {
          Listen: ':3988',
          provider: {
            aws: { nodesRoles: [`nodes.${name}`], Region: aws.region, useIPBasedNodeNames: true },
          },
        },
        bootstrap: { policies: [{ name: 'aws', stsEndpoint: aws.endpoint }, { name: 'renewal' }] },
      },
      { aws: { endpoint: aws.endpoint, credentials: aws.credentials } },
    );
  });
  after(async () => {
    await stopCluster(cluster);
    await aws.close();
  });

  /** A running instance of the `nodes` group on `privateIp`, its node name and providerID. */
  function launch(privateIp: string) {
    const id = `i-${(++serial).toString(16).padStart(17, '0')}`;
    const zone = `${aws.region}a`;
    aws.ec2.addInstances([{ id, zone, cluster: name, instanceGroup: 'nodes', privateIp }]);
    const session = aws.sts.addInstanceProfileSession(`nodes.${name}`, id);
    return {
      id,
      session,
      nodeName: ipBasedNodeName(privateIp, aws.region),
      providerID: formatAwsProviderID(zone, id),
    };
  }

  /** The instance joins with its instance profile's STS proof and registers its Node, Ready. */
  async function joinedReady(instance: ReturnType<typeof launch>): Promise<CurrentCredentials> {
    const dir = await joinWith(cluster, instance.nodeName, async (body) =>
      signAwsStsProof(body, instance.session, aws.region, 2),
    );
    registerNode(cluster, instance.nodeName, instance.providerID);
    return readCurrentCredentials(dir);
  }

  test("attack: a terminated instance's kubelet key renews no more once another instance has its IP (and name), on either path; that instance's own does", async () => {
    const a = launch('10.0.0.5');
    const stolen = await joinedReady(a);
    aws.ec2.setInstanceState(a.id, 'terminated');
    removeNode(cluster, a.nodeName);

    const b = launch('10.0.0.5');
    assert.equal(b.nodeName, a.nodeName);
    const own = await joinedReady(b);
    const told = new RegExp(
      `renewal refused: the certificate was issued to another machine of that name: instance id ${a.id}, but ${a.nodeName.replaceAll('.', '\\.')} is now instance id ${b.id}`,
    );
    assert.match(await nativeRefusal(cluster, stolen), told);
    assert.match(await kopsRefusal(cluster, stolen), told);
    assert.equal(incarnationIn(stolen.certificate), a.id);
    assert.equal(incarnationIn((await renewNative(cluster, own)).certificate), b.id);
    assert.equal(incarnationIn(kopsKubelet(await renewKops(cluster, own))), b.id);
  });

  test('a stopped and started instance renews the certificate it got before (same instance id, new LaunchTime); a kops-issued one from before the start is refused, one from after renews', async () => {
    const instance = launch('10.0.1.7');
    const own = await joinedReady(instance);
    aws.ec2.setInstanceState(instance.id, 'stopped');
    const startedAt = new Date();
    aws.ec2.startInstance(instance.id, startedAt);
    assert.equal(incarnationIn((await renewNative(cluster, own)).certificate), instance.id);

    const beforeStart = kopsIssued(instance.nodeName, new Date(startedAt.getTime() - 2 * hourMs));
    assert.match(
      await nativeRefusal(cluster, beforeStart),
      /renewal refused: the certificate was issued before this machine existed/,
    );
    const afterStart = kopsIssued(instance.nodeName, new Date(startedAt.getTime() + 1000));
    assert.equal(incarnationIn(kopsKubelet(await renewKops(cluster, afterStart))), instance.id);
  });
});

describe('unmarked: refuse ends the allowance for certificates that name no machine', () => {
  const name = 'incarnation-refuse.example.com';
  let aws: AwsSimulator;
  let cluster: Cluster;

  before(async () => {
    aws = await startAwsSimulator({ throttling: false });
    cluster = await startCluster(
      name,
      {
        cloud: 'aws',
        server: { Listen: ':3988', provider: { aws: { nodesRoles: [`nodes.${name}`], Region: aws.region } } },
        bootstrap: {
          policies: [
            { name: 'aws', stsEndpoint: aws.endpoint },
            { name: 'renewal', unmarked: 'refuse' },
          ],
        },
      },
      { aws: { endpoint: aws.endpoint, credentials: aws.credentials } },
    );
  });
  after(async () => {
    await stopCluster(cluster);
    await aws.close();
  });

  /** What the unmarked-renewal counter says for `verdict`. */
  async function unmarkedCount(verdict: string): Promise<number> {
    const metric = await cluster.registry
      .getSingleMetric('kops_controller_bootstrap_unmarked_renewals_total')
      ?.get();
    return metric?.values.find((v) => v.labels['verdict'] === verdict)?.value ?? 0;
  }

  test("a kops-issued certificate of the machine of now (no extension, issued after it started) is refused on both paths and counted; the machine's own marked one renews", async () => {
    const id = 'i-0000000000000f001';
    const zone = `${aws.region}a`;
    const startedAt = new Date(Date.now() - 2 * 24 * hourMs);
    aws.ec2.addInstances([{ id, zone, cluster: name, instanceGroup: 'nodes', launchTime: startedAt }]);
    const session = aws.sts.addInstanceProfileSession(`nodes.${name}`, id);
    const dir = await joinWith(cluster, id, async (body) => signAwsStsProof(body, session, aws.region, 2));
    registerNode(cluster, id, formatAwsProviderID(zone, id));
    const own = await readCurrentCredentials(dir);

    const kops = kopsIssued(id, new Date(startedAt.getTime() + 60 * 60_000));
    const told =
      /renewal refused: the certificate names no machine and this cluster renews only those that do \(unmarked: refuse\); instance i-0000000000000f001 joins again with its cloud proof/;
    assert.match(await nativeRefusal(cluster, kops), told);
    assert.match(await kopsRefusal(cluster, kops), told);
    assert.equal(await unmarkedCount('deny'), 2);

    assert.equal(incarnationIn((await renewNative(cluster, own)).certificate), id);
    assert.equal(incarnationIn(kopsKubelet(await renewKops(cluster, own))), id);
    assert.equal(await unmarkedCount('deny'), 2, 'a certificate naming its machine is not counted');
    assert.equal(await unmarkedCount('approve'), 0);
  });
});
