/**
 * Azure node identity, as kops' nodeidentity/azure reads it — providerID → VM → its tags — but
 * batched: scale-set VMs are read by listing their scale set (one paged VM listing with instance
 * views and one paged network-interface listing per scale set), not one GET per node. A listing is
 * kept for a short while and shared by every caller that asks meanwhile, so a label storm of 5,000
 * nodes in a handful of scale sets costs a few dozen ARM reads. That keeps well inside ARM's
 * documented read throttling ("Understand how Azure Resource Manager throttles requests": a bucket
 * of 250 reads per subscription and region, refilled at 25 per second) and the Compute provider's
 * per-operation GET limits, where one GET per node would drain the bucket in seconds.
 * Trust: the instance group is the `kops.k8s.io_instancegroup` tag of the VM (its scale set's), and
 * the VM must be this cluster's: a scale set named `<group>.<cluster>` tagged `KubernetesCluster`.
 * It must also be live: its instance view (read in the same listing or GET, `$expand=instanceView`,
 * so no extra call) must say `PowerState/running` or `PowerState/starting`. kops' identifier does not
 * look; here a stopped or deallocated VM gets no identity (reason `not-running`), so neither labels
 * nor kubelet certificate renewals are granted for it.
 */
import { ForbiddenError, NotFoundError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { monotonicMs, youngerThan } from '../age.ts';
import type { Outcome } from '../batcher.ts';
import { mapConcurrent } from '../concurrency.ts';
import { BatchedNodeIdentifier, outcomeOf } from '../identify-batches.ts';
import { instanceGroupNameProblem } from '../instance-group-name.ts';
import type { InstanceAddress, NodeIdentity } from '../types.ts';
import { type AzureClient, type AzureNic, type AzureVm, vmsByInstanceId } from './client.ts';
import { type AzureVmRef, formatAzureVmId, parseAzureProviderID, sameAzureName } from './resource-id.ts';
import { azureClusterTag, azureInstanceGroupTag } from './tags.ts';

/** Options of {@link AzureNodeIdentifier}. */
export interface AzureNodeIdentifierOptions {
  client: Pick<
    AzureClient,
    'subscriptionId' | 'resourceGroup' | 'getVm' | 'getNic' | 'listScaleSetVms' | 'listScaleSetNics'
  >;
  clusterName: string;
  logger?: Logger;
  /** How long a scale set's listing answers without being read again (default 60 s). */
  listingTtlMs?: number;
  /** Calls to `identify` within this window share one batch (default 10 ms). */
  coalesceWindowMs?: number;
  /** Scale sets listed at once (default 4). */
  concurrency?: number;
  /** The clock the listings' ages are read from (default monotonic: {@link monotonicMs}). */
  now?: () => number;
}

/** One scale set as listed: its VMs by instance id and their interfaces by VM resource id. */
interface Listing {
  at: number;
  /** A VM listed twice with different records is a malformed answer here (vmsByInstanceId). */
  vms: Map<string, AzureVm | Error>;
  nics: Map<string, AzureNic>;
}

/** Resolves `azure://` providerIDs to kops instance groups through ARM, batched per scale set. */
export class AzureNodeIdentifier extends BatchedNodeIdentifier {
  readonly #client: AzureNodeIdentifierOptions['client'];
  readonly #clusterName: string;
  readonly #logger: Logger;
  readonly #ttlMs: number;
  readonly #concurrency: number;
  readonly #now: () => number;
  readonly #listings = new Map<string, Promise<Listing>>();

  constructor(options: AzureNodeIdentifierOptions) {
    super({ windowMs: options.coalesceWindowMs, maxConcurrent: 2 });
    this.#client = options.client;
    this.#clusterName = options.clusterName;
    this.#logger = options.logger ?? silentLogger;
    this.#ttlMs = options.listingTtlMs ?? 60_000;
    this.#concurrency = options.concurrency ?? 4;
    this.#now = options.now ?? monotonicMs;
  }

  protected async identifyBatch(
    providerIDs: string[],
    maxAges: ReadonlyMap<string, number>,
  ): Promise<Map<string, Outcome<NodeIdentity>>> {
    const results = new Map<string, Outcome<NodeIdentity>>();
    const fail = (id: string, error: Error) => results.set(id, { ok: false, error });
    const byScaleSet = new Map<string, { id: string; ref: AzureVmRef }[]>();
    const standalone: { id: string; ref: AzureVmRef }[] = [];
    const maxAge = new Map<string, number>();
    for (const id of providerIDs) {
      const age = maxAges.get(id);
      let ref: AzureVmRef;
      try {
        ref = this.#ownRef(id);
      } catch (err) {
        fail(id, err as Error);
        continue;
      }
      if (ref.kind === 'vm') {
        standalone.push({ id, ref });
        continue;
      }
      const key = (ref.scaleSet as string).toLowerCase();
      byScaleSet.set(key, [...(byScaleSet.get(key) ?? []), { id, ref }]);
      if (age !== undefined) maxAge.set(key, Math.min(age, maxAge.get(key) ?? age));
    }
    await mapConcurrent([...byScaleSet], this.#concurrency, async ([key, members]) => {
      let listing: Listing;
      try {
        listing = await this.#listing(members[0]?.ref.scaleSet as string, maxAge.get(key));
      } catch (err) {
        for (const m of members) fail(m.id, err as Error);
        return;
      }
      for (const { id, ref } of members) {
        const vm = listing.vms.get((ref.instanceId as string).toLowerCase());
        if (vm instanceof Error) {
          fail(id, vm);
          continue;
        }
        const nic = vm ? listing.nics.get(formatAzureVmId(vm.ref).toLowerCase()) : undefined;
        this.#settle(results, id, ref, vm, nic);
      }
    });
    await mapConcurrent(standalone, this.#concurrency, async ({ id, ref }) => {
      try {
        const vm = await this.#client.getVm(ref);
        const nic = vm.nicIds[0] ? await this.#client.getNic(vm.nicIds[0]) : undefined;
        this.#settle(results, id, ref, vm, nic);
      } catch (err) {
        fail(id, err as Error);
      }
    });
    this.#logger.debug({ nodes: providerIDs.length, scaleSets: byScaleSet.size }, 'identified Azure nodes');
    return results;
  }

  /** The providerID's VM when it is in our subscription and resource group. */
  #ownRef(providerID: string): AzureVmRef {
    const ref = parseAzureProviderID(providerID);
    if (
      !sameAzureName(ref.subscriptionId, this.#client.subscriptionId) ||
      !sameAzureName(ref.resourceGroup, this.#client.resourceGroup)
    ) {
      throw new ForbiddenError(
        `providerID "${providerID}" is outside this cluster's subscription and resource group ${this.#client.resourceGroup}`,
        { details: { reason: 'foreign-cluster' } },
      );
    }
    return ref;
  }

  /** A scale set's listing no older than `maxAgeMs` (and the TTL), shared with concurrent callers. */
  async #listing(scaleSet: string, maxAgeMs = Number.POSITIVE_INFINITY): Promise<Listing> {
    const key = scaleSet.toLowerCase();
    const cached = this.#listings.get(key);
    const listing = await cached?.catch(() => undefined);
    if (listing && youngerThan(listing.at, this.#now(), Math.min(this.#ttlMs, maxAgeMs))) return listing;
    // Stale or failed: unless a caller meanwhile started reading again, read it now.
    const current = this.#listings.get(key);
    if (current && current !== cached) return current;
    const fresh = this.#list(scaleSet);
    this.#listings.set(key, fresh);
    fresh.catch(() => {
      if (this.#listings.get(key) === fresh) this.#listings.delete(key);
    });
    return fresh;
  }

  async #list(scaleSet: string): Promise<Listing> {
    const at = this.#now();
    const [vms, nics] = await Promise.all([
      this.#client.listScaleSetVms(scaleSet),
      this.#client.listScaleSetNics(scaleSet),
    ]).catch((err: unknown) => {
      if (err instanceof NotFoundError) {
        throw new NotFoundError(
          `scale set ${scaleSet} does not exist in resource group ${this.#client.resourceGroup}`,
          {
            cause: err,
          },
        );
      }
      throw err;
    });
    return {
      at,
      vms: vmsByInstanceId(vms, this.#logger),
      nics: new Map(nics.flatMap((nic) => (nic.attachedTo ? [[nic.attachedTo.toLowerCase(), nic]] : []))),
    };
  }

  #settle(
    results: Map<string, Outcome<NodeIdentity>>,
    id: string,
    ref: AzureVmRef,
    vm: AzureVm | undefined,
    nic: AzureNic | undefined,
  ): void {
    const checked = vm ? this.#check(id, vm, nic) : new NotFoundError(`VM ${ref.name} does not exist`);
    results.set(id, outcomeOf(checked));
  }

  /** The identity of a VM of this cluster, or why it is not one. */
  #check(providerID: string, vm: AzureVm, nic: AzureNic | undefined): NodeIdentity | Error {
    const name = vm.ref.name;
    // Another cluster's VM is final (reason `foreign-cluster`): not even a Cluster API Machine vouches
    // for it; only a VM of ours in no kops group (`no-instance-group`) may be a Machine's.
    const foreign = { details: { instanceId: name, reason: 'foreign-cluster' } };
    if (vm.ref.scaleSet && !vm.ref.scaleSet.endsWith(`.${this.#clusterName}`)) {
      return new ForbiddenError(
        `scale set ${vm.ref.scaleSet} is not named <group>.${this.#clusterName}`,
        foreign,
      );
    }
    if (vm.tags[azureClusterTag] !== this.#clusterName) {
      return new ForbiddenError(
        `VM ${name} is tagged ${azureClusterTag}=${vm.tags[azureClusterTag] ?? '(none)'}, not ${this.#clusterName}`,
        foreign,
      );
    }
    // A stopped, deallocated or stopping VM (or one without a power state yet) is no live node: no
    // label, no renewal; final (`not-running`), even for a Cluster API Machine.
    if (vm.state !== 'running' && vm.state !== 'pending') {
      return new ForbiddenError(
        `VM ${name} is ${vm.state === 'unknown' ? 'in no known power state' : vm.state}, not running or starting; it gets no identity`,
        { details: { instanceId: name, reason: 'not-running' } },
      );
    }
    const instanceGroup = vm.tags[azureInstanceGroupTag];
    if (!instanceGroup) {
      return new ForbiddenError(`VM ${name} has no ${azureInstanceGroupTag} tag`, {
        details: { instanceId: name, reason: 'no-instance-group' },
      });
    }
    const nameProblem = instanceGroupNameProblem(instanceGroup);
    if (nameProblem) {
      return new ForbiddenError(`VM ${name}: its ${azureInstanceGroupTag} tag ${nameProblem}`, {
        details: { instanceId: name, reason: 'invalid-instance-group' },
      });
    }
    const addresses: InstanceAddress[] = (nic?.privateIps ?? []).map((address) => ({
      type: 'InternalIP',
      address,
    }));
    if (vm.computerName) addresses.push({ type: 'Hostname', address: vm.computerName.toLowerCase() });
    return { providerID, instanceId: name, instanceGroup, state: vm.state, addresses };
  }
}
