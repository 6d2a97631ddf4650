/**
 * Cluster API `Machine` objects (`cluster.x-k8s.io/v1beta1`), watched and indexed by providerID: in
 * capi mode a node's instance group is the MachineDeployment its Machine belongs to (label
 * `cluster.x-k8s.io/deployment-name`), as kops' capimanager finds it. kops lists every Machine for each
 * lookup; here one list+watch keeps a slim copy, so identifying a node costs no API call.
 */
import type { KubeConfig, KubernetesObject } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { Informer, kubeList, kubeWatch } from '../../kube/informer.ts';
import type { Logger } from '../../log.ts';
import type { InstanceAddress, InstanceState } from '../types.ts';

/** Where Machines are listed and watched (every namespace). */
export const machinesPath = '/apis/cluster.x-k8s.io/v1beta1/machines';
/** The label naming a Machine's MachineDeployment. */
export const deploymentNameLabel = 'cluster.x-k8s.io/deployment-name';

/** What is kept of a Machine. */
export interface MachineRecord {
  /** `namespace/name`. */
  key: string;
  providerID?: string;
  deploymentName?: string;
  failureDomain?: string;
  state: InstanceState;
  addresses: InstanceAddress[];
}

interface MachineObject extends KubernetesObject {
  spec?: { providerID?: unknown; failureDomain?: unknown };
  status?: { phase?: unknown; addresses?: unknown };
}

/** Cluster API's Machine phases, as instance states. */
const stateByPhase: Record<string, InstanceState> = {
  Pending: 'pending',
  Provisioning: 'pending',
  Provisioned: 'pending',
  Running: 'running',
  Deleting: 'stopping',
  Deleted: 'terminated',
};

const addressTypes = new Set<string>(['InternalIP', 'ExternalIP', 'InternalDNS', 'ExternalDNS', 'Hostname']);

const text = (value: unknown): string | undefined =>
  typeof value === 'string' && value !== '' ? value : undefined;

/** The slim record of a Machine (pure). */
export function machineRecordOf(object: MachineObject): MachineRecord {
  const { namespace = '', name = '', labels = {} } = object.metadata ?? {};
  const addresses = Array.isArray(object.status?.addresses) ? (object.status.addresses as unknown[]) : [];
  const providerID = text(object.spec?.providerID);
  const deploymentName = text(labels[deploymentNameLabel]);
  const failureDomain = text(object.spec?.failureDomain);
  return {
    key: `${namespace}/${name}`,
    ...(providerID ? { providerID } : {}),
    ...(deploymentName ? { deploymentName } : {}),
    ...(failureDomain ? { failureDomain } : {}),
    state: stateByPhase[String(object.status?.phase)] ?? 'unknown',
    addresses: addresses.flatMap((a) => {
      const { type, address } = (a ?? {}) as { type?: unknown; address?: unknown };
      return typeof type === 'string' && addressTypes.has(type) && text(address)
        ? [{ type: type as InstanceAddress['type'], address: address as string }]
        : [];
    }),
  };
}

/** Options of {@link MachineIndex}. */
export interface MachineIndexOptions {
  kubeConfig: KubeConfig;
  registry?: Registry;
  logger?: Logger;
}

/** The Machines of the cluster by providerID, kept current by one watch. */
export class MachineIndex {
  readonly #informer: Informer<MachineObject, MachineRecord>;
  readonly #byProviderID = new Map<string, Map<string, MachineRecord>>();
  /** Machines per MachineDeployment name. */
  readonly #deployments = new Map<string, number>();

  constructor(options: MachineIndexOptions) {
    this.#informer = new Informer<MachineObject, MachineRecord>({
      name: 'machines',
      path: machinesPath,
      kind: 'Machine',
      list: kubeList<MachineObject>(options.kubeConfig, machinesPath),
      watch: kubeWatch(options.kubeConfig),
      transform: machineRecordOf,
      ...(options.registry ? { registry: options.registry } : {}),
      ...(options.logger ? { logger: options.logger } : {}),
    });
    this.#informer.addHandlers({
      add: (record) => this.#index(record),
      update: (old, record) => {
        this.#unindex(old);
        this.#index(record);
      },
      delete: (record) => this.#unindex(record),
    });
  }

  #index(record: MachineRecord): void {
    if (record.deploymentName) {
      this.#deployments.set(record.deploymentName, (this.#deployments.get(record.deploymentName) ?? 0) + 1);
    }
    if (!record.providerID) return;
    const machines = this.#byProviderID.get(record.providerID) ?? new Map<string, MachineRecord>();
    machines.set(record.key, record);
    this.#byProviderID.set(record.providerID, machines);
  }

  #unindex(record: MachineRecord): void {
    const count = record.deploymentName ? this.#deployments.get(record.deploymentName) : undefined;
    if (record.deploymentName && count !== undefined) {
      if (count > 1) this.#deployments.set(record.deploymentName, count - 1);
      else this.#deployments.delete(record.deploymentName);
    }
    if (!record.providerID) return;
    const machines = this.#byProviderID.get(record.providerID);
    machines?.delete(record.key);
    if (machines?.size === 0) this.#byProviderID.delete(record.providerID);
  }

  start(): void {
    this.#informer.start();
  }

  async stop(): Promise<void> {
    await this.#informer.stop();
  }

  /** Whether the first list has completed: before it, no answer about a providerID is complete. */
  hasSynced(): boolean {
    return this.#informer.hasSynced();
  }

  waitForSync(signal?: AbortSignal): Promise<boolean> {
    return this.#informer.waitForSync(signal);
  }

  /**
   * Whether some Machine belongs to MachineDeployment `name`: the node controller's cue that a group
   * the state store lacks is a Cluster API one (capi/instance-group.ts).
   */
  hasDeployment(name: string): boolean {
    return this.#deployments.has(name);
  }

  /** The Machines that claim `providerID` (normally one). */
  machinesOf(providerID: string): MachineRecord[] {
    return [...(this.#byProviderID.get(providerID)?.values() ?? [])];
  }
}
