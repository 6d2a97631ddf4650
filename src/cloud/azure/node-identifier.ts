/**
 * Azure node identity, as kops' nodeidentity/azure reads it — providerID → VM → its tags — but
 * batched: scale-set VMs are read by listing their scale set (one paged VM listing with instance
 * views, one paged network-interface listing and, when an interface of the set has a public address,
 * one paged public-address listing per scale set), not one GET per node. A listing is kept for a
 * short while and shared by every caller that asks meanwhile, so a label storm of 5,000 nodes in a
 * handful of scale sets costs a few dozen ARM reads. That keeps well inside ARM's
 * documented read throttling ("Understand how Azure Resource Manager throttles requests": a bucket
 * of 250 reads per subscription and region, refilled at 25 per second) and the Compute provider's
 * per-operation GET limits, where one GET per node would drain the bucket in seconds.
 * Trust: the instance group is the `kops.k8s.io_instancegroup` tag of the VM (its scale set's), and
 * the VM must be this cluster's: a scale set named `<group>.<cluster>` tagged `KubernetesCluster`.
 * It must also be live: its instance view (read in the same listing or GET, `$expand=instanceView`,
 * so no extra call) must say `PowerState/running` or `PowerState/starting`. kops' identifier does not
 * look; here a stopped or deallocated VM gets no identity (reason `not-running`), so neither labels
 * nor kubelet certificate renewals are granted for it.
 * Addresses: those the Azure cloud-controller-manager gives the Node, which the kubelet's serving
 * CSR names (kubernetes-sigs/cloud-provider-azure pkg/provider/azure_instances_v1.go `addressGetter`):
 * the primary interface's (azure_vmss.go `getPrimaryInterfaceID`: the VM's only one, else the one its
 * network profile marks primary) private addresses as InternalIP, the computer name as Hostname, and
 * the public addresses bound to its IP configurations as ExternalIP. The CCM reads the primary IP
 * configuration (azure_standard.go `getPrimaryIPConfig`), and on its own VM IMDS' first IPv4 and
 * IPv6 ones (`getLocalInstanceNodeAddresses`); every IP configuration of the primary interface is
 * taken here, a superset of both, each address the VM's own.
 */
