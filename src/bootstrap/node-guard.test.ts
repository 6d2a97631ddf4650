import assert from 'node:assert/strict';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, describe, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { ConflictError, ForbiddenError, UnavailableError } from '../errors.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { kubeletNodeStatus } from '../sim/dev-cluster.ts';
import { createCertificateAuthority, issueServingCertificate } from '../sim/tls.ts';
import { CircuitBreaker, PausedCallError } from './circuit-breaker.ts';
import { pausedGuardFault } from './context.ts';
import { isDependencyFault } from './dependency.ts';
import {
  assertNodeNotRegistered,
  type GuardReadSource,
  guardPause,
  httpsNodeReader,
  maxWatchSilenceMs,
  type NodePresence,
  type NodeReader,
  presenceOf,
  watchedNodeReader,
} from './node-guard.ts';

const sim = await startApiServer();
after(() => sim.close());
sim.store.create({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name: 'ready-1' },
  status: kubeletNodeStatus('ready-1', '10.0.0.1'),
});
sim.store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'new-1' }, status: { conditions: [] } });

test('reads Nodes over one pooled connection: absent, not Ready, Ready', async () => {
  const read = httpsNodeReader(sim.kubeConfig());
  assert.equal(await read('never-registered'), undefined);
  await assertNodeNotRegistered(read, 'never-registered');
  await assertNodeNotRegistered(read, 'new-1');
  await assert.rejects(
    assertNodeNotRegistered(read, 'ready-1'),
    (err: unknown) => err instanceof ConflictError && err.details?.['reason'] === 'node-already-registered',
  );
  // Names are path-escaped: a crafted name cannot address another resource.
  assert.equal(await read('../namespaces/kube-system'), undefined);
});

test('a refused or failed read is an error, never "not registered"', async () => {
  const stranger = httpsNodeReader(sim.kubeConfig({ name: 'stranger', groups: [] }));
  await assert.rejects(stranger('ready-1'), ForbiddenError);
  sim.faults.errors({ resource: 'nodes', verbs: ['get'], status: 503, count: 1 });
  await assert.rejects(httpsNodeReader(sim.kubeConfig())('ready-1'), UnavailableError);
});

test('the guard cannot read the Node (403, 429, 503, no answer in time): a dependency fault, so the node retries', async () => {
  const isApiServerFault = (err: unknown) =>
    isDependencyFault(err) && err.details?.['dependency'] === 'kubernetes-api';
  const stranger = httpsNodeReader(sim.kubeConfig({ name: 'stranger', groups: [] }));
  await assert.rejects(assertNodeNotRegistered(stranger, 'ready-1'), isApiServerFault, 'forbidden');
  sim.faults.latency(2_000, { resource: 'nodes', verbs: ['get'] });
  try {
    const slow = httpsNodeReader(sim.kubeConfig(), { timeoutMs: 200 });
    await assert.rejects(assertNodeNotRegistered(slow, 'ready-1'), isApiServerFault, 'slow');
  } finally {
    sim.faults.reset();
  }
  for (const status of [429, 503, 500] as const) {
    sim.faults.errors({ resource: 'nodes', verbs: ['get'], status, count: 1 });
    await assert.rejects(
      assertNodeNotRegistered(httpsNodeReader(sim.kubeConfig()), 'ready-1'),
      isApiServerFault,
      `HTTP ${status}`,
    );
  }
});

