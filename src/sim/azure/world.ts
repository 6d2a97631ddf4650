/**
 * The simulated Azure world: one subscription and resource group holding scale sets, their VMs and
 * standalone VMs, each with a vmId, a creation time, a computer name, tags, a power state, a private address and
 * optionally a public one (an instance group with `associatePublicIP`), more IP configurations or
 * more network interfaces — what the ARM endpoints and IMDS answer from. `seedKopsCluster` lays it out as kops does: a scale
 * set `<ig>.<cluster>` (control plane: `<ig>.masters.<cluster>`) tagged `KubernetesCluster`,
 * `kops.k8s.io_instancegroup` and `k8s.io_role_<role>`, whose VMs inherit its tags.
 */
import { randomUUID } from 'node:crypto';

/** A time as ARM writes `timeCreated`: `2021-06-27T01:02:38.3138469+00:00`. */
export function armTime(date: Date): string {
  return date.toISOString().replace(/Z$/, '0000+00:00');
}

/** A VM's power state, as the instance view's `PowerState/<state>` code names it. */
export type SimPowerState = 'starting' | 'running' | 'stopping' | 'stopped' | 'deallocating' | 'deallocated';

/** An IP configuration beyond a VM's primary one: its private address and, if any, its public one. */
export interface SimIpConfig {
  privateIp: string;
  publicIp?: string;
}

/** One VM, standalone or in a scale set. */
export interface SimVm {
  /** Azure's name: the VM name, or `<vmss>_<instance id>` for a scale-set VM. */
  name: string;
  scaleSet?: string;
  instanceId?: string;
  vmId: string;
  /**
   * When the VM resource was created, as ARM writes `properties.timeCreated` (RFC 3339 with seven
   * fractional digits and an offset: `2021-06-27T01:02:38.3138469+00:00`, azure-rest-api-specs
   * VirtualMachineScaleSetVM_List_MaximumSet_Gen.json); a test may put anything here.
   */
  timeCreated: string;
  computerName: string;
  tags: Record<string, string>;
  /** Undefined: the instance view has no `PowerState/…` status yet, as while Azure creates the VM. */
  powerState: SimPowerState | undefined;
  /** The private address of its primary interface's primary IP configuration. */
  privateIp: string;
  /** The public address bound to that IP configuration, if any (kops' `associatePublicIP`). */
  publicIp?: string;
  /** More IP configurations of its primary interface, after the primary one (dual-stack: IPv6). */
  moreIpConfigs?: SimIpConfig[];
  /** More network interfaces, none of them primary, one IP configuration each (listed after it). */
  moreNics?: (SimIpConfig & { name: string })[];
  latestModelApplied: boolean;
  /**
   * Being deleted: ARM lists it with `provisioningState: "Deleting"` and no instance view (as
   * kubernetes-sigs/cloud-provider-azure reads such VMs: "InstanceView … nil when the VM is under
   * deleting").
   */
  deleting?: boolean;
}

/** One scale set. */
export interface SimScaleSet {
  name: string;
  tags: Record<string, string>;
  capacity: number;
  sku: string;
  nextInstanceId: number;
}

/** One instance group of {@link AzureWorld.seedKopsCluster}. */
export interface SimInstanceGroup {
  name: string;
  role?: 'control-plane' | 'node';
  count: number;
  /** Each VM gets a public address on its primary IP configuration, as kops' `associatePublicIP`. */
  associatePublicIP?: boolean;
}

/** The state of the simulated subscription. */
export class AzureWorld {
  readonly subscriptionId: string;
  readonly resourceGroup: string;
  readonly location: string;
  readonly scaleSets = new Map<string, SimScaleSet>();
  /** Every VM by lower-cased Azure name. */
  readonly vms = new Map<string, SimVm>();
  #nextIp = 4;
  #nextPublicIp = 1;

  constructor(options: { subscriptionId?: string; resourceGroup?: string; location?: string } = {}) {
    this.subscriptionId = options.subscriptionId ?? '00000000-1111-2222-3333-444444444444';
    this.resourceGroup = options.resourceGroup ?? 'kops-rg';
    this.location = options.location ?? 'eastus';
  }

  /** Adds a scale set (tags copied to the VMs added to it). */
  addScaleSet(name: string, tags: Record<string, string>, sku = 'Standard_D2s_v3'): SimScaleSet {
    const set: SimScaleSet = { name, tags: { ...tags }, capacity: 0, sku, nextInstanceId: 0 };
    this.scaleSets.set(name.toLowerCase(), set);
    return set;
  }

