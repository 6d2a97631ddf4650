import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DependencyFaultError } from '../../bootstrap/dependency.ts';
import { metalPolicy } from '../../bootstrap/policies/metal.ts';
import { ConfigError, UnavailableError } from '../../errors.ts';
import { olderCopyGraceMs } from '../../statestore/older-copy.ts';
import { openVfs } from '../../statestore/open.ts';
import type { StoredObject, Vfs } from '../../statestore/types.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { capturedLogger } from '../../testing/log-capture.ts';
import { silentServer } from '../../testing/silent-server.ts';
import { InventoryStore, parseInventory } from './inventory.ts';

const fingerprint = `SHA256:${'A'.repeat(43)}`;
const sample = `
apiVersion: kops-controller.k8s.io/v1alpha1
kind: MetalInventory
hosts:
  - name: cp-1
    instanceGroup: control-plane-dc1
    addresses: [10.0.0.10, "2001:db8::10", cp-1.dc1.example.com]
    mac: "52:54:00:AA:BB:01"
    sshHostKeyFingerprint: ${fingerprint}
  - name: node-1
    instanceGroup: nodes
    addresses: [10.0.1.11]
    providerID: metal://rack4-u12
`;

test('a valid inventory parses and looks hosts up by providerID, name and address', () => {
  const inventory = parseInventory(sample, 'memfs://x/metal/inventory.yaml');
  assert.equal(inventory.hosts.length, 2);
  assert.equal(inventory.lookup('metal://cp-1')?.instanceGroup, 'control-plane-dc1');
  assert.equal(inventory.lookup('cp-1')?.mac, '52:54:00:aa:bb:01');
  assert.equal(inventory.lookup('metal://rack4-u12')?.name, 'node-1');
  assert.equal(inventory.lookup('metal://node-1'), undefined, 'an explicit providerID replaces the default');
  assert.equal(inventory.findByAddress('2001:db8::10')?.name, 'cp-1');
  assert.equal(inventory.findByAddress('10.9.9.9'), undefined);
  assert.equal(inventory.lookup('cp-1')?.sshHostKeyFingerprint, fingerprint);
});

test('invalid inventories give precise errors naming the field', () => {
  const cases: Array<[string, RegExp]> = [
    [
      'hosts: [{ name: a, instanceGroup: nodes, addresses: [10.0.0.300] }]',
      /hosts\[0\]\.addresses\[0\]: must be an IPv4 or IPv6/,
    ],
    [
      'hosts: [{ name: A_B, instanceGroup: nodes, addresses: [10.0.0.1] }]',
      /hosts\[0\]\.name: must be a lower-case DNS name/,
    ],
    [
      'hosts: [{ name: a, instanceGroup: nodes, addresses: [] }]',
      /hosts\[0\]\.addresses: list at least one address/,
    ],
    [
      'hosts: [{ name: a, instanceGroup: nodes, addresses: [10.0.0.1], role: x }]',
      /hosts\[0\]\.role: unknown field/,
    ],
    ['hosts: [{ name: a, addresses: [10.0.0.1] }]', /hosts\[0\]\.instanceGroup/],
    [
      'hosts: [{ name: a, instanceGroup: n, addresses: [10.0.0.1], mac: "52:54" }]',
      /hosts\[0\]\.mac: must be a MAC/,
    ],
    [
      'hosts: [{ name: a, instanceGroup: n, addresses: [10.0.0.1], sshHostKeyFingerprint: MD5:x }]',
      /sshHostKeyFingerprint: must be an OpenSSH SHA256/,
    ],
    [
      'hosts: [{ name: a, instanceGroup: n, addresses: [10.0.0.1], providerID: aws:///x }]',
      /providerID: must be metal:\/\/<id>/,
    ],
    [
      'hosts: [{ name: a, instanceGroup: n, addresses: [10.0.0.1] }, { name: b, instanceGroup: n, addresses: [10.0.0.1] }]',
      /hosts\[1\]\.addresses\[0\]: address 10\.0\.0\.1 is also claimed by host a/,
    ],
    [
      'hosts: [{ name: a, instanceGroup: n, addresses: [10.0.0.1] }, { name: a, instanceGroup: n, addresses: [10.0.0.2] }]',
      /hosts\[1\]\.name: duplicate name a/,
    ],
    ['kind: Inventory\nhosts: []', /kind: /],
    ['hosts: [', /line \d+, column \d+/],
    ['- a\n- b', /expected a mapping with a "hosts" list/],
    ['', /expected a mapping/],
  ];
  for (const [text, message] of cases) {
    assert.throws(
      () => parseInventory(text, 'memfs://x/metal/inventory.yaml'),
      (err: Error) =>
        err instanceof ConfigError && message.test(err.message) && err.message.startsWith('memfs://x/'),
      text,
    );
  }
});

