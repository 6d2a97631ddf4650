import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { KopsError } from '../errors.ts';
import { makeClients } from '../kube/client.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { CertificateExpiryGauge } from './expiry-gauge.ts';
import { epochSeconds, type LedgerEntry } from './ledger.ts';
import { LedgerRecorder } from './recorder.ts';
import { ConfigMapLedgerStore, ledgerLabel, shardName } from './store.ts';

const day = 86_400;
const now = epochSeconds(new Date());

function entry(instance: string, kind = 'kubelet', notAfter = now + 30 * day): LedgerEntry {
  return {
    kind,
    instanceGroup: 'nodes',
    instance,
    serial: `s-${instance}`,
    notBefore: notAfter - 365 * day,
    notAfter,
  };
}

function byInstance(entries: readonly LedgerEntry[]): string[] {
  return entries.map((e) => `${e.kind}/${e.instance}`).sort();
}

// Every behaviour holds whichever way the shards are read and written: through client-node, or over
// plain HTTPS (`kubeConfig`, as the bootstrap server runs it).
for (const transport of ['client-node', 'https'] as const)
  describe(`ConfigMapLedgerStore against the simulated API server (${transport})`, () => {
    let sim: SimApiServer;
    const store = (namespace: string, shards?: number) =>
      new ConfigMapLedgerStore({
        core: makeClients(sim.kubeConfig()).core,
        ...(transport === 'https' ? { kubeConfig: sim.kubeConfig() } : {}),
        namespace,
        ...(shards ? { shards } : {}),
      });

    before(async () => {
      sim = await startApiServer();
      const core = makeClients(sim.kubeConfig()).core;
      for (const name of ['restart', 'race', 'storm', 'faults', 'garbage', 'prune']) {
        await core.createNamespace({ body: { metadata: { name } } });
      }
    });
    after(() => sim.close());

    test('what one controller wrote, a new controller instance (restart, new leader) reads', async () => {
      await store('restart').add([entry('node-1'), entry('node-1', 'kubelet-server'), entry('node-2')]);
      assert.deepEqual(byInstance(await store('restart').list()), [
        'kubelet-server/node-1',
        'kubelet/node-1',
        'kubelet/node-2',
      ]);
    });

    test('two replicas writing the same shard at once lose none of each other’s entries', async () => {
      // One shard: every write of both replicas contends for the same ConfigMap.
      const [a, b] = [store('race', 1), store('race', 1)];
      const written = Array.from({ length: 40 }, (_, i) => entry(`node-${i}`));
      // Each replica writes one batch at a time (as its recorder does), both at once.
      const replica = async (writer: ConfigMapLedgerStore, mine: LedgerEntry[]) => {
        for (const e of mine) await writer.add([e]);
      };
      await Promise.all([
        replica(
          a,
          written.filter((_, i) => i % 2 === 0),
        ),
        replica(
          b,
          written.filter((_, i) => i % 2 === 1),
        ),
      ]);
      assert.deepEqual(byInstance(await a.list()), byInstance(written));
    });

    test('a 5,000-node join storm is written in one write per shard, not one per join', async () => {
      const target = store('storm');
      let calls = 0;
      let writes = 0;
      const recorder = new LedgerRecorder({
        store: {
          add: async (entries) => {
            calls++;
            const result = await target.add(entries);
            writes += result.writes;
            return result;
          },
        },
      });
      for (let i = 0; i < 5_000; i++)
        recorder.record([entry(`node-${i}`), entry(`node-${i}`, 'kubelet-server')]);
      await recorder.stop();
      assert.equal(calls, 1);
      assert.ok(writes <= 16, `${writes} writes`);
      const listed = await target.list();
      assert.equal(listed.length, 10_000);
      // Every shard stays well under a ConfigMap's 1 MiB.
      const core = makeClients(sim.kubeConfig()).core;
      for (let shard = 0; shard < 16; shard++) {
        const cm = await core.readNamespacedConfigMap({ name: shardName(shard), namespace: 'storm' });
        assert.ok(JSON.stringify(cm.data).length < 900_000);
      }
    });

    test('a write the API server refuses stays pending and is written at the next flush', async () => {
      const recorder = new LedgerRecorder({ store: store('faults') });
      sim.faults.errors({ resource: 'configmaps', verbs: ['create', 'update'], rate: 1, status: 503 });
      recorder.record([entry('node-1')]);
      await recorder.flush();
      sim.faults.reset();
      assert.deepEqual(await store('faults').list(), []);
      await recorder.flush();
      assert.deepEqual(byInstance(await store('faults').list()), ['kubelet/node-1']);
    });

    test('the leader removes the certificates of deleted nodes nearing expiry; a failed lookup keeps them', async () => {
      const target = store('prune');
      const soon = now + 5 * day;
      await target.add([
        entry('alive', 'kubelet', soon),
        entry('deleted', 'kubelet', soon + 60),
        entry('deleted', 'kube-proxy', soon + 60),
        entry('deleted-later', 'kubelet', now + 100 * day),
        entry('flaky', 'kubelet', soon + 120),
        { ...entry('kubernetes-ca.1', 'ca', soon), instanceGroup: '', heldUntil: now + 3600 },
      ]);
      const looked: string[] = [];
      const gauge = new CertificateExpiryGauge({
        store: target,
        registry: new Registry(),
        nodeExists: async (name) => {
          looked.push(name);
          if (name === 'flaky') throw new Error('API server unreachable');
          return name === 'alive';
        },
      });
      await gauge.refresh();
      assert.deepEqual(looked.sort(), ['alive', 'deleted', 'flaky'], 'only node certificates in the window');
      assert.deepEqual(byInstance(await target.list()), [
        'ca/kubernetes-ca.1',
        'kubelet/alive',
        'kubelet/deleted-later',
        'kubelet/flaky',
      ]);
      assert.deepEqual(
        gauge.earliest()?.map((e) => `${e.kind}/${e.instanceGroup}/${e.instance}`),
        ['ca//kubernetes-ca.1', 'kubelet/nodes/alive'],
      );
    });

    // A ConfigMap's values may total 1 MiB (core.MaxSecretSize); the simulator answers 422 past it, as
    // the API server does. The store's guard (900 kB, then a cap in proportion) must keep every write
    // under it whatever the entries' sizes, or the shard is refused at every flush on every replica.
    const mib = 1024 * 1024;
    const shardBytes = async (namespace: string) => {
      const cm = await makeClients(sim.kubeConfig()).core.readNamespacedConfigMap({
        name: shardName(0),
        namespace,
      });
      return Buffer.byteLength(cm.data?.['entries.json'] ?? '');
    };
    // Legal extremes: a node name is a DNS subdomain (253), an instance group a label value (63).
    const sized = (i: number, nameLength: number, notAfter: number): LedgerEntry => ({
      kind: 'kubelet-server',
      instanceGroup: 'g'.repeat(Math.min(63, nameLength)),
      instance: `n${i}-${'x'.repeat(nameLength)}`.slice(0, Math.max(nameLength, String(i).length + 2)),
      serial: (i * 2654435761).toString(16).padStart(40, '0'),
      notBefore: notAfter - 365 * day,
      notAfter,
    });

    test('entries of uneven sizes drive a shard to its size guard: every write is accepted and stays under 1 MiB', async () => {
      await makeClients(sim.kubeConfig()).core.createNamespace({ body: { metadata: { name: 'uneven' } } });
      const target = store('uneven', 1);
      let seed = 7;
      const random = () => {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        return seed / 2 ** 31;
      };
      let dropped = 0;
      let largest = 0;
      // 6 flushes of 700 entries (name lengths 5 to 253, expiry unrelated to size): from the fourth on
      // the shard is over 900 kB before the guard trims it (to about 900 kB, a little over or under).
      for (let flush = 0; flush < 6; flush++) {
        const batch = Array.from({ length: 700 }, (_, j) => {
          const i = flush * 700 + j;
          return sized(i, 5 + Math.floor(random() * 249), now + day + Math.floor(random() * 300 * day));
        });
        const result = await target.add(batch);
        dropped += result.droppedOverCap;
        const bytes = await shardBytes('uneven');
        largest = Math.max(largest, bytes);
        assert.ok(bytes <= mib, `flush ${flush}: ${bytes} bytes`);
      }
      assert.ok(dropped > 0, 'the size guard never trimmed the shard');
      assert.ok(largest > 800_000, `the shard reached only ${largest} bytes`);
    });

    test('the trim measures what it keeps: long-named entries expiring first never push a shard past 1 MiB', async () => {
      await makeClients(sim.kubeConfig()).core.createNamespace({ body: { metadata: { name: 'skewed' } } });
      const target = store('skewed', 1);
      // 2,000 entries with short names expiring in 300 days (334 kB), then 2,000 with the longest
      // legal names expiring in 10 (471 bytes each): 1.27 MB merged. A cap in proportion to the
      // average entry (2,825) kept all 2,000 long ones, the earliest expiries: 1.08 MB, refused.
      const short = Array.from({ length: 2_000 }, (_, i) => sized(10_000 + i, 5, now + 300 * day + i));
      const long = Array.from({ length: 2_000 }, (_, i) => sized(i, 253, now + 10 * day + i));
      for (const batch of [short, long]) {
        await target.add(batch);
        const bytes = await shardBytes('skewed');
        assert.ok(bytes <= mib, `${bytes} bytes`);
      }
      // Trimmed to what fits, not far below it.
      assert.ok((await shardBytes('skewed')) > 850_000);
    });

    test('a hand-edited shard: malformed entries are skipped and overwritten, never trusted', async () => {
      const core = makeClients(sim.kubeConfig()).core;
      const target = store('garbage', 1);
      await core.createNamespacedConfigMap({
        namespace: 'garbage',
        body: {
          metadata: { name: shardName(0), labels: { [ledgerLabel]: '0' } },
          data: { 'entries.json': JSON.stringify([{ kind: 'kubelet', notAfter: 'soon' }, entry('node-1')]) },
        },
      });
      assert.deepEqual(byInstance(await target.list()), ['kubelet/node-1']);
      await core.replaceNamespacedConfigMap({
        name: shardName(0),
        namespace: 'garbage',
        body: {
          metadata: { name: shardName(0), labels: { [ledgerLabel]: '0' } },
          data: { 'entries.json': '{not json' },
        },
      });
      assert.deepEqual(await target.list(), []);
      await target.add([entry('node-2')]);
      assert.deepEqual(byInstance(await target.list()), ['kubelet/node-2']);
    });
  });

