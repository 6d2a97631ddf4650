import assert from 'node:assert/strict';
import { type TestContext, test } from 'node:test';
import { issueForFacts } from '../bootstrap/issue.ts';
import type { NodeFacts } from '../bootstrap/types.ts';
import { createCa } from '../pki/ca.ts';
import { generateKey } from '../pki/keys.ts';
import { publicKeyRequest } from '../pki/profiles.ts';
import { FakeClock } from '../testing/fake-clock.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { epochSeconds, type LedgerEntry } from './ledger.ts';
import { entriesOfIssued, entryOfPem, LedgerRecorder } from './recorder.ts';

const facts: NodeFacts = {
  nodeName: 'node-1',
  instanceGroup: 'nodes-a',
  dnsNames: [],
  ipAddresses: [],
  evidence: {},
};

test('issueForFacts, the one issuance every path shares, tells the ledger each certificate and its node', async () => {
  const ca = createCa();
  let entries: LedgerEntry[] = [];
  const issued = await issueForFacts(
    ca,
    { kubelet: publicKeyRequest(generateKey()), 'kube-proxy': publicKeyRequest(generateKey()) },
    facts,
    { onIssued: (certificates, verified) => (entries = entriesOfIssued(certificates, verified)) },
  );
  assert.deepEqual(
    entries.map((e) => [e.kind, e.instanceGroup, e.instance, e.serial, e.notAfter]),
    (['kube-proxy', 'kubelet'] as const).map((profile) => [
      profile,
      'nodes-a',
      'node-1',
      issued[profile]?.serialHex,
      epochSeconds(issued[profile]?.notAfter as Date),
    ]),
  );
});

test('entryOfPem reads a held certificate: the CA, its serial and its validity', () => {
  const ca = createCa();
  const entry = entryOfPem('ca', 'kubernetes-ca.1', ca.signer.certificate.pem);
  assert.equal(entry.kind, 'ca');
  assert.equal(entry.instanceGroup, '');
  assert.equal(BigInt(`0x${entry.serial}`).toString(), ca.signer.certificate.parsed.serialDecimal);
  assert.doesNotMatch(entry.serial, /^00|[A-F]/);
  assert.equal(entry.notAfter, epochSeconds(ca.signer.certificate.parsed.notAfter));
});

test('held certificates are recorded with a hold that the recorder renews; records are batched', async () => {
  const batches: LedgerEntry[][] = [];
  const now = new Date('2030-01-01T00:00:00Z');
  const recorder = new LedgerRecorder({
    store: {
      add: async (entries) => {
        batches.push([...entries]);
        return { writes: 1, droppedOverCap: 0, bytes: 100 };
      },
    },
    holdIntervalMs: 3_600_000,
    now: () => now,
  });
  const held = {
    kind: 'ca',
    instanceGroup: '',
    instance: 'kubernetes-ca.1',
    serial: '01',
    notBefore: 0,
    notAfter: 2e9,
  };
  recorder.hold([held]);
  recorder.record([{ ...held, kind: 'kubelet', instance: 'node-1' }]);
  recorder.record([{ ...held, kind: 'kubelet', instance: 'node-1', serial: '02' }]);
  await recorder.stop();
  assert.deepEqual(batches, [
    [
      { ...held, heldUntil: epochSeconds(now) + 3 * 3600 },
      { ...held, kind: 'kubelet', instance: 'node-1', serial: '02' },
    ],
  ]);
});

/** A kubelet certificate's entry for `instance`, expiring in 2033. */
function entry(instance: string): LedgerEntry {
  return { kind: 'kubelet', instanceGroup: 'nodes', instance, serial: '01', notBefore: 0, notAfter: 2e9 };
}

/** The recorder's interval timer mocked, and a clock (wall and monotonic) that moves with it, from 2030-01-01. */
function mockedTime(t: TestContext) {
  t.mock.timers.enable({ apis: ['setInterval'] });
  let now = Date.UTC(2030, 0, 1);
  return {
    nowMs: () => now,
    async tick(ms: number) {
      now += ms;
      t.mock.timers.tick(ms);
      // The flush's store call and what follows it.
      for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
    },
  };
}