test('a YAML syntax error names its position once, as the config and kops files do', () => {
  assert.throws(() => parseInventory('hosts: []\nhosts: []\n', 'inventory.yaml'), {
    name: 'ConfigError',
    message: 'inventory.yaml: line 2, column 1: Map keys must be unique',
  });
});

test('what the YAML library throws rather than reports is a ConfigError naming the source: an alias bomb, an alias to no anchor, collections nested thousands deep', () => {
  // The fuzzing campaign's reproducers (tmp/fuzz-s11), in kind.
  const bomb = `hosts:\n  - &a [x,x,x,x,x,x,x,x,x,x]\n  - &b [${'*a,'.repeat(9)}*a]\n  - &c [${'*b,'.repeat(9)}*b]\n  - [${'*c,'.repeat(9)}*c]\n`;
  for (const [text, message] of [
    [bomb, /^inventory\.yaml: Excessive alias count/],
    ['hosts:\n  - name: host-1\n    instanceGroup: *odes\n', /^inventory\.yaml: Unresolved alias/],
    // The yaml library reports some overflows of its stack itself, as a syntax error.
    [
      `hosts:\n  - name: host-1\n    instanceGroup: nodes\n${'- '.repeat(3_000)}\n    addresses: []\n`,
      /^inventory\.yaml: (?:collections nested too deeply|line \d+, column \d+: Maximum call stack size exceeded)/,
    ],
  ] as const) {
    assert.throws(
      () => parseInventory(text, 'inventory.yaml'),
      (err: Error) => err instanceof ConfigError && message.test(err.message),
      text.slice(0, 40),
    );
  }
});

test('asked for a maximum age shorter than its poll interval, the store checks the inventory sooner', async () => {
  const vfs = openVfs('memfs://metal-inventory-fresh/cluster');
  let clock = 0;
  const store = new InventoryStore({ vfs, pollIntervalMs: 5_000, now: () => clock });
  await vfs.write('metal/inventory.yaml', sample);
  assert.equal((await store.current()).hosts.length, 2);
  await vfs.write(
    'metal/inventory.yaml',
    'hosts: [{ name: solo, instanceGroup: nodes, addresses: [10.1.1.1] }]',
  );
  clock += 1_000;
  assert.equal((await store.current()).hosts.length, 2, 'within the poll interval');
  assert.equal((await store.current(2_000)).hosts.length, 2, 'within the maximum age asked for');
  assert.equal((await store.current(1_000)).hosts.length, 1, 'a check as old as the maximum age is redone');
});

test('a clock stepped back after running ahead: a maximum age of 0 still checks the inventory, so a removed host is gone', async () => {
  const vfs = openVfs('memfs://metal-inventory-step/cluster');
  let clock = 3_600_000; // an hour ahead when the inventory was last checked
  const store = new InventoryStore({ vfs, now: () => clock });
  await vfs.write('metal/inventory.yaml', sample);
  assert.equal((await store.current(0)).hosts.length, 2);
  await vfs.write(
    'metal/inventory.yaml',
    'hosts: [{ name: solo, instanceGroup: nodes, addresses: [10.1.1.1] }]',
  );
  clock = 600_000; // corrected; ten minutes later
  assert.deepEqual(
    (await store.current(0)).hosts.map((h) => h.name),
    ['solo'],
  );
});

