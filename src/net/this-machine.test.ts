import assert from 'node:assert/strict';
import { mock, test } from 'node:test';
import { SourceConnectionCounter } from './hardened-server.ts';
import { sourceOf } from './source.ts';
import { fromThisMachine } from './this-machine.ts';

const iface = (address: string, family: 'IPv4' | 'IPv6') => ({
  address,
  family,
  netmask: family === 'IPv4' ? '255.255.255.0' : 'ffff:ffff:ffff:ffff::',
  mac: '00:00:00:00:00:00',
  internal: false,
  cidr: null,
  scopeid: 0,
});

test("loopback and the interfaces' addresses are this machine; the interfaces are read again after 10 s", () => {
  let now = 0;
  let addresses = [iface('10.0.0.5', 'IPv4'), iface('2001:db8:1:2::5', 'IPv6')];
  const own = fromThisMachine(
    () => ({ eth0: addresses }) as never,
    () => now,
  );
  for (const source of ['127.0.0.1', '127.1.2.3', sourceOf('::1'), '10.0.0.5', sourceOf('2001:db8:1:2::77')])
    assert.equal(own(source), true, source);
  for (const source of ['10.0.0.6', sourceOf('2001:db8:1:3::5'), '128.0.0.1'])
    assert.equal(own(source), false, source);
  addresses = [iface('10.0.0.6', 'IPv4')];
  now = 9_999;
  assert.equal(own('10.0.0.6'), false, 'read again before 10 s');
  now = 10_000;
  assert.equal(own('10.0.0.6'), true);
  assert.equal(own('10.0.0.5'), false);
});

test('the interfaces are read again after 10 s of monotonic time, even when the wall clock was stepped back meanwhile', () => {
  const realDate = Date.now;
  const realMonotonic = performance.now.bind(performance);
  let wallOffset = 3_600_000; // an hour ahead when the interfaces are first read
  let monotonicOffset = 0;
  const wall = mock.method(Date, 'now', () => realDate() + wallOffset);
  const monotonic = mock.method(performance, 'now', () => realMonotonic() + monotonicOffset);
  try {
    let addresses = [iface('10.0.0.5', 'IPv4')];
    const own = fromThisMachine(() => ({ eth0: addresses }) as never);
    assert.equal(own('10.0.0.5'), true);
    addresses = [iface('10.0.0.6', 'IPv4')]; // DHCP gave the machine another address
    wallOffset = 0;
    monotonicOffset = 10_000;
    assert.equal(own('10.0.0.6'), true);
    assert.equal(own('10.0.0.5'), false);
  } finally {
    wall.mock.restore();
    monotonic.mock.restore();
  }
});

test("this machine's sources get one source's worth of places beyond the total cap, and no more", () => {
  const counter = new SourceConnectionCounter({ maxConnections: 4, maxConnectionsPerSource: 2 }, (s) =>
    s.startsWith('127.'),
  );
  for (const source of ['10.0.0.1', '10.0.0.1', '10.0.0.2', '10.0.0.2'])
    assert.equal(counter.admit(source), 'admitted');
  assert.equal(counter.admit('10.0.0.3'), 'total');
  assert.equal(counter.admit('127.0.0.1'), 'admitted');
  assert.equal(counter.admit('127.0.0.1'), 'admitted');
  assert.equal(counter.admit('127.0.0.1'), 'total', 'beyond the reserve, and its own cap');
  assert.equal(counter.admit('127.0.0.2'), 'total', 'the reserve is one source’s worth in all');
  counter.release('127.0.0.1');
  assert.equal(counter.admit('127.0.0.2'), 'admitted');
  assert.equal(counter.total, 6);
});