test('flushes keep to the byte budget: after a large write the next waits for it; small writes go every interval', async (t) => {
  const { nowMs, tick } = mockedTime(t);
  const written: { atMs: number; entries: number }[] = [];
  let nextBytes = 4 * 1024 * 1024;
  const recorder = new LedgerRecorder({
    store: {
      add: async (entries) => {
        written.push({ atMs: nowMs(), entries: entries.length });
        return { writes: 16, droppedOverCap: 0, bytes: nextBytes };
      },
    },
    flushIntervalMs: 1_000,
    writeBytesPerSecond: 1024 * 1024,
    now: () => new Date(nowMs()),
    monotonic: nowMs,
  });
  const started = nowMs();
  recorder.start();
  recorder.record([entry('node-1')]);
  await tick(1_000);
  assert.deepEqual(written, [{ atMs: started + 1_000, entries: 1 }]);
  // 4 MiB written at 1 MiB/s: nothing for 4 s, however many joins arrive meanwhile.
  nextBytes = 100;
  for (let i = 2; i <= 4; i++) {
    recorder.record([entry(`node-${i}`)]);
    await tick(1_000);
  }
  assert.equal(written.length, 1);
  await tick(1_000);
  assert.deepEqual(written.at(-1), { atMs: started + 5_000, entries: 3 });
  // A small write earns no wait beyond the interval.
  recorder.record([entry('node-5')]);
  await tick(1_000);
  assert.deepEqual(written.at(-1), { atMs: started + 6_000, entries: 1 });
  // Stopping writes what is pending whatever the budget says.
  nextBytes = 64 * 1024 * 1024;
  recorder.record([entry('node-6')]);
  await tick(1_000);
  recorder.record([entry('node-7')]);
  await recorder.stop();
  assert.deepEqual(written.at(-1), { atMs: started + 7_000, entries: 1 });
  assert.equal(written.length, 5);
});

test('a refused write waits longer before the next, up to a minute, and is logged when it starts, every ten minutes and when it ends', async (t) => {
  const { nowMs, tick } = mockedTime(t);
  const attempts: number[] = [];
  let refuse = true;
  const { logger, lines } = capturedLogger();
  const recorder = new LedgerRecorder({
    store: {
      add: async (entries) => {
        attempts.push(nowMs());
        if (refuse)
          throw new Error('HTTP 403: configmaps "kops-controller-certificate-ledger-01" is forbidden');
        return { writes: 1, droppedOverCap: 0, bytes: entries.length * 100 };
      },
    },
    flushIntervalMs: 1_000,
    now: () => new Date(nowMs()),
    monotonic: nowMs,
    logger,
  });
  const started = nowMs();
  recorder.start();
  recorder.record([
    {
      kind: 'kubelet',
      instanceGroup: 'nodes',
      instance: 'node-1',
      serial: '01',
      notBefore: 0,
      notAfter: 2e9,
    },
  ]);
  await tick(1_000);
  assert.equal(attempts.length, 1);
  await recorder.flushDue();
  assert.equal(
    attempts.length,
    1,
    'a reader of the ledger (the expiry gauge) does not write through the backoff',
  );
  for (let s = 0; s < 25 * 60; s++) await tick(1_000);
  const gaps = attempts.slice(1).map((at, i) => (at - (attempts[i] as number)) / 1000);
  // Jitter adds up to a fifth, and a flush waits for the next 1 s tick: 2 s doubling to 60 s.
  assert.deepEqual(
    gaps
      .slice(0, 6)
      .map((g) => [2, 4, 8, 16, 32, 60].findIndex((base) => g >= base && g <= Math.ceil(base * 1.2) + 1)),
    [0, 1, 2, 3, 4, 5],
    `gaps ${gaps.slice(0, 12).join(', ')}`,
  );
  assert.ok(
    gaps.slice(5).every((g) => g >= 60 && g <= 73),
    `gaps ${gaps.slice(0, 12).join(', ')}`,
  );
  assert.ok(
    attempts.length < 30,
    `${attempts.length} attempts in 25 minutes (one every flush would be 1,500)`,
  );
  refuse = false;
  for (let s = 0; s < 80; s++) await tick(1_000);
  await recorder.stop();
  const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.deepEqual(
    records.map((r) => [r['level'], r['msg']]),
    [
      ['warn', 'certificate ledger not written; retrying'],
      ['warn', 'certificate ledger not written; retrying'],
      ['warn', 'certificate ledger not written; retrying'],
      ['info', 'certificate ledger written again'],
    ],
    `${attempts.length} attempts; lines at ${records.map((r) => r['time']).join(', ')} since ${new Date(started).toISOString()}`,
  );
  assert.equal(records[0]?.['pending'], 1);
  assert.ok((records[1]?.['repeated'] as number) > 0);
});

