/**
 * The simulated Compute Engine world: projects, instances, instance templates and managed instance
 * groups, seeded by tests and `dev`, rendered as the compute v1 JSON resources the real API returns.
 */
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { NotFoundError } from '../../errors.ts';

/** The prefix of every resource URL the real API returns, whatever endpoint was called. */
export const computeBase = 'https://www.googleapis.com/compute/v1';

/** Compute Engine instance statuses. */
export type InstanceStatus =
  | 'PROVISIONING'
  | 'STAGING'
  | 'RUNNING'
  | 'STOPPING'
  | 'STOPPED'
  | 'SUSPENDING'
  | 'SUSPENDED'
  | 'REPAIRING'
  | 'TERMINATED';

/** What a test says about an instance; everything but zone and name has a default. */
export interface InstanceSeed {
  project?: string;
  zone: string;
  name: string;
  status?: InstanceStatus;
  /** Live instance metadata (mutable by anyone on the instance: never a source of identity). */
  metadata?: Record<string, string>;
  networkIP?: string;
  natIP?: string;
  /** The first interface's internal IPv6 address (a dual-stack or IPv6-only subnet). */
  ipv6Address?: string;
  /** The external IPv6 range routed to the instance, `<address>/<length>` (GCE gives a /96). */
  externalIpv6Range?: string;
  /** Alias IP ranges of the first interface (an IP-alias cluster's pod range, e.g. `10.4.1.0/24`). */
  aliasIpRanges?: string[];
  labels?: Record<string, string>;
  tags?: string[];
  /** When the instance was created (default: now). */
  creationTimestamp?: Date;
}

/** The seed fields an instance may lack. */
type OptionalNetworking = 'natIP' | 'ipv6Address' | 'externalIpv6Range';

/** A seeded instance, with the id and creation time the simulator assigned. */
export interface SimInstance extends Required<Omit<InstanceSeed, OptionalNetworking | 'creationTimestamp'>> {
  natIP: string | undefined;
  ipv6Address: string | undefined;
  externalIpv6Range: string | undefined;
  id: string;
  creationTimestamp: Date;
}

/** An instance template; its metadata is what kops writes at `update cluster` time. */
export interface TemplateSeed {
  project?: string;
  name: string;
  metadata?: Record<string, string>;
}

/** A member of a MIG, with the action the MIG is taking on it. */
export interface MigMemberSeed {
  instance: string;
  currentAction?: 'NONE' | 'CREATING' | 'RECREATING' | 'DELETING' | 'RESTARTING' | 'REFRESHING' | 'VERIFYING';
  /** The template this member runs, when it differs from the MIG's (a rolling update). */
  instanceTemplate?: string;
}

/** A zonal managed instance group. */
export interface MigSeed {
  project?: string;
  zone: string;
  name: string;
  instanceTemplate: string;
  targetSize?: number;
  members?: Array<string | MigMemberSeed>;
}

interface SimMig {
  project: string;
  zone: string;
  name: string;
  id: string;
  instanceTemplate: string;
  targetSize: number;
  members: Required<MigMemberSeed>[];
}

interface SimTemplate {
  project: string;
  name: string;
  id: string;
  metadata: Record<string, string>;
}

const key = (...parts: string[]) => parts.join('/');

/**
 * A time as the compute API writes `creationTimestamp`: RFC 3339 with milliseconds and the offset
 * of US Pacific time (`2026-06-27T03:10:47.431-07:00`), never `Z`. Daylight saving time is left
 * out: a fixed -07:00 is as valid an RFC 3339 time, and clients must read any offset.
 */
export function pacificTimestamp(time: Date): string {
  const shifted = new Date(time.getTime() - 7 * 3_600_000);
  return `${shifted.toISOString().slice(0, -1)}-07:00`;
}

function metadataJson(items: Record<string, string>) {
  return {
    kind: 'compute#metadata',
    fingerprint: Buffer.from(JSON.stringify(items)).toString('base64').slice(0, 12),
    items: Object.entries(items).map(([k, value]) => ({ key: k, value })),
  };
}

