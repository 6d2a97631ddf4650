import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { credentials, type ServiceError, status } from '@grpc/grpc-js';
import { type ChallengeListener, startChallengeServer } from '../agent/challenge-server.ts';
import { KopsError } from '../errors.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import { challengeServerName } from '../protocol/challenge.ts';
import { challengeClientCertificate } from '../protocol/challenge-certificates.ts';
import { callbackService } from '../protocol/challenge-grpc.ts';
import { type EgressProxySim, startEgressProxy } from '../sim/egress-proxy.ts';
import {
  CallbackRefusedError,
  challengeProxy,
  GrpcCallbackChallenger,
  nodeClockReason,
} from './challenge-caller.ts';

const clusterName = 'minimal.example.com';
const ca = createCa();
const clusterCaPem = bundlePem(ca);

function refusedWith(pattern: RegExp) {
  return (err: unknown) => {
    assert.ok(err instanceof CallbackRefusedError, `expected a refusal, got ${String(err)}`);
    assert.match(err.message, pattern);
    return true;
  };
}

describe('callback challenge, controller side against the node server (gRPC over TLS on loopback)', () => {
  let node: ChallengeListener;
  let other: ChallengeListener;
  const challenger = new GrpcCallbackChallenger({ ca, clusterName, timeoutMs: 5000 });

  before(async () => {
    node = await startChallengeServer({ clusterName, clusterCaPem, listen: '127.0.0.1:0' });
    other = await startChallengeServer({ clusterName, clusterCaPem, listen: '127.0.0.1:0' });
  });
  after(async () => {
    await node.stop();
    await other.stop();
  });

  test('the node that made the request answers sha256(secret || nonce): accepted', async () => {
    await challenger.challenge(node.endpoint, node.createChallenge());
  });

  test("callback answered by the wrong host (another node's server) is refused: its certificate is not the one the request carried", async () => {
    await assert.rejects(
      challenger.challenge(other.endpoint, node.createChallenge()),
      refusedWith(/another certificate|certificate its request did not carry/),
    );
  });

  test('a request that carries another server certificate than the node at the endpoint presents is refused', async () => {
    const foreign = other.createChallenge();
    // The attacker's request names its own server's certificate; the cloud's address is the real node.
    await assert.rejects(challenger.challenge(node.endpoint, foreign), refusedWith(/certificate/));
  });

  test('a pinned certificate that does not name challenge-server.<cluster> is refused', async () => {
    const foreignCluster = await startChallengeServer({
      clusterName: 'other.example.com',
      clusterCaPem,
      listen: '127.0.0.1:0',
    });
    try {
      await assert.rejects(
        challenger.challenge(foreignCluster.endpoint, foreignCluster.createChallenge()),
        refusedWith(new RegExp(`does not name ${challengeServerName(clusterName)}`)),
      );
    } finally {
      await foreignCluster.stop();
    }
  });

  test('the wrong secret is refused (the answer does not match)', async () => {
    const claim = node.createChallenge();
    const wrong = { ...claim, secret: Buffer.alloc(claim.secret.length, 7) };
    await assert.rejects(
      challenger.challenge(node.endpoint, wrong),
      refusedWith(/answered the callback challenge wrongly/),
    );
  });

  test('a replayed challenge id is refused: the node answers each id once', async () => {
    const claim = node.createChallenge();
    await challenger.challenge(node.endpoint, claim);
    await assert.rejects(challenger.challenge(node.endpoint, claim), refusedWith(/not found/));
  });

  test('a claim whose certificate cannot be read is refused, not a fault of this server', async () => {
    const claim = {
      ...node.createChallenge(),
      serverCertificatePem: '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n',
    };
    await assert.rejects(challenger.challenge(node.endpoint, claim), refusedWith(/unreadable/));
  });

  test('an unknown challenge id is refused', async () => {
    const claim = { ...node.createChallenge(), challengeId: 'ab'.repeat(16) };
    await assert.rejects(challenger.challenge(node.endpoint, claim), refusedWith(/not found/));
  });

  test('a server that never answers ends at the deadline as a fault to retry, not a refusal', async () => {
    const sockets = new Set<import('node:net').Socket>();
    const silent: Server = createServer((socket) => sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as { port: number }).port;
    const hurried = new GrpcCallbackChallenger({ ca, clusterName, timeoutMs: 500 });
    try {
      await assert.rejects(hurried.challenge(`127.0.0.1:${port}`, node.createChallenge()), (err: unknown) => {
        assert.ok(err instanceof KopsError && err.kind === 'unavailable', String(err));
        assert.ok(!(err instanceof CallbackRefusedError));
        return true;
      });
    } finally {
      for (const socket of sockets) socket.destroy();
      silent.close();
    }
  });

  test('nothing listening at the endpoint is a fault to retry', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as { port: number }).port;
    await new Promise((resolve) => closed.close(resolve));
    await assert.rejects(
      challenger.challenge(`127.0.0.1:${port}`, node.createChallenge()),
      (err: unknown) => {
        assert.ok(err instanceof KopsError && err.kind === 'unavailable', String(err));
        return true;
      },
    );
  });

  test("a node whose clock is hours behind the controller's accepts its client certificate: it is backdated 48 h, as kops'", async () => {
    const at = Date.now();
    const ahead = new GrpcCallbackChallenger({
      ca,
      clusterName,
      timeoutMs: 5000,
      now: () => new Date(at + 6 * 3_600_000),
    });
    const credential = ahead.clientCredential();
    assert.equal(credential.notAfter.getTime() - at, 7 * 3_600_000, 'one hour from its own clock');
    await ahead.challenge(node.endpoint, node.createChallenge());
  });

  test('the client certificate is renewed after a step back of the wall clock, and after 45 minutes of monotonic time whatever the wall clock says', () => {
    let wall = Date.parse('2026-03-01T13:00:00Z'); // an hour ahead when it is made
    let monotonic = 0;
    const challenger = new GrpcCallbackChallenger({
      ca,
      clusterName,
      now: () => new Date(wall),
      monotonic: () => monotonic,
    });
    const first = challenger.clientCredential();
    wall -= 3_600_000; // NTP steps it back: it was dated by a clock running ahead
    monotonic += 1_000;
    const second = challenger.clientCredential();
    assert.notEqual(second, first, 'made again after the step');
    assert.equal(challenger.clientCredential(), second, 'kept while the clocks agree');
    // The wall clock is stepped back by two hours: by it, the certificate has hours left; it is
    // made again at once, then kept for 45 minutes of monotonic time.
    wall -= 2 * 3_600_000;
    const third = challenger.clientCredential();
    assert.notEqual(third, second);
    // A wall clock that then stands still (a paused or badly slewed one) does not stretch it either.
    monotonic += 44 * 60_000;
    assert.equal(challenger.clientCredential(), third, '44 minutes old: reused');
    monotonic += 60_000;
    assert.notEqual(challenger.clientCredential(), third, '45 minutes old: renewed');
  });

  for (const [skew, pattern] of [
    [16, /not valid yet by this controller's clock.*node's clock is ahead of this controller's/],
    [-50, /expired by this controller's clock.*node's clock is behind this controller's/],
  ] as const) {
    test(`a node whose clock is ${Math.abs(skew)} minutes ${skew > 0 ? 'ahead' : 'behind'} is a fault (retried once its clock is set), with a reason that names the clocks`, async () => {
      const skewed = await startChallengeServer({
        clusterName,
        clusterCaPem,
        listen: '127.0.0.1:0',
        now: () => new Date(Date.now() + skew * 60_000),
      });
      try {
        await assert.rejects(
          challenger.challenge(skewed.endpoint, skewed.createChallenge()),
          (err: unknown) => {
            assert.ok(err instanceof KopsError && err.kind === 'unavailable', String(err));
            assert.equal(err.details?.['reason'], nodeClockReason);
            assert.match(err.message, pattern);
            return true;
          },
        );
      } finally {
        await skewed.stop();
      }
    });
  }

  test("attack: another certificate than the request carried, out of its dates too, is still refused (never a 503 naming the node's address)", async () => {
    // The real node is at the endpoint, its clock an hour ahead (its certificate not valid yet here);
    // the request carries someone else's certificate, correctly dated.
    const ahead = await startChallengeServer({
      clusterName,
      clusterCaPem,
      listen: '127.0.0.1:0',
      now: () => new Date(Date.now() + 3_600_000),
    });
    try {
      await assert.rejects(
        challenger.challenge(ahead.endpoint, node.createChallenge()),
        refusedWith(/presented a certificate its request did not carry/),
      );
    } finally {
      await ahead.stop();
    }
  });

  test('the client certificate is cached and renewed before its hour runs out', () => {
    let now = new Date('2026-03-01T12:00:00Z');
    const clock = new GrpcCallbackChallenger({ ca, clusterName, now: () => now });
    const first = clock.clientCredential();
    assert.equal(first.notAfter.getTime() - now.getTime(), 3_600_000);
    now = new Date(now.getTime() + 40 * 60_000);
    assert.equal(clock.clientCredential(), first, 'still 20 minutes left: reused');
    now = new Date(now.getTime() + 10 * 60_000);
    const second = clock.clientCredential();
    assert.notEqual(second, first, '10 minutes left: renewed');
    assert.ok(second.notAfter > first.notAfter);
  });
});