test('a step of the wall clock does not hold the timed flushes: the byte budget is measured on the monotonic clock', async () => {
  // The wall clock ran an hour ahead at the last write; NTP then steps it back.
  const clock = new FakeClock();
  let writes = 0;
  const recorder = new LedgerRecorder({
    store: {
      add: async () => {
        writes++;
        return { writes: 1, droppedOverCap: 0, bytes: 2048 };
      },
    },
    now: () => new Date(clock.now()),
    monotonic: () => clock.monotonic(),
  });
  recorder.record([entry('node-0')]);
  await recorder.flushDue();
  clock.stepWall(-3_600_000);
  await clock.advance(1_000);
  recorder.record([entry('node-1')]);
  await recorder.flushDue();
  assert.equal(writes, 2, 'the write a second after the step is not held for the hour the clock went back');
});

test('entries dropped while too many wait: one warning when dropping starts and one every ten minutes with the count, not one per issuance', async () => {
  const clock = new FakeClock();
  let refuse = true;
  const { logger, lines } = capturedLogger();
  const recorder = new LedgerRecorder({
    store: {
      add: async () => {
        if (refuse) throw new Error('HTTP 503: the API server is unavailable');
        return { writes: 1, droppedOverCap: 0, bytes: 100 };
      },
    },
    maxPending: 3,
    now: () => new Date(clock.now()),
    monotonic: () => clock.monotonic(),
    logger,
  });
  const dropLines = () =>
    lines
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((r) => /too many entries waiting/.test(String(r['msg'])));
  // The ledger cannot be written; 3 entries wait, and every issuance after them is dropped.
  recorder.record([entry('node-0'), entry('node-1'), entry('node-2')]);
  await recorder.flush();
  recorder.record([entry('node-3'), entry('node-4')]);
  for (let i = 5; i < 1_005; i++) {
    recorder.record([entry(`node-${i}`)]);
    await clock.advance(100);
  }
  assert.equal(dropLines().length, 1, 'one warning for 1,001 issuances dropping entries within 100 s');
  assert.equal(dropLines()[0]?.['level'], 'warn');
  assert.equal(dropLines()[0]?.['dropped'], 2);
  await clock.advance(600_000);
  recorder.record([entry('node-late')]);
  assert.equal(dropLines().length, 2, 'again once ten minutes have passed');
  assert.equal(
    dropLines()[1]?.['dropped'],
    1_003,
    'with every entry dropped since the ledger was last written',
  );
  assert.equal(dropLines()[1]?.['repeated'], 1_000, 'and the warnings held back');
  // The ledger is written again: the next overflow is a new one, logged at once.
  refuse = false;
  await recorder.flush();
  for (let i = 0; i < 5; i++) recorder.record([entry(`node-again-${i}`)]);
  assert.equal(dropLines().length, 3);
  assert.equal(dropLines()[2]?.['dropped'], 1, 'counted from the last write');
});
