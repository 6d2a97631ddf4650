import assert from 'node:assert/strict';
import { test } from 'node:test';
import { earliestByKindAndGroup, expiringWithin, type LedgerEntry, mergeEntries } from './ledger.ts';

const day = 86_400;
const now = 1_800_000_000;

function entry(instance: string, notAfter: number, extra: Partial<LedgerEntry> = {}): LedgerEntry {
  return {
    kind: 'kubelet',
    instanceGroup: 'nodes',
    instance,
    serial: `${instance}-${notAfter}`,
    notBefore: notAfter - 365 * day,
    notAfter,
    ...extra,
  };
}

test('mergeEntries keeps per kind and node only the newest certificate', () => {
  const old = entry('node-1', now + 10 * day);
  const reissued = entry('node-1', now + 400 * day);
  const serving = entry('node-1', now + 20 * day, { kind: 'kubelet-server' });
  const merged = mergeEntries([old, serving], [reissued], now);
  assert.deepEqual(merged.entries, [serving, reissued]);
  // An older certificate arriving late (another replica's stale write) does not replace the newer one.
  assert.deepEqual(mergeEntries([reissued], [old], now).entries, [reissued]);
});

test('mergeEntries drops expired certificates and held ones nobody holds any more', () => {
  // A day past their expiry or hold: a replica whose clock runs ahead keeps what is still valid (next test).
  const expired = entry('node-1', now - day - 1);
  const live = entry('node-2', now + day);
  const unheld = entry('kubernetes-ca.1', now + 300 * day, { kind: 'ca', heldUntil: now - day - 1 });
  const held = entry('kubernetes-ca.2', now + 300 * day, { kind: 'ca', heldUntil: now + 3600 });
  assert.deepEqual(mergeEntries([expired, live, unheld, held], [], now).entries, [held, live]);
});

test('a replica whose clock runs ahead keeps the certificates that expire within its lead', () => {
  // Two hours ahead (an RTC kept in local time, before NTP): a kubelet certificate whose renewal is
  // late has an hour left on the true clock, and a CA's hold was renewed an hour ago.
  const ahead = now + 2 * 3600;
  const late = entry('node-1', now + 3600, { notBefore: now + 3600 - day });
  const held = entry('kubernetes-ca.1', now + 300 * day, { kind: 'ca', heldUntil: now + 3600 });
  assert.deepEqual(mergeEntries([late, held], [], ahead).entries, [held, late]);
});

test('mergeEntries caps the size, dropping the certificates that expire last', () => {
  const entries = Array.from({ length: 10 }, (_, i) => entry(`node-${i}`, now + (i + 1) * day));
  const merged = mergeEntries([], entries, now, 4);
  assert.equal(merged.droppedOverCap, 6);
  assert.deepEqual(
    merged.entries.map((e) => e.instance),
    ['node-0', 'node-1', 'node-2', 'node-3'],
  );
  // What only the margin keeps goes first, and is not counted: it is no loss worth a warning.
  const expired = entry('node-x', now - 3600);
  const withExpired = mergeEntries([expired], entries, now, 4);
  assert.deepEqual(
    withExpired.entries.map((e) => e.instance),
    ['node-0', 'node-1', 'node-2', 'node-3'],
  );
  assert.equal(withExpired.droppedOverCap, 6);
  assert.equal(mergeEntries([expired], entries.slice(0, 4), now, 4).droppedOverCap, 0);
  assert.deepEqual(mergeEntries([expired], entries.slice(0, 3), now, 4).entries.at(-1), expired);
});

test('earliestByKindAndGroup gives the earliest current expiry per kind and instance group', () => {
  const entries = [
    entry('a', now + 30 * day),
    entry('b', now + 5 * day),
    entry('c', now - day), // expired: not exported
    entry('d', now + 2 * day, { instanceGroup: 'control-plane' }),
    entry('a', now + 9 * day, { kind: 'kubelet-server' }),
  ];
  assert.deepEqual(earliestByKindAndGroup(entries, now), [
    {
      kind: 'kubelet',
      instanceGroup: 'control-plane',
      notAfter: now + 2 * day,
      lifetime: 365 * day,
      instance: 'd',
      serial: `d-${now + 2 * day}`,
    },
    {
      kind: 'kubelet',
      instanceGroup: 'nodes',
      notAfter: now + 5 * day,
      lifetime: 365 * day,
      instance: 'b',
      serial: `b-${now + 5 * day}`,
    },
    {
      kind: 'kubelet-server',
      instanceGroup: 'nodes',
      notAfter: now + 9 * day,
      lifetime: 365 * day,
      instance: 'a',
      serial: `a-${now + 9 * day}`,
    },
  ]);
});

test('expiringWithin lists the current certificates inside the window, soonest first', () => {
  const entries = [
    entry('a', now + 20 * day),
    entry('b', now + 13 * day),
    entry('c', now + day),
    entry('d', now - 1),
  ];
  assert.deepEqual(
    expiringWithin(entries, now, 14 * day).map((e) => e.instance),
    ['c', 'b'],
  );
  assert.deepEqual(expiringWithin(entries, now, 12 * 3600), []);
});

test('expiringWithin leaves out certificates a routine renewal will replace, unless asked', () => {
  const oneDay = (instance: string, left: number) =>
    entry(instance, now + left, { notBefore: now + left - day });
  const entries = [oneDay('renewing', 20 * 3600), oneDay('late', 3600), entry('long', now + 13 * day)];
  assert.deepEqual(
    expiringWithin(entries, now, 14 * day).map((e) => e.instance),
    ['late', 'long'],
  );
  assert.deepEqual(
    expiringWithin(entries, now, 14 * day, true).map((e) => e.instance),
    ['late', 'renewing', 'long'],
  );
});
