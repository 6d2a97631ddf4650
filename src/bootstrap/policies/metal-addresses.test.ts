/**
 * The metal registries a renewal finds a host in (metal-addresses.ts), against the simulated API
 * server (kops' Host objects) and the inventory in an in-memory state store.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { after, before, beforeEach, describe, test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { type HostObject, HostRegistry, hostNamespace, newHostObject } from '../../cloud/metal/hosts.ts';
import { InventoryStore, inventoryPath } from '../../cloud/metal/inventory.ts';
import { ForbiddenError, NotFoundError } from '../../errors.ts';
import { type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { clearMemfs, MemfsVfs } from '../../statestore/memfs-vfs.ts';
import { isDependencyFault } from '../dependency.ts';
import { type MetalRegistries, metalAddresses } from './metal-addresses.ts';

const authority = 'metal-addresses-test';
/** The state store; opened anew after each clear (a MemfsVfs keeps the objects it was opened on). */
const vfs = () => new MemfsVfs(new URL(`memfs://${authority}/cluster`));
const publicKey = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
  .publicKey.export({ format: 'pem', type: 'spki' })
  .toString();
let api: SimApiServer;
let hosts: HostRegistry;

/** A fresh inventory store (each test writes its own inventory, or none). */
function inventory(required = false): MetalRegistries['inventory'] {
  return { store: new InventoryStore({ vfs: vfs(), pollIntervalMs: 0 }), required };
}

async function writeInventory(yaml: string): Promise<void> {
  await vfs().write(inventoryPath, yaml);
}

async function enrol(name: string, instanceGroup = 'nodes'): Promise<void> {
  await hosts.create(newHostObject({ name, instanceGroup, publicKey }));
}

/** Expects `promise` to reject as a dependency fault of `dependency`. */
async function assertFault(promise: Promise<unknown>, dependency: string): Promise<void> {
  await assert.rejects(promise, (err) => {
    assert.ok(isDependencyFault(err), String(err));
    assert.equal(err.dependency, dependency);
    return true;
  });
}

before(async () => {
  api = await startApiServer();
  await api
    .kubeConfig()
    .makeApiClient(CoreV1Api)
    .createNamespace({ body: { metadata: { name: hostNamespace } } });
  hosts = new HostRegistry(api.kubeConfig());
});

beforeEach(() => clearMemfs(authority));

after(async () => {
  clearMemfs(authority);
  await api.close();
});