/** The IPv6 and alias-range fields of an instance's first interface, as compute v1 renders them. */
function networkingJson(i: SimInstance): Record<string, unknown> {
  const ipv6 = i.ipv6Address !== undefined || i.externalIpv6Range !== undefined;
  const json: Record<string, unknown> = { stackType: ipv6 ? 'IPV4_IPV6' : 'IPV4_ONLY' };
  if (i.ipv6Address !== undefined) json['ipv6Address'] = i.ipv6Address;
  if (i.externalIpv6Range !== undefined) {
    const [externalIpv6, length = '96'] = i.externalIpv6Range.split('/');
    json['ipv6AccessType'] = 'EXTERNAL';
    json['ipv6AccessConfigs'] = [
      {
        kind: 'compute#accessConfig',
        type: 'DIRECT_IPV6',
        name: 'external-ipv6',
        externalIpv6,
        externalIpv6PrefixLength: Number(length),
        networkTier: 'PREMIUM',
      },
    ];
  }
  if (i.aliasIpRanges.length > 0) {
    json['aliasIpRanges'] = i.aliasIpRanges.map((ipCidrRange) => ({
      ipCidrRange,
      subnetworkRangeName: 'pods',
    }));
  }
  return json;
}

/** The simulated world and its JSON renderings. */
export class GceWorld {
  readonly defaultProject: string;
  readonly #projectNumbers = new Map<string, string>();
  readonly #instances = new Map<string, SimInstance>();
  readonly #templates = new Map<string, SimTemplate>();
  readonly #migs = new Map<string, SimMig>();
  readonly #shieldedKeys = new Map<string, { signing: KeyObject; encryption: KeyObject }>();
  #nextId = 4_000_000_000_000_000_000n;
  #nextAddress = 0;
  #ipv6Ranges = 0;

  constructor(defaultProject: string) {
    this.defaultProject = defaultProject;
  }