test('the store re-reads the inventory when its version changes and fails closed when it breaks', async () => {
  const vfs = openVfs('memfs://metal-inventory-store/cluster');
  let clock = 0;
  const store = new InventoryStore({ vfs, pollIntervalMs: 1_000, now: () => clock });
  await assert.rejects(
    store.current(),
    /no metal inventory at memfs:\/\/metal-inventory-store\/cluster\/metal\/inventory\.yaml/,
  );

  await vfs.write('metal/inventory.yaml', sample);
  await assert.rejects(store.current(), ConfigError, 'not re-checked before the poll interval');
  clock += 1_000;
  assert.equal((await store.current()).hosts.length, 2);

  await vfs.write('metal/inventory.yaml', 'hosts: [{ name: cp-1 }]');
  clock += 1_000;
  await assert.rejects(store.current(), /hosts\[0\]\.instanceGroup/);

  await vfs.write(
    'metal/inventory.yaml',
    'hosts: [{ name: solo, instanceGroup: nodes, addresses: [10.1.1.1] }]',
  );
  clock += 1_000;
  assert.deepEqual(
    (await store.current()).hosts.map((h) => h.name),
    ['solo'],
  );
});

/**
 * A state store whose one inventory the test sets (`answer`): a copy with both hosts written at 06:00,
 * the operator's edit removing node-1 (metal://rack4-u12) a minute later, or a fault; and an
 * InventoryStore over it, polled every second of the test's clock.
 */
function laggingStore() {
  const at = Date.parse('2026-11-29T06:00:00Z');
  const withBoth = { data: Buffer.from(sample), version: '"v1"', modifiedMs: at };
  const withoutNode1 = {
    data: Buffer.from(sample.slice(0, sample.indexOf('  - name: node-1'))),
    version: '"v2"',
    modifiedMs: at + 60_000,
  };
  let answered: StoredObject | Error = withBoth;
  const vfs: Vfs = {
    url: 's3://state/cluster',
    read: async () => {
      if (answered instanceof Error) throw answered;
      return answered;
    },
    stat: async () => (answered instanceof Error ? '"fault"' : answered.version),
    write: async () => undefined,
    list: async () => [],
    delete: async () => undefined,
  };
  const { logger, lines } = capturedLogger();
  let clock = 0;
  const store = new InventoryStore({ vfs, pollIntervalMs: 1_000, now: () => clock, logger });
  return {
    withBoth,
    withoutNode1,
    lines,
    /** Has the store answer `object` from now on, and moves the clock past the poll interval. */
    answer(object: StoredObject | Error, advanceMs = 1_000) {
      answered = object;
      clock += advanceMs;
    },
    /** Whether node-1 has an identity now (a failing inventory gives none). */
    removedHostIdentified: () =>
      store.current().then(
        (inventory) => inventory.lookup('metal://rack4-u12') !== undefined,
        () => false,
      ),
    store,
  };
}

test('a lagging replica answering an older inventory does not bring back a host removed by an edit, until it has answered it for the whole grace', async () => {
  const s = laggingStore();
  assert.equal(await s.removedHostIdentified(), true);
  s.answer(s.withoutNode1); // the operator removes node-1
  assert.equal(await s.removedHostIdentified(), false);
  s.answer(s.withBoth); // a replica that has not seen the edit
  assert.equal(await s.removedHostIdentified(), false, 'the older copy brought the removed host back');
  assert.ok(s.lines.some((l) => /older than the one in use.*lagging replica/.test(l)));
  s.answer(s.withBoth, olderCopyGraceMs - 2_000);
  assert.equal(await s.removedHostIdentified(), false);
  // Answered for the whole grace: a file restored with its time kept is the store's truth.
  s.answer(s.withBoth, 2_000);
  assert.equal(await s.removedHostIdentified(), true);
  assert.ok(s.lines.some((l) => /for 10 minutes: believed/.test(l)));
});