describe('callback challenge, the node server refuses callers that are not the controller', () => {
  let node: ChallengeListener;
  before(async () => {
    node = await startChallengeServer({ clusterName, clusterCaPem, listen: '127.0.0.1:0' });
  });
  after(() => node.stop());

  /** Calls the node directly with `client` (a certificate and key), skipping the name check. */
  function call(claimPem: string, client: { certificatePem: string; keyPem: string }, challengeId: string) {
    const Service = callbackService();
    const stub = new Service(
      node.endpoint,
      credentials.createSsl(
        Buffer.from(claimPem),
        Buffer.from(client.keyPem),
        Buffer.from(client.certificatePem),
        {
          checkServerIdentity: () => undefined,
        },
      ),
      { 'grpc.ssl_target_name_override': challengeServerName(clusterName) },
    ) as unknown as {
      Challenge(r: object, o: object, cb: (err: ServiceError | null) => void): void;
      close(): void;
    };
    return new Promise<ServiceError | null>((resolve) =>
      stub.Challenge(
        { challenge_id: challengeId, challenge_random: Buffer.alloc(16) },
        { deadline: Date.now() + 5000 },
        (err) => {
          stub.close();
          resolve(err);
        },
      ),
    ).then((err) => err);
  }

  test('a caller whose client certificate is from another CA gets nothing, and the challenge stays unanswered', async () => {
    const claim = node.createChallenge();
    const foreign = challengeClientCertificate(createCa(), clusterName);
    const err = await call(claim.serverCertificatePem, foreign, claim.challengeId);
    assert.ok(err, 'the call must fail');
    assert.notEqual(err.code, status.OK);
    // The id was never reached: the controller can still complete it.
    await new GrpcCallbackChallenger({ ca, clusterName }).challenge(node.endpoint, claim);
  });

  test('a caller with a cluster-CA certificate of another name is refused (UNAUTHENTICATED) before the id is looked up', async () => {
    const claim = node.createChallenge();
    const impostor = challengeClientCertificate(ca, 'other.example.com');
    const err = await call(claim.serverCertificatePem, impostor, claim.challengeId);
    assert.equal(err?.code, status.UNAUTHENTICATED);
    await new GrpcCallbackChallenger({ ca, clusterName }).challenge(node.endpoint, claim);
  });

  test('a caller without a client certificate gets nothing', async () => {
    const claim = node.createChallenge();
    const Service = callbackService();
    const stub = new Service(
      node.endpoint,
      credentials.createSsl(Buffer.from(claim.serverCertificatePem), null, null, {
        checkServerIdentity: () => undefined,
      }),
      { 'grpc.ssl_target_name_override': challengeServerName(clusterName) },
    ) as unknown as {
      Challenge(r: object, o: object, cb: (err: ServiceError | null) => void): void;
      close(): void;
    };
    const err = await new Promise<ServiceError | null>((resolve) =>
      stub.Challenge(
        { challenge_id: claim.challengeId, challenge_random: Buffer.alloc(16) },
        { deadline: Date.now() + 5000 },
        resolve,
      ),
    );
    stub.close();
    assert.ok(err && err.code !== status.OK);
    await new GrpcCallbackChallenger({ ca, clusterName }).challenge(node.endpoint, claim);
  });
});