  /** A fresh external IPv6 /96 (`2600:1900:4000:0:<n>::/96`). */
  #nextIpv6Range(): string {
    this.#ipv6Ranges++;
    return `2600:1900:4000:0:${this.#ipv6Ranges.toString(16)}::/96`;
  }

  #id(): string {
    this.#nextId += 7919n;
    return this.#nextId.toString();
  }

  /** Registers a project (its number appears in `created-by` and identity tokens). */
  seedProject(projectId: string, projectNumber?: string): string {
    const existing = this.#projectNumbers.get(projectId);
    if (existing && !projectNumber) return existing;
    const number = projectNumber ?? String(100_000_000_000 + this.#projectNumbers.size * 1_000_003);
    this.#projectNumbers.set(projectId, number);
    return number;
  }

  /** The number of a project, registering it on first use. */
  projectNumber(projectId: string): string {
    return this.seedProject(projectId);
  }

  /** Adds or replaces an instance. */
  seedInstance(seed: InstanceSeed): SimInstance {
    const project = seed.project ?? this.defaultProject;
    this.projectNumber(project);
    this.#nextAddress++;
    const instance: SimInstance = {
      project,
      zone: seed.zone,
      name: seed.name,
      status: seed.status ?? 'RUNNING',
      metadata: { ...seed.metadata },
      networkIP:
        seed.networkIP ??
        `10.${(this.#nextAddress >> 16) & 255}.${(this.#nextAddress >> 8) & 255}.${this.#nextAddress & 255}`,
      natIP: seed.natIP,
      ipv6Address: seed.ipv6Address,
      externalIpv6Range: seed.externalIpv6Range,
      aliasIpRanges: [...(seed.aliasIpRanges ?? [])],
      labels: { ...seed.labels },
      tags: [...(seed.tags ?? [])],
      id: this.#id(),
      creationTimestamp: seed.creationTimestamp ?? new Date(),
    };
    this.#instances.set(key(project, seed.zone, seed.name), instance);
    return instance;
  }

  /**
   * Recreates an instance under its name, as a MIG's `recreateInstances` or autohealing does: the same
   * name, zone, metadata (its `created-by`), labels and MIG membership, but another machine — a new
   * numeric id, a new creation time (default now) and a new internal IP (unless `networkIP` is given);
   * no external addresses carry over.
   */
  recreateInstance(
    zone: string,
    name: string,
    options: { creationTimestamp?: Date; networkIP?: string; project?: string } = {},
  ): SimInstance {
    const old = this.instance(options.project ?? this.defaultProject, zone, name);
    return this.seedInstance({
      project: old.project,
      zone,
      name,
      status: 'RUNNING',
      metadata: old.metadata,
      aliasIpRanges: old.aliasIpRanges,
      labels: old.labels,
      tags: old.tags,
      ...(options.networkIP === undefined ? {} : { networkIP: options.networkIP }),
      ...(options.creationTimestamp === undefined ? {} : { creationTimestamp: options.creationTimestamp }),
    });
  }

  /** Changes an instance in place (status, live metadata, …), as a user or the instance itself could. */
  updateInstance(zone: string, name: string, change: Partial<Omit<SimInstance, 'id'>>, project?: string) {
    const instance = this.instance(project ?? this.defaultProject, zone, name);
    Object.assign(instance, change);
    return instance;
  }

  /** Deletes an instance (and its MIG membership). */
  deleteInstance(zone: string, name: string, project = this.defaultProject): void {
    this.#instances.delete(key(project, zone, name));
    for (const mig of this.#migs.values()) {
      if (mig.project === project && mig.zone === zone) {
        mig.members = mig.members.filter((m) => m.instance !== name);
      }
    }
  }

  /** Adds or replaces an instance template. */
  seedTemplate(seed: TemplateSeed): void {
    const project = seed.project ?? this.defaultProject;
    this.#templates.set(key(project, seed.name), {
      project,
      name: seed.name,
      id: this.#id(),
      metadata: { ...seed.metadata },
    });
  }

  /** Adds or replaces a zonal MIG; its members must already exist as instances. */
  seedMig(seed: MigSeed): void {
    const project = seed.project ?? this.defaultProject;
    const members = (seed.members ?? []).map((m) => {
      const member = typeof m === 'string' ? { instance: m } : m;
      this.instance(project, seed.zone, member.instance);
      return {
        instance: member.instance,
        currentAction: member.currentAction ?? 'NONE',
        instanceTemplate: member.instanceTemplate ?? seed.instanceTemplate,
      };
    });
    this.#migs.set(key(project, seed.zone, seed.name), {
      project,
      zone: seed.zone,
      name: seed.name,
      id: this.#id(),
      instanceTemplate: seed.instanceTemplate,
      targetSize: seed.targetSize ?? members.length,
      members,
    });
  }

  /** The `created-by` metadata value a MIG writes on the instances it creates. */
  createdBy(zone: string, mig: string, project = this.defaultProject): string {
    return `projects/${this.projectNumber(project)}/zones/${zone}/instanceGroupManagers/${mig}`;
  }

  /**
   * Seeds what kops creates for one instance group in one zone: a template naming the group, a MIG,
   * and `count` running instances whose metadata carries `created-by`.
   */
  seedInstanceGroup(options: {
    project?: string;
    zone: string;
    instanceGroup: string;
    mig?: string;
    template?: string;
    count: number;
    namePrefix?: string;
    /** The kops cluster the template names in its `cluster-name` metadata. */
    clusterName: string;
    /** Route a distinct external IPv6 /96 to each instance, as a kops IPv6 cluster's subnets do. */
    externalIpv6?: boolean;
  }): SimInstance[] {
    const project = options.project ?? this.defaultProject;
    const mig = options.mig ?? `a-${options.instanceGroup}-${options.zone}`.slice(0, 63);
    const template = options.template ?? `${options.instanceGroup}-${options.zone}-tpl`;
    const prefix = options.namePrefix ?? mig;
    this.seedTemplate({
      project,
      name: template,
      metadata: {
        'cluster-name': options.clusterName,
        'kops-k8s-io-instance-group-name': options.instanceGroup,
      },
    });
    const instances: SimInstance[] = [];
    for (let i = 0; i < options.count; i++) {
      instances.push(
        this.seedInstance({
          project,
          zone: options.zone,
          name: `${prefix}-${i.toString(36).padStart(4, '0')}`,
          metadata: { 'created-by': this.createdBy(options.zone, mig, project) },
          ...(options.externalIpv6 ? { externalIpv6Range: this.#nextIpv6Range() } : {}),
        }),
      );
    }
    this.seedMig({
      project,
      zone: options.zone,
      name: mig,
      instanceTemplate: template,
      members: instances.map((x) => x.name),
    });
    return instances;
  }

  /** An instance, or NotFoundError. */
  instance(project: string, zone: string, name: string): SimInstance {
    const found = this.#instances.get(key(project, zone, name));
    if (!found)
      throw new NotFoundError(
        `The resource 'projects/${project}/zones/${zone}/instances/${name}' was not found`,
      );
    return found;
  }

  /** Instances of a project, optionally of one zone. */
  instances(project: string, zone?: string): SimInstance[] {
    return [...this.#instances.values()].filter((i) => i.project === project && (!zone || i.zone === zone));
  }

  /** MIGs of a project, optionally of one zone. */
  migs(project: string, zone?: string): SimMig[] {
    return [...this.#migs.values()].filter((m) => m.project === project && (!zone || m.zone === zone));
  }

  /** A MIG, or NotFoundError. */
  mig(project: string, zone: string, name: string): SimMig {
    const found = this.#migs.get(key(project, zone, name));
    if (!found) {
      throw new NotFoundError(
        `The resource 'projects/${project}/zones/${zone}/instanceGroupManagers/${name}' was not found`,
      );
    }
    return found;
  }

  /** A template, or NotFoundError. */
  template(project: string, name: string): SimTemplate {
    const found = this.#templates.get(key(project, name));
    if (!found)
      throw new NotFoundError(
        `The resource 'projects/${project}/global/instanceTemplates/${name}' was not found`,
      );
    return found;
  }

  /**
   * The Shielded VM keys of an instance (created on first use); tests sign TPM-style proofs with them.
   * RSA-2048, as a vTPM's: `getShieldedInstanceIdentity` publishes the RSA attestation key kops signs
   * with (go-tpm-tools GceAttestationKeyRSA) and kops' verifier refuses any other key type.
   */
  shieldedKeys(project: string, zone: string, name: string): { signing: KeyObject; encryption: KeyObject } {
    const instance = this.instance(project, zone, name);
    const k = key(project, zone, name, instance.id);
    let keys = this.#shieldedKeys.get(k);
    if (!keys) {
      keys = {
        signing: generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey,
        encryption: generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey,
      };
      this.#shieldedKeys.set(k, keys);
    }
    return keys;
  }

  /** The compute#instance JSON of an instance. */
  instanceJson(i: SimInstance) {
    const zoneUrl = `${computeBase}/projects/${i.project}/zones/${i.zone}`;
    return {
      kind: 'compute#instance',
      id: i.id,
      creationTimestamp: pacificTimestamp(i.creationTimestamp),
      name: i.name,
      zone: zoneUrl,
      machineType: `${zoneUrl}/machineTypes/e2-medium`,
      status: i.status,
      selfLink: `${zoneUrl}/instances/${i.name}`,
      labels: i.labels,
      tags: { items: i.tags, fingerprint: 'tags' },
      metadata: metadataJson(i.metadata),
      networkInterfaces: [
        {
          kind: 'compute#networkInterface',
          name: 'nic0',
          network: `${computeBase}/projects/${i.project}/global/networks/default`,
          networkIP: i.networkIP,
          accessConfigs: i.natIP
            ? [{ kind: 'compute#accessConfig', type: 'ONE_TO_ONE_NAT', name: 'External NAT', natIP: i.natIP }]
            : [],
          ...networkingJson(i),
        },
      ],
      shieldedInstanceConfig: { enableSecureBoot: false, enableVtpm: true, enableIntegrityMonitoring: true },
    };
  }

  /** The compute#instanceGroupManager JSON of a MIG. */
  migJson(m: SimMig) {
    const zoneUrl = `${computeBase}/projects/${m.project}/zones/${m.zone}`;
    const counts = {
      none: 0,
      creating: 0,
      recreating: 0,
      deleting: 0,
      restarting: 0,
      refreshing: 0,
      verifying: 0,
      abandoning: 0,
    };
    for (const member of m.members) {
      const action = member.currentAction.toLowerCase() as keyof typeof counts;
      counts[action]++;
    }
    const templateUrl = `${computeBase}/projects/${m.project}/global/instanceTemplates/${m.instanceTemplate}`;
    return {
      kind: 'compute#instanceGroupManager',
      id: m.id,
      name: m.name,
      zone: zoneUrl,
      instanceTemplate: templateUrl,
      versions: [{ instanceTemplate: templateUrl }],
      instanceGroup: `${zoneUrl}/instanceGroups/${m.name}`,
      baseInstanceName: m.name,
      targetSize: m.targetSize,
      currentActions: counts,
      status: { isStable: counts.none === m.members.length },
      selfLink: `${zoneUrl}/instanceGroupManagers/${m.name}`,
    };
  }

  /** The compute#managedInstance JSON of each member of a MIG. */
  managedInstancesJson(m: SimMig) {
    return m.members.map((member) => {
      const instance = this.#instances.get(key(m.project, m.zone, member.instance));
      return {
        instance: `${computeBase}/projects/${m.project}/zones/${m.zone}/instances/${member.instance}`,
        id: instance?.id,
        instanceStatus: instance?.status,
        currentAction: member.currentAction,
        version: {
          instanceTemplate: `${computeBase}/projects/${m.project}/global/instanceTemplates/${member.instanceTemplate}`,
        },
      };
    });
  }

  /** The compute#instanceTemplate JSON of a template. */
  templateJson(t: SimTemplate) {
    return {
      kind: 'compute#instanceTemplate',
      id: t.id,
      name: t.name,
      selfLink: `${computeBase}/projects/${t.project}/global/instanceTemplates/${t.name}`,
      properties: { machineType: 'e2-medium', metadata: metadataJson(t.metadata) },
    };
  }
}