describe('a renewal finds a metal host by its name in the registries the chain trusts', () => {
  test('a Host enrols the name and its group, and no address (kops certifies none for a metal host)', async () => {
    await enrol('host-a', 'gpu-nodes');
    const addresses = await metalAddresses({ hosts, inventory: inventory() })('host-a');
    assert.deepEqual(addresses, {
      dnsNames: [],
      ipAddresses: [],
      instanceGroup: 'gpu-nodes',
      instanceId: 'host-a',
    });
  });

  test('a host the inventory lists gets exactly its addresses, with or without a Host of the same group', async () => {
    await enrol('host-b');
    await writeInventory(
      'hosts:\n- {name: host-b, instanceGroup: nodes, addresses: [10.2.0.2, "2001:db8::2", host-b.lan.example.com]}\n- {name: host-c, instanceGroup: nodes, addresses: [10.2.0.3]}\n',
    );
    const source = metalAddresses({ hosts, inventory: inventory() });
    assert.deepEqual(await source('host-b'), {
      dnsNames: ['host-b.lan.example.com'],
      ipAddresses: ['10.2.0.2', '2001:db8::2'],
      instanceGroup: 'nodes',
      instanceId: 'host-b',
    });
    assert.deepEqual((await source('host-c')).ipAddresses, ['10.2.0.3']);
  });

  test('attack: a host removed from every registry (Host deleted, not in the inventory) is refused, naming where it was looked for', async () => {
    await enrol('host-d');
    await hosts.delete('host-d');
    await writeInventory('hosts:\n- {name: other, instanceGroup: nodes, addresses: [10.2.0.9]}\n');
    await assert.rejects(metalAddresses({ hosts, inventory: inventory() })('host-d'), (err) => {
      assert.ok(err instanceof NotFoundError, String(err));
      assert.match(
        err.message,
        /^node host-d is enrolled nowhere: no Host kops-system\/host-d, and the metal inventory memfs:\/\/metal-addresses-test\/cluster\/metal\/inventory\.yaml does not list it; .*kops-controller host add/,
      );
      return true;
    });
    // Where only the inventory is trusted, the hint is the inventory.
    await assert.rejects(
      metalAddresses({ inventory: inventory() })('host-d'),
      /does not list it; .*list it in memfs:/,
    );
  });

  test('a Host and an inventory entry naming different groups are refused, naming both (no guess)', async () => {
    await enrol('host-e', 'nodes');
    await writeInventory('hosts:\n- {name: host-e, instanceGroup: gpu-nodes, addresses: [10.2.0.5]}\n');
    await assert.rejects(metalAddresses({ hosts, inventory: inventory() })('host-e'), (err) => {
      assert.ok(err instanceof ForbiddenError, String(err));
      assert.match(
        err.message,
        /host kops-system\/host-e enrols node host-e in instance group nodes, .* in gpu-nodes/,
      );
      return true;
    });
  });

  test('a Host without a key or a valid group vouches for no one, as for kops’ verifier', async () => {
    const broken = (name: string, spec: HostObject['spec']): HostObject => ({
      apiVersion: 'kops.k8s.io/v1alpha2',
      kind: 'Host',
      metadata: { name, namespace: hostNamespace },
      ...(spec ? { spec } : {}),
    });
    await hosts.create(broken('no-key', { instanceGroup: 'nodes' }));
    await hosts.create(broken('no-group', { publicKey }));
    await hosts.create(broken('bad-group', { publicKey, instanceGroup: 'Not_A_Group' }));
    const source = metalAddresses({ hosts });
    await assert.rejects(source('no-key'), /host kops-system\/no-key has no spec\.publicKey/);
    await assert.rejects(source('no-group'), /host kops-system\/no-group has no spec\.instanceGroup/);
    await assert.rejects(source('bad-group'), (err) => {
      assert.ok(err instanceof ForbiddenError);
      assert.match(err.message, /"Not_A_Group" is not a valid name/);
      return true;
    });
  });

  test('a name that is no object name is not looked up: no Host can bear it', async () => {
    const asked: string[] = [];
    const counting = {
      get: (name: string) => {
        asked.push(name);
        return hosts.get(name);
      },
    };
    await assert.rejects(metalAddresses({ hosts: counting })('../secrets/x'), NotFoundError);
    assert.deepEqual(asked, []);
  });

  test('no Host registry trusted and no inventory file: this cluster enrols no machine, nothing to check (client certificates only)', async () => {
    assert.deepEqual(await metalAddresses({ inventory: inventory() })('anyone'), {
      dnsNames: [],
      ipAddresses: [],
    });
  });
});

describe('a registry that cannot be read is a fault (503), never a denial', () => {
  test('the API server failing or not answering the Host read: kubernetes-api', async () => {
    await enrol('host-f');
    api.faults.errors({ resource: 'hosts', verbs: ['get'], status: 503, count: 1 });
    await assertFault(metalAddresses({ hosts })('host-f'), 'kubernetes-api');
    api.faults.latency(5_000, { resource: 'hosts', verbs: ['get'] });
    const started = Date.now();
    try {
      await assertFault(metalAddresses({ hosts, timeoutMs: 200 })('host-f'), 'kubernetes-api');
      assert.ok(Date.now() - started < 3_000, `the read's deadline: ${Date.now() - started} ms`);
    } finally {
      api.faults.latency(0, { resource: 'hosts', verbs: ['get'] });
    }
    // Once the API server answers, the host renews.
    assert.equal((await metalAddresses({ hosts })('host-f')).instanceGroup, 'nodes');
  });

  test('an inventory that is there but invalid: state-store, even with the Host present', async () => {
    await enrol('host-g');
    await writeInventory('hosts: [{name: host-g}]\n');
    await assertFault(metalAddresses({ hosts, inventory: inventory() })('host-g'), 'state-store');
  });

  test('no inventory where the chain’s metal policy requires one: state-store, as for that policy', async () => {
    await assertFault(metalAddresses({ inventory: inventory(true) })('host-h'), 'state-store');
  });
});