test('a pooled connection the server dropped while idle is retried, not reported as an outage', async () => {
  const ca = await createCertificateAuthority();
  const serving = await issueServingCertificate(ca);
  let requests = 0;
  const server = createServer({ key: serving.privateKey, cert: serving.certificate }, (req, res) => {
    requests++;
    // Every second request on a connection finds it gone, as after the server's keep-alive timeout.
    if (requests % 2 === 0) {
      req.socket.destroy();
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"kind":"Status","code":404}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromClusterAndUser(
      {
        name: 'c',
        server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
        caData: Buffer.from(ca.certificate).toString('base64'),
        skipTLSVerify: false,
      },
      { name: 'u', token: 't' },
    );
    const read = httpsNodeReader(kubeConfig);
    assert.equal(await read('a'), undefined);
    assert.equal(await read('b'), undefined);
    assert.equal(requests, 3);
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

describe('watchedNodeReader', () => {
  const readyNode = { status: { conditions: [{ type: 'Ready', status: 'True' }] } };
  /** A Node watch in a given state, and a direct reader that records what it was asked. */
  function setup(watch: { synced: boolean; silenceMs: number | undefined; known: string[] }) {
    const presence: NodePresence = {
      hasSynced: () => watch.synced,
      watchSilenceMs: () => watch.silenceMs,
      get: (name) => (watch.known.includes(name) ? true : undefined),
    };
    const directReads: string[] = [];
    const direct: NodeReader = async (name) => {
      directReads.push(name);
      return name === 'ready-1' ? readyNode : undefined;
    };
    const sources: GuardReadSource[] = [];
    const read = watchedNodeReader(presenceOf(presence), direct, {
      onRead: (source) => sources.push(source),
    });
    return { read, directReads, sources };
  }

  test('a current watch answers "not registered" for a name it does not know, with no read', async () => {
    const { read, directReads, sources } = setup({ synced: true, silenceMs: 1_000, known: [] });
    assert.equal(await read('new-node'), undefined);
    assert.deepEqual(directReads, []);
    assert.deepEqual(sources, ['watch']);
  });

  test('a Node the watch knows is read from the API server, so the 409 rests on its answer', async () => {
    const { read, directReads, sources } = setup({ synced: true, silenceMs: 0, known: ['ready-1'] });
    await assert.rejects(assertNodeNotRegistered(read, 'ready-1'), ConflictError);
    assert.deepEqual(directReads, ['ready-1']);
    assert.deepEqual(sources, ['api']);
  });

  const notCurrent: [string, { synced: boolean; silenceMs: number | undefined }][] = [
    ['not synced yet', { synced: false, silenceMs: 0 }],
    ['no open stream, or one that has delivered nothing yet', { synced: true, silenceMs: undefined }],
    ['silent for longer than a missed bookmark', { synced: true, silenceMs: maxWatchSilenceMs + 1 }],
  ];
  for (const [state, watch] of notCurrent) {
    test(`a watch that is ${state} is not trusted: every lookup reads the Node`, async () => {
      const { read, directReads, sources } = setup({ ...watch, known: [] });
      // The Node is Ready but the lagging watch has not seen it: the read finds it.
      await assert.rejects(assertNodeNotRegistered(read, 'ready-1'), ConflictError);
      assert.equal(await read('new-node'), undefined);
      assert.deepEqual(directReads, ['ready-1', 'new-node']);
      assert.deepEqual(sources, ['api', 'api']);
    });
  }

  test('a failed direct read is an error, never "not registered"', async () => {
    const presence: NodePresence = {
      hasSynced: () => false,
      watchSilenceMs: () => undefined,
      get: () => undefined,
    };
    const read = watchedNodeReader(presenceOf(presence), async () => {
      throw new UnavailableError('read node x: connection refused');
    });
    await assert.rejects(read('x'), UnavailableError);
  });
});

describe('guardPause: a request the guard could not judge now is turned away before its policies run', () => {
  /** A circuit that is open after three failed reads, on a clock the test moves. */
  function openCircuit() {
    const clock = { now: 0 };
    const circuit = new CircuitBreaker({
      name: 'Node reads',
      failuresToOpen: 3,
      minFailingMs: 0,
      probeIntervalMs: 2_000,
      now: () => clock.now,
    });
    for (let i = 0; i < 3; i++) circuit.admit().failed();
    return { circuit, clock };
  }
  const current = () => ({ current: true, known: false });
  const stale = () => ({ current: false, known: false });

  /**
   * A reader of Nodes through `circuit`, as httpsNodeReader reads them: each read waits for the test
   * to settle it (`up`: the API server answers; else it fails), and the reads are counted.
   */
  function reader(circuit: CircuitBreaker) {
    const state = { reads: 0, up: false, pending: [] as (() => void)[] };
    const read: NodeReader = async () => {
      const ticket = circuit.admit();
      state.reads++;
      await new Promise<void>((resolve) => state.pending.push(resolve));
      if (state.up) {
        ticket.answered();
        return undefined;
      }
      ticket.failed();
      throw new UnavailableError('the API server answered 503');
    };
    const settle = () => {
      for (const resolve of state.pending.splice(0)) resolve();
    };
    return { read, state, settle };
  }

  test('open and the watch not current: a fault naming the API server, whose cause says the reads are paused; no read', async () => {
    const { circuit } = openCircuit();
    const { read, state } = reader(circuit);
    const fault = await guardPause(circuit, stale, read)();
    assert.ok(fault && isDependencyFault(fault));
    assert.equal(fault.dependency, 'kubernetes-api');
    assert.ok(fault.cause instanceof PausedCallError);
    assert.ok(await guardPause(circuit, undefined, read)(), 'without a watch (nodeGuard: api) as well');
    assert.equal(state.reads, 0);
  });

  test('the watch current or the circuit closed: the request goes on, with no read', async () => {
    const { circuit } = openCircuit();
    const { read, state } = reader(circuit);
    assert.equal(await guardPause(circuit, current, read)(), undefined, 'the watch answers unknown names');
    const closed = new CircuitBreaker({ name: 'Node reads' });
    assert.equal(await guardPause(closed, stale, read)(), undefined);
    assert.equal(state.reads, 0);
  });

  test('a probe due: the pause makes it, one read, and only the request that made it goes on once it is answered; the crowd meanwhile is turned away', async () => {
    const { circuit, clock } = openCircuit();
    const { read, state, settle } = reader(circuit);
    const pause = guardPause(circuit, stale, read);
    clock.now += 2_000;
    const asked = Array.from({ length: 11 }, () => pause());
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(state.reads, 1, 'one probe, whichever request made it');
    // The API server still fails: every one of them is turned away, and the next probe waits an interval.
    settle();
    const faults = await Promise.all(asked);
    assert.ok(faults.every((fault) => fault && isDependencyFault(fault)));
    assert.equal(faults.filter((fault) => fault?.cause instanceof PausedCallError).length, 10);
    assert.equal(circuit.state, 'open');
    assert.ok((await pause())?.cause instanceof PausedCallError);
    assert.equal(state.reads, 1);
    // It answers again: the next probe closes the circuit, and its request goes on.
    clock.now += 2_000;
    state.up = true;
    const next = pause();
    await new Promise((resolve) => setImmediate(resolve));
    settle();
    assert.equal(await next, undefined);
    assert.equal(circuit.state, 'closed');
    assert.equal(state.reads, 2);
  });

  test('a renewal, which the guard does not judge, is never turned away by it', async () => {
    const { circuit } = openCircuit();
    const context = { guardPaused: guardPause(circuit, stale, reader(circuit).read) };
    const renewal = { proof: { kind: 'node-renewal', token: 'x' } } as const;
    const join = { proof: { kind: 'aws-sts', version: 2, token: 'x' } } as const;
    // Only the fields pausedGuardFault reads.
    const ask = (request: unknown) =>
      pausedGuardFault(context as never, request as Parameters<typeof pausedGuardFault>[1]);
    assert.equal(await ask(renewal), undefined);
    assert.ok(await ask(join));
  });

  test('the reader: a 503 is a failed read; a Node, a 404 or a 429 an answer', async () => {
    const api = await startApiServer();
    try {
      const circuit = new CircuitBreaker({ name: 'Node reads', failuresToOpen: 2, minFailingMs: 0 });
      const read = httpsNodeReader(api.kubeConfig(), { circuit, timeoutMs: 2_000 });
      assert.equal(await read('nobody'), undefined);
      // Throttled: the API server is up, and what throttles the reads is volume anyone can send.
      api.faults.errors({ rate: 1, status: 429 });
      for (let i = 0; i < 3; i++) await assert.rejects(read('nobody'));
      assert.equal(circuit.state, 'closed');
      api.faults.reset();
      api.faults.errors({ rate: 1, status: 503 });
      await assert.rejects(read('nobody'));
      await assert.rejects(read('nobody'));
      assert.equal(circuit.state, 'open');
      await assert.rejects(read('nobody'), PausedCallError);
    } finally {
      await api.close();
    }
  });
});