  /** Adds a running VM to a scale set, named `<prefix><6 base-36 digits>` as Azure names instances. */
  addScaleSetVm(scaleSetName: string, computerNamePrefix?: string): SimVm {
    const set = this.scaleSets.get(scaleSetName.toLowerCase());
    if (!set) throw new Error(`no scale set ${scaleSetName}`);
    const instanceId = String(set.nextInstanceId++);
    set.capacity++;
    const prefix = computerNamePrefix ?? set.tags['kops.k8s.io_instancegroup'] ?? set.name.split('.')[0];
    const vm: SimVm = {
      name: `${set.name}_${instanceId}`,
      scaleSet: set.name,
      instanceId,
      vmId: randomUUID(),
      timeCreated: armTime(new Date()),
      computerName: `${prefix}${Number(instanceId).toString(36).padStart(6, '0')}`,
      tags: { ...set.tags },
      powerState: 'running',
      privateIp: this.allocatePrivateIp(),
      latestModelApplied: true,
    };
    this.vms.set(vm.name.toLowerCase(), vm);
    return vm;
  }

  /** Adds a running standalone VM. */
  addVm(name: string, tags: Record<string, string> = {}): SimVm {
    const vm: SimVm = {
      name,
      vmId: randomUUID(),
      timeCreated: armTime(new Date()),
      computerName: name,
      tags: { ...tags },
      powerState: 'running',
      privateIp: this.allocatePrivateIp(),
      latestModelApplied: true,
    };
    this.vms.set(name.toLowerCase(), vm);
    return vm;
  }

  /** Deletes a VM (a scale-set VM also leaves its set's capacity). */
  deleteVm(name: string): void {
    const vm = this.vms.get(name.toLowerCase());
    if (!vm) return;
    this.vms.delete(name.toLowerCase());
    const set = vm.scaleSet ? this.scaleSets.get(vm.scaleSet.toLowerCase()) : undefined;
    if (set) set.capacity--;
  }

  /** A scale-set VM by set and instance id. */
  scaleSetVm(scaleSet: string, instanceId: string): SimVm | undefined {
    return this.vms.get(`${scaleSet}_${instanceId}`.toLowerCase());
  }

  /** The VMs of a scale set, by instance id. */
  scaleSetVms(scaleSet: string): SimVm[] {
    return [...this.vms.values()]
      .filter((vm) => vm.scaleSet?.toLowerCase() === scaleSet.toLowerCase())
      .sort((a, b) => Number(a.instanceId) - Number(b.instanceId));
  }

  /** The resource id of a VM. */
  resourceId(vm: SimVm): string {
    const base = `/subscriptions/${this.subscriptionId}/resourceGroups/${this.resourceGroup}/providers/Microsoft.Compute`;
    return vm.scaleSet
      ? `${base}/virtualMachineScaleSets/${vm.scaleSet}/virtualMachines/${vm.instanceId}`
      : `${base}/virtualMachines/${vm.name}`;
  }

  /** The providerID a node on this VM carries. */
  providerID(vm: SimVm): string {
    return `azure://${this.resourceId(vm)}`;
  }

  /** Lays out a kops cluster: one tagged scale set per instance group, with `count` VMs each. */
  seedKopsCluster(clusterName: string, groups: readonly SimInstanceGroup[]): Map<string, SimVm[]> {
    const out = new Map<string, SimVm[]>();
    for (const group of groups) {
      const role = group.role ?? 'node';
      const setName =
        role === 'control-plane' ? `${group.name}.masters.${clusterName}` : `${group.name}.${clusterName}`;
      const tags: Record<string, string> = {
        KubernetesCluster: clusterName,
        'kops.k8s.io_instancegroup': group.name,
        [`k8s.io_role_${role}`]: '1',
      };
      if (role === 'control-plane') tags['k8s.io_role_master'] = '1';
      this.addScaleSet(setName, tags);
      out.set(
        group.name,
        Array.from({ length: group.count }, () => {
          const vm = this.addScaleSetVm(setName, group.name);
          if (group.associatePublicIP) vm.publicIp = this.allocatePublicIp();
          return vm;
        }),
      );
    }
    return out;
  }

  /** A fresh public address (from 20.0.0.0/8, distinct from every other one handed out). */
  allocatePublicIp(): string {
    const n = this.#nextPublicIp++;
    return `20.${Math.floor(n / 62_500) % 250}.${Math.floor(n / 250) % 250}.${(n % 250) + 1}`;
  }

  /** A fresh private address (from 10.0.0.0/16), as the cluster's subnet hands them out. */
  allocatePrivateIp(): string {
    const n = this.#nextIp++;
    return `10.0.${Math.floor(n / 250)}.${n % 250}`;
  }
}
