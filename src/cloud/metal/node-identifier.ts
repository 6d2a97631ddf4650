/**
 * Metal node identity: a node is identified by the inventory entry its providerID (`metal://<id>`) or,
 * lacking one, its node name selects. The instance group comes from the inventory the operator wrote,
 * never from the node; a node that is not listed gets no identity.
 */
import { isIP } from 'node:net';
import { NotFoundError } from '../../errors.ts';
import type {
  CloudGroup,
  CloudGroups,
  IdentifyOptions,
  IdentifyResult,
  InstanceAddress,
  NodeIdentifier,
} from '../types.ts';
import type { InventoryStore, MetalHost } from './inventory.ts';

function addressesOf(host: MetalHost): InstanceAddress[] {
  const addresses: InstanceAddress[] = host.addresses.map((address) => ({
    type: isIP(address) ? 'InternalIP' : 'InternalDNS',
    address,
  }));
  addresses.push({ type: 'Hostname', address: host.name });
  return addresses;
}

/** Identifies metal nodes from the inventory. */
export class MetalNodeIdentifier implements NodeIdentifier {
  readonly #store: InventoryStore;

  constructor(store: InventoryStore) {
    this.#store = store;
  }

  /**
   * Identifies nodes by `metal://` providerID or node name; one inventory check serves the batch,
   * made anew when the last one is older than `options.maxAgeMs`.
   */
  async identify(
    providerIDs: readonly string[],
    options: IdentifyOptions = {},
  ): Promise<Map<string, IdentifyResult>> {
    const results = new Map<string, IdentifyResult>();
    let inventory: Awaited<ReturnType<InventoryStore['current']>>;
    try {
      inventory = await this.#store.current(options.maxAgeMs);
    } catch (err) {
      for (const id of providerIDs) results.set(id, { ok: false, error: err as Error });
      return results;
    }
    for (const id of providerIDs) {
      const host = inventory.lookup(id);
      if (!host) {
        const error = new NotFoundError(
          `${id} is not a host of the metal inventory ${this.#store.source}; add it there to give the node an identity`,
        );
        results.set(id, { ok: false, error });
        continue;
      }
      results.set(id, {
        ok: true,
        identity: {
          providerID: host.providerID,
          instanceId: host.name,
          instanceGroup: host.instanceGroup,
          // The inventory says what a host is, not whether it is powered on.
          state: 'unknown',
          addresses: addressesOf(host),
        },
      });
    }
    return results;
  }
}

/** The inventory's hosts grouped by instance group; the target size is the number of hosts listed. */
export class MetalCloudGroups implements CloudGroups {
  readonly #store: InventoryStore;

  constructor(store: InventoryStore) {
    this.#store = store;
  }

  /** Every instance group of the inventory (a metal inventory belongs to one cluster). */
  async list(_clusterName: string): Promise<CloudGroup[]> {
    const inventory = await this.#store.current();
    const groups = new Map<string, CloudGroup>();
    for (const host of inventory.hosts) {
      const group = groups.get(host.instanceGroup) ?? {
        instanceGroup: host.instanceGroup,
        cloudName: `metal/${host.instanceGroup}`,
        minSize: 0,
        maxSize: 0,
        targetSize: 0,
        members: [],
      };
      group.members.push({
        instanceId: host.name,
        providerID: host.providerID,
        state: 'unknown',
        healthy: true,
      });
      group.minSize = group.maxSize = group.targetSize = group.members.length;
      groups.set(host.instanceGroup, group);
    }
    return [...groups.values()].sort((a, b) => a.instanceGroup.localeCompare(b.instanceGroup));
  }
}