describe('ConfigMapLedgerStore over plain HTTPS', () => {
  test('with kubeConfig, shard reads and writes never go through client-node; a refused write is a typed error', async () => {
    const sim = await startApiServer();
    try {
      const real = makeClients(sim.kubeConfig()).core;
      await real.createNamespace({ body: { metadata: { name: 'https-only' } } });
      // client-node's ConfigMap calls fail: only `list` may use them.
      const core = new Proxy(real, {
        get(target, property, receiver) {
          if (
            typeof property === 'string' &&
            /NamespacedConfigMap$/.test(property) &&
            !property.startsWith('list')
          ) {
            return () => Promise.reject(new Error(`client-node ${property} was called`));
          }
          return Reflect.get(target, property, receiver);
        },
      });
      const target = new ConfigMapLedgerStore({
        core,
        kubeConfig: sim.kubeConfig(),
        namespace: 'https-only',
        shards: 2,
      });
      await target.add([entry('node-1'), entry('node-2'), entry('node-3')]);
      await target.add([entry('node-4')]);
      assert.deepEqual(byInstance(await target.list()), [
        'kubelet/node-1',
        'kubelet/node-2',
        'kubelet/node-3',
        'kubelet/node-4',
      ]);
      sim.faults.errors({ resource: 'configmaps', verbs: ['update'], rate: 1, status: 503 });
      await assert.rejects(target.add([entry('node-5')]), (err: Error) => {
        assert.ok(err instanceof KopsError, err.message);
        assert.equal(err.kind, 'unavailable');
        assert.match(
          err.message,
          /^write the certificate ledger https-only\/kops-controller-certificate-ledger-0\d: HTTP 503/,
        );
        return true;
      });
    } finally {
      await sim.close();
    }
  });
});
