import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { NotFoundError, RateLimitedError, UnavailableError } from '../errors.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { CircuitBreaker, PausedCallError } from './circuit-breaker.ts';
import { isDependencyFault } from './dependency.ts';
import { ProofRejected, readCloud } from './policies/cloud-id.ts';

/** A breaker on a clock the test moves: opens after 3 failures over 1 s, probes every 2 s. */
function breaker() {
  const clock = { now: 0 };
  const logs = capturedLogger();
  const circuit = new CircuitBreaker({
    name: 'STS',
    failuresToOpen: 3,
    minFailingMs: 1_000,
    probeIntervalMs: 2_000,
    logger: logs.logger,
    now: () => clock.now,
  });
  const lines = () => logs.lines.map((line) => JSON.parse(line) as Record<string, unknown>);
  return { circuit, clock, lines };
}

/** `n` failed calls, `stepMs` apart. */
function fail(circuit: CircuitBreaker, clock: { now: number }, n: number, stepMs: number): void {
  for (let i = 0; i < n; i++) {
    circuit.admit().failed();
    clock.now += stepMs;
  }
}

describe('CircuitBreaker', () => {
  test('a burst of failures shorter than minFailingMs never opens it; a run that lasts does', () => {
    const { circuit, clock } = breaker();
    fail(circuit, clock, 50, 10);
    assert.equal(circuit.state, 'closed', '50 failures in 0.5 s are a blip');
    clock.now += 500;
    circuit.admit().failed();
    assert.equal(circuit.state, 'open');
    assert.throws(() => circuit.admit(), PausedCallError);
  });

  test('an answer between failures starts the count again', () => {
    const { circuit, clock } = breaker();
    fail(circuit, clock, 2, 600);
    circuit.admit().answered();
    fail(circuit, clock, 2, 600);
    assert.equal(circuit.state, 'closed');
    fail(circuit, clock, 1, 600);
    assert.equal(circuit.state, 'open');
  });

  test('open: one probe per interval, none while one is out; its failure keeps it open, its answer closes it', () => {
    const { circuit, clock, lines } = breaker();
    fail(circuit, clock, 3, 600);
    assert.throws(() => circuit.admit(), /STS has failed every call for \d+ s; calls to it are paused/);
    clock.now += 2_000;
    const probe = circuit.admit();
    assert.throws(() => circuit.admit(), PausedCallError, 'a second call while the probe is out');
    probe.failed();
    assert.throws(() => circuit.admit(), PausedCallError, 'the next probe waits a whole interval');
    clock.now += 2_000;
    circuit.admit().answered();
    assert.equal(circuit.state, 'closed');
    circuit.admit().answered();
    const said = lines();
    assert.deepEqual(
      said.map((l) => l['msg']),
      [
        'dependency failed every call: calls to it paused, one tried at each interval until it answers',
        'dependency answers again: calls to it resumed',
      ],
    );
    assert.equal(said[1]?.['callsPaused'], 3);
  });

  test('a probe that reached nothing (released) neither closes it nor spends the interval', () => {
    const { circuit, clock } = breaker();
    fail(circuit, clock, 3, 600);
    clock.now += 2_000;
    circuit.admit().release();
    assert.equal(circuit.state, 'open');
    circuit.admit().answered();
    assert.equal(circuit.state, 'closed');
  });

  test('a call let through before it opened closes it when it is answered; its failure changes nothing', () => {
    const { circuit, clock } = breaker();
    const early = circuit.admit();
    const late = circuit.admit();
    fail(circuit, clock, 3, 600);
    late.failed();
    assert.equal(circuit.state, 'open');
    early.answered();
    assert.equal(circuit.state, 'closed');
  });

  test('a ticket settles once', () => {
    const { circuit, clock } = breaker();
    const ticket = circuit.admit();
    fail(circuit, clock, 2, 600);
    ticket.answered();
    ticket.failed();
    ticket.failed();
    fail(circuit, clock, 2, 600);
    assert.equal(circuit.state, 'closed', 'the answer reset the count; the repeats were ignored');
  });
});

describe('readCloud with a circuit (one read per proof: Scaleway, OpenStack, Azure)', () => {
  const step = (circuit: CircuitBreaker) => ({
    call: 'servers.get x',
    denial: 'Nova does not vouch for server x',
    dependency: 'policy:openstack' as const,
    timeoutMs: 1_000,
    circuit,
  });

  test("the cloud's verdict is an answer; its failures open the circuit, and then the read is not even started", async () => {
    const { circuit, clock } = breaker();
    await assert.rejects(
      readCloud(() => Promise.reject(new NotFoundError('no server x')), step(circuit)),
      ProofRejected,
    );
    let reads = 0;
    const failing = () => {
      reads++;
      return Promise.reject(new UnavailableError('Nova answered 503'));
    };
    for (let i = 0; i < 3; i++) {
      await assert.rejects(readCloud(failing, step(circuit)), isDependencyFault);
      clock.now += 600;
    }
    assert.equal(reads, 3);
    const paused = await readCloud(failing, step(circuit)).catch((err: unknown) => err);
    assert.ok(isDependencyFault(paused), 'a paused read is a fault (503), never a denial');
    assert.ok(paused.cause instanceof PausedCallError);
    assert.equal(reads, 3, 'no read was started');
    clock.now += 2_000;
    assert.equal(await readCloud(() => Promise.resolve('server x'), step(circuit)), 'server x');
    assert.equal(circuit.state, 'closed');
  });

  test('attack: throttling, which anyone can cause by volume, is an answer and never pauses the reads', async () => {
    const { circuit, clock } = breaker();
    for (let i = 0; i < 10; i++) {
      await assert.rejects(
        readCloud(() => Promise.reject(new RateLimitedError('429 Too Many Requests')), step(circuit)),
        isDependencyFault,
      );
      clock.now += 600;
    }
    assert.equal(circuit.state, 'closed');
  });
});