test('a read fault between an edit and a lagging replica does not let the older copy bring back a removed host: the lookups keep failing until the store answers the edit (or the grace ends)', async () => {
  const s = laggingStore();
  assert.equal(await s.removedHostIdentified(), true);
  s.answer(s.withoutNode1);
  assert.equal(await s.removedHostIdentified(), false);
  s.answer(new UnavailableError('S3 answered 503 SlowDown')); // one transient fault
  await assert.rejects(s.store.current());
  s.answer(s.withBoth); // a replica that has not seen the edit
  assert.equal(await s.removedHostIdentified(), false, 'the older copy brought the removed host back');
  s.answer(s.withoutNode1); // the store catches up
  assert.equal(await s.removedHostIdentified(), false);
  assert.ok((await s.store.current()).lookup('metal://cp-1'));
});

test('after an edit that removed a host and a later broken edit, a lagging replica does not bring the host back', async () => {
  const s = laggingStore();
  assert.equal(await s.removedHostIdentified(), true);
  s.answer(s.withoutNode1);
  assert.equal(await s.removedHostIdentified(), false);
  // The operator's next edit breaks the file: fail closed, as documented.
  s.answer({
    data: Buffer.from('hosts: [{'),
    version: '"v3"',
    modifiedMs: s.withoutNode1.modifiedMs + 60_000,
  });
  await assert.rejects(s.store.current());
  s.answer(s.withBoth); // a replica that has seen neither edit
  assert.equal(await s.removedHostIdentified(), false, 'the older copy brought the removed host back');
});

test('a state store that accepts the connection and never answers: the metal policy answers 503 at the deadline, and the next request reads again', async () => {
  const silent = await silentServer();
  const { endpoint } = silent;
  const vfs = openVfs('s3://state/cluster', {
    env: {},
    s3: {
      endpoint,
      region: 'us-test-1',
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
      timeoutMs: 300,
    },
  });
  const policy = metalPolicy({ inventory: new InventoryStore({ vfs }) });
  const request = testRequest({ claimedNodeName: 'node-1', remoteAddress: '10.0.1.11' });
  /** One evaluation: the fault it ended with, within 5 s, or a failure naming the hang. */
  const evaluation = async (): Promise<unknown> => {
    let timer: NodeJS.Timeout | undefined;
    const hang = new Promise<'pending'>((resolve) => {
      timer = setTimeout(() => resolve('pending'), 5_000);
    });
    const started = Date.now();
    try {
      const outcome = await Promise.race([
        policy.evaluate(request, contextAt()).then(
          (decision) => ({ decision }),
          (error: unknown) => ({ error }),
        ),
        hang,
      ]);
      assert.notEqual(outcome, 'pending', 'the metal policy was still waiting 5 s after its 300 ms deadline');
      assert.ok(Date.now() - started < 2_000, `answered after ${Date.now() - started} ms`);
      return (outcome as { error?: unknown }).error;
    } finally {
      clearTimeout(timer);
    }
  };
  try {
    const first = await evaluation();
    assert.ok(first instanceof DependencyFaultError, String(first));
    assert.equal(first.dependency, 'state-store');
    assert.equal(first.httpStatus, 503);
    // The failed check is not kept as the inventory's state, nor shared past its end: the next
    // request asks the store again and gets its own answer at the deadline.
    const before = silent.accepted();
    const second = await evaluation();
    assert.ok(second instanceof DependencyFaultError, String(second));
    assert.ok(silent.accepted() > before, 'the next request did not ask the store again');
  } finally {
    silent.close();
  }
});