describe('callback challenge and the egress proxy: decided as every other client, tunnelled by this code', () => {
  const kopsNoProxy = '127.0.0.1,localhost,172.20.0.0/16,2001:db8:1::/48';
  const names = ['HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy', 'NO_PROXY', 'no_proxy'];
  const saved = Object.fromEntries(names.map((name) => [name, process.env[name]]));
  let proxy: EgressProxySim;
  let node: ChallengeListener;
  let nodeV4Other: ChallengeListener;
  let nodeV6: ChallengeListener;
  const challenger = new GrpcCallbackChallenger({ ca, clusterName, timeoutMs: 5000 });
  const portOf = (listener: ChallengeListener) =>
    listener.endpoint.slice(listener.endpoint.lastIndexOf(':') + 1);

  before(async () => {
    proxy = await startEgressProxy();
    // As kops sets them: both spellings, and a NO_PROXY with the cluster's networks (an IPv6 one too).
    Object.assign(process.env, {
      HTTPS_PROXY: proxy.url,
      https_proxy: proxy.url,
      HTTP_PROXY: proxy.url,
      http_proxy: proxy.url,
      NO_PROXY: kopsNoProxy,
      no_proxy: kopsNoProxy,
    });
    node = await startChallengeServer({ clusterName, clusterCaPem, listen: '127.0.0.1:0' });
    nodeV4Other = await startChallengeServer({ clusterName, clusterCaPem, listen: '127.0.0.2:0' });
    nodeV6 = await startChallengeServer({ clusterName, clusterCaPem, listen: '[::1]:0' });
  });
  after(async () => {
    for (const name of names) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
    await proxy.close();
    await node.stop();
    await nodeV4Other.stop();
    await nodeV6.stop();
  });

  test('the decision is proxyFor: IPv4 and IPv6 CIDRs of NO_PROXY and loopback go direct, anything else through the proxy', () => {
    const env = { HTTPS_PROXY: 'http://proxy.corp:3128', NO_PROXY: kopsNoProxy };
    assert.equal(challengeProxy('172.20.5.6:3989', env), undefined);
    assert.equal(challengeProxy('[2001:db8:1::5]:3989', env), undefined);
    assert.equal(challengeProxy('127.0.0.2:3989', env), undefined);
    assert.equal(challengeProxy('[::1]:3989', env), undefined);
    assert.equal(challengeProxy('172.21.0.5:3989', env)?.href, 'http://proxy.corp:3128/');
    assert.equal(challengeProxy('[2001:db8:2::5]:3989', env)?.href, 'http://proxy.corp:3128/');
    // Upper case is read too, as Go (grpc-js alone reads only the lower-case names).
    assert.equal(
      challengeProxy('172.21.0.5:3989', { HTTPS_PROXY: 'proxy.corp:3128' })?.href,
      'http://proxy.corp:3128/',
    );
  });

  test('a loopback node (IPv4 and IPv6) is challenged directly, the proxy never asked', async () => {
    proxy.tunnels.length = 0;
    await challenger.challenge(nodeV4Other.endpoint, nodeV4Other.createChallenge());
    await challenger.challenge(nodeV6.endpoint, nodeV6.createChallenge());
    assert.deepEqual(proxy.tunnels, []);
  });

  test('a node not in NO_PROXY is challenged through a well-formed CONNECT (IPv6 bracketed), end to end', async () => {
    const port = portOf(node);
    for (const endpoint of [`172.21.0.5:${port}`, `[2001:db8:2::5]:${port}`]) {
      proxy.tunnels.length = 0;
      // The simulated proxy connects every tunnel to 127.0.0.1 on its port: the node's server.
      await challenger.challenge(endpoint, node.createChallenge());
      assert.deepEqual(proxy.tunnels, [endpoint]);
    }
  });

  test('a proxy that refuses the tunnel is a fault to retry that names the proxy, not a refusal', async () => {
    proxy.refuse = () => true;
    try {
      await assert.rejects(
        challenger.challenge(`172.21.0.5:${portOf(node)}`, node.createChallenge()),
        (err: unknown) => {
          assert.ok(err instanceof KopsError && err.kind === 'unavailable', String(err));
          assert.ok(!(err instanceof CallbackRefusedError));
          assert.match(
            (err as Error).message,
            /egress proxy http:\/\/127\.0\.0\.1:\d+ did not open a tunnel.*403/,
          );
          return true;
        },
      );
    } finally {
      proxy.refuse = () => false;
    }
  });
});