import { ForbiddenError, NotFoundError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { monotonicMs, youngerThan } from '../age.ts';
import { malformedAnswer } from '../api-answer.ts';
import type { Outcome } from '../batcher.ts';
import { listingFault } from '../cluster-servers.ts';
import { mapConcurrent } from '../concurrency.ts';
import { BatchedNodeIdentifier, outcomeOf } from '../identify-batches.ts';
import { instanceGroupNameProblem } from '../instance-group-name.ts';
import type { InstanceAddress, NodeIdentity } from '../types.ts';
import {
  type AzureClient,
  type AzureNic,
  type AzurePublicIp,
  type AzureVm,
  vmsByInstanceId,
} from './client.ts';
import { type AzureVmRef, formatAzureVmId, parseAzureProviderID, sameAzureName } from './resource-id.ts';
import { azureClusterTag, azureInstanceGroupTag } from './tags.ts';

/** Options of {@link AzureNodeIdentifier}. */
export interface AzureNodeIdentifierOptions {
  client: Pick<
    AzureClient,
    | 'subscriptionId'
    | 'resourceGroup'
    | 'getVm'
    | 'getNic'
    | 'listScaleSetVms'
    | 'listScaleSetNics'
    | 'listScaleSetPublicIps'
    | 'listPublicIps'
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

/** Public addresses by lower-cased resource id. */
type PublicIps = ReadonlyMap<string, AzurePublicIp>;

/**
 * One scale set as listed: its VMs by instance id, their interfaces by lower-cased VM resource id,
 * and the public addresses of the set.
 */
interface Listing {
  at: number;
  /** A VM listed twice with different records is a malformed answer here (vmsByInstanceId). */
  vms: Map<string, AzureVm | Error>;
  nics: Map<string, AzureNic[]>;
  publicIps: PublicIps;
}

/** Whether an IP configuration of the interface has a public address bound to it. */
const hasPublicIp = (nic: AzureNic | undefined) => nic?.ipConfigs.some((c) => c.publicIpId) ?? false;

/**
 * Public addresses by id. ARM ids compare case-insensitively; the same address listed twice with
 * different records (a paging glitch, a proxy mixing answers) is believed in neither: the listing is
 * a malformed answer, as no address can be told the VM's.
 */
function publicIpsById(publicIps: readonly AzurePublicIp[], title: string): PublicIps {
  const out = new Map<string, AzurePublicIp>();
  for (const ip of publicIps) {
    const key = ip.id.toLowerCase();
    const before = out.get(key);
    if (before && JSON.stringify(before) !== JSON.stringify(ip)) {
      throw malformedAnswer(`${title} holds public address ${ip.id} twice, with different records`);
    }
    out.set(key, ip);
  }
  return out;
}

/**
 * A VM's primary interface among those attached to it, as the cloud-controller-manager picks it
 * (azure_vmss.go `getPrimaryInterfaceID`): the first of the VM's network profile, which lists the one
 * it marks primary first (client.ts `nicIds`); failing that, the interface whose own record says it is
 * primary, or the only one.
 */
function primaryNicOf(vm: AzureVm, nics: readonly AzureNic[]): AzureNic | undefined {
  const named = vm.nicIds[0]?.toLowerCase();
  return (
    nics.find((nic) => nic.id.toLowerCase() === named) ??
    nics.find((nic) => nic.primary) ??
    (nics.length === 1 ? nics[0] : undefined)
  );
}

/**
 * An interface's addresses: each IP configuration's private address (InternalIP), then the public
 * address bound to it (ExternalIP). A public address is the VM's only when both sides agree, ARM ids
 * compared case-insensitively: the IP configuration names it, and it names that IP configuration. A
 * record that names another VM's configuration is taken for neither.
 */
function nicAddresses(
  nic: AzureNic | undefined,
  publicIps: PublicIps,
): { internal: string[]; external: string[] } {
  const configs = nic?.ipConfigs ?? [];
  const external = configs.flatMap((config) => {
    const ip = config.publicIpId ? publicIps.get(config.publicIpId.toLowerCase()) : undefined;
    return ip?.address !== undefined &&
      config.id !== undefined &&
      sameAzureName(ip.ipConfigurationId ?? '', config.id)
      ? [ip.address]
      : [];
  });
  return { internal: nic?.privateIps ?? [], external };
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
        const nics = vm ? (listing.nics.get(formatAzureVmId(vm.ref).toLowerCase()) ?? []) : [];
        this.#settle(results, id, ref, vm, vm && primaryNicOf(vm, nics), listing.publicIps);
      }
    });
    await this.#identifyStandalone(standalone, results);
    this.#logger.debug({ nodes: providerIDs.length, scaleSets: byScaleSet.size }, 'identified Azure nodes');
    return results;
  }

  /**
   * Standalone VMs: each read with one GET and its primary interface's, and, when one of those has a
   * public address, the resource group's public addresses listed once for all of them. That listing
   * failing is a fault for the VMs that have one. An address of another resource group is not in it,
   * so not taken: the cloud-controller-manager looks it up in its own group too (azure_standard.go
   * `GetIPByNodeName`, by the reference's last segment).
   */
  async #identifyStandalone(
    standalone: { id: string; ref: AzureVmRef }[],
    results: Map<string, Outcome<NodeIdentity>>,
  ): Promise<void> {
    const read = await mapConcurrent(standalone, this.#concurrency, async ({ id, ref }) => {
      try {
        const vm = await this.#client.getVm(ref);
        const nic = vm.nicIds[0] ? await this.#client.getNic(vm.nicIds[0]) : undefined;
        return { id, ref, vm, nic };
      } catch (err) {
        results.set(id, { ok: false, error: err as Error });
        return undefined;
      }
    });
    const found = read.flatMap((r) => (r ? [r] : []));
    let publicIps: PublicIps | Error = new Map();
    if (found.some((r) => hasPublicIp(r.nic))) {
      publicIps = await this.#publicIps(() => this.#client.listPublicIps())
        .then((ips) => publicIpsById(ips, 'the public address listing'))
        .catch((err: unknown) => err as Error);
    }
    for (const { id, ref, vm, nic } of found) {
      if (publicIps instanceof Error && hasPublicIp(nic)) results.set(id, { ok: false, error: publicIps });
      else this.#settle(results, id, ref, vm, nic, publicIps instanceof Error ? new Map() : publicIps);
    }
  }

  /**
   * A public-address listing. Its refusal (a 404 or 400 to the controller's own request) says nothing
   * about the nodes: a fault, never a verdict on them.
   */
  async #publicIps(list: () => Promise<AzurePublicIp[]>): Promise<AzurePublicIp[]> {
    return list().catch((err: unknown) => {
      throw listingFault(err as Error, 'public IP');
    });
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
    const read = async () => {
      const [vms, nics] = await Promise.all([
        this.#client.listScaleSetVms(scaleSet),
        this.#client.listScaleSetNics(scaleSet),
      ]);
      // Public addresses only when an interface of the set has one (kops' associatePublicIP): a set
      // without costs no call, and needs no permission to read them.
      const publicIps = nics.some(hasPublicIp)
        ? await this.#publicIps(() => this.#client.listScaleSetPublicIps(scaleSet))
        : [];
      return { vms, nics, publicIps };
    };
    const { vms, nics, publicIps } = await read().catch((err: unknown) => {
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
    // Every interface of a VM is kept: which is primary is the VM's to say (primaryNicOf).
    const byVm = new Map<string, AzureNic[]>();
    for (const nic of nics) {
      const key = nic.attachedTo?.toLowerCase();
      if (key) byVm.set(key, [...(byVm.get(key) ?? []), nic]);
    }
    return {
      at,
      vms: vmsByInstanceId(vms, this.#logger),
      nics: byVm,
      publicIps: publicIpsById(publicIps, `the public address listing of scale set ${scaleSet}`),
    };
  }

  #settle(
    results: Map<string, Outcome<NodeIdentity>>,
    id: string,
    ref: AzureVmRef,
    vm: AzureVm | undefined,
    nic: AzureNic | undefined,
    publicIps: PublicIps,
  ): void {
    const checked = vm
      ? this.#check(id, vm, nic, publicIps)
      : new NotFoundError(`VM ${ref.name} does not exist`);
    results.set(id, outcomeOf(checked));
  }

  /** The identity of a VM of this cluster, or why it is not one. */
  #check(
    providerID: string,
    vm: AzureVm,
    nic: AzureNic | undefined,
    publicIps: PublicIps,
  ): NodeIdentity | Error {
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
    // In the CCM's order: InternalIP, Hostname, ExternalIP.
    const { internal, external } = nicAddresses(nic, publicIps);
    const addresses: InstanceAddress[] = internal.map((address) => ({ type: 'InternalIP', address }));
    if (vm.computerName) addresses.push({ type: 'Hostname', address: vm.computerName.toLowerCase() });
    addresses.push(...external.map((address): InstanceAddress => ({ type: 'ExternalIP', address })));
    return {
      providerID,
      instanceId: name,
      instanceGroup,
      state: vm.state,
      addresses,
      // The vmId: a VM deleted and re-created under its name (same providerID) gets another one.
      incarnation: { id: vm.vmId, ...(vm.timeCreated ? { createdAt: vm.timeCreated } : {}) },
    };
  }
}
