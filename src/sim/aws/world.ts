/**
 * What the simulated AWS account holds: EC2 instances and launch templates, Auto Scaling groups and
 * the credentials STS knows (with the actions each may not call). Tests and `kops-controller dev`
 * seed it; the service handlers read it.
 */
import { randomBytes } from 'node:crypto';
import type { SigV4Credentials } from '../../cloud/aws/sigv4.ts';

/** EC2's instance state names. */
export type Ec2StateName = 'pending' | 'running' | 'shutting-down' | 'terminated' | 'stopping' | 'stopped';

/** EC2's numeric code for each state, as DescribeInstances returns it. */
export const ec2StateCodes: Record<Ec2StateName, number> = {
  pending: 0,
  running: 16,
  'shutting-down': 32,
  terminated: 48,
  stopping: 64,
  stopped: 80,
};

/** An instance as the simulator stores it. */
export interface SimInstance {
  id: string;
  zone: string;
  state: Ec2StateName;
  tags: Record<string, string>;
  instanceType: string;
  privateIp: string;
  privateDnsName: string;
  publicIp?: string;
  publicDnsName?: string;
  ipv6?: string;
  /** IPv6 prefixes delegated to the primary ENI (a kops IPv6 cluster gives each instance one /80). */
  ipv6Prefixes?: string[];
  /** ENIs attached besides the primary one (device index 1, 2, …), with their delegated prefixes. */
  secondaryNetworkInterfaces?: SimNetworkInterface[];
  /** `spot`, `scheduled` or `capacity-block`; absent for on-demand. */
  lifecycle?: string;
  launchTime: Date;
}

/** An ENI attached to an instance besides its primary one. */
export interface SimNetworkInterface {
  ipv6Prefixes?: string[];
}

/** An instance to seed; `cluster` and `instanceGroup` add the tags kops puts on its instances. */
export interface SimInstanceInput extends Partial<Omit<SimInstance, 'id' | 'zone'>> {
  id: string;
  zone: string;
  /** Adds `KubernetesCluster=<cluster>` and `kubernetes.io/cluster/<cluster>=owned`. */
  cluster?: string;
  /** Adds `kops.k8s.io/instancegroup=<instanceGroup>`. */
  instanceGroup?: string;
}

/**
 * A launch template as EC2 stores it: its versions are 1 to `latestVersion`, one of which is the
 * default (what `$Default`, or no version, stands for; `$Latest` stands for the latest).
 */
export interface SimLaunchTemplate {
  id: string;
  name: string;
  latestVersion: number;
  defaultVersion: number;
  createTime: Date;
  tags: Record<string, string>;
}

/** A launch template to seed; versions default to 1. */
export interface SimLaunchTemplateInput {
  id: string;
  name?: string;
  latestVersion?: number;
  defaultVersion?: number;
  tags?: Record<string, string>;
}

/** A launch template as a group or an instance names it: a version number, `$Latest`, `$Default` or none. */
export interface SimLaunchTemplateRef {
  id: string;
  version?: string;
}

/** What an instance was launched from: a launch configuration by name, or a launch template version. */
export type SimLaunchSource = { launchConfigurationName: string } | { launchTemplate: SimLaunchTemplateRef };

/**
 * What a group launches from: a launch configuration, a launch template, or a launch template through
 * a mixed-instances policy (how kops writes spot groups), with the instance types it overrides.
 */
export type SimGroupLaunch =
  | SimLaunchSource
  | { mixedInstancesPolicy: { launchTemplate: SimLaunchTemplateRef; instanceTypes?: string[] } };

/** One member of an Auto Scaling group. */
export interface SimAsgMember {
  instanceId: string;
  zone: string;
  lifecycleState: string;
  healthStatus: 'Healthy' | 'Unhealthy';
  /** What it was launched from, as DescribeAutoScalingGroups lists it (a version number, not `$Latest`). */
  launchedFrom?: SimLaunchSource;
}

/** An Auto Scaling group as the simulator stores it. */
export interface SimAutoScalingGroup {
  name: string;
  minSize: number;
  maxSize: number;
  desiredCapacity: number;
  zones: string[];
  tags: Record<string, string>;
  members: SimAsgMember[];
  /** The group's warm pool, when it has one (what `DescribeWarmPool` returns). */
  warmPool?: SimWarmPool;
  /** What it launches new instances from. */
  launch?: SimGroupLaunch;
  createdTime: Date;
  /** Set while `DeleteAutoScalingGroup` runs: AWS lists the group with `Status` `Delete in progress`. */
  status?: string;
}

/** A warm pool: pre-initialised instances outside the group's InService members. */
export interface SimWarmPool {
  poolState: 'Stopped' | 'Running' | 'Hibernated';
  minSize: number;
  /** Members in `Warmed:*` lifecycle states. */
  instances: SimAsgMember[];
}

/** A group to seed; members given by id take their zone from the seeded instance. */
export interface SimAutoScalingGroupInput {
  name: string;
  minSize?: number;
  maxSize?: number;
  desiredCapacity?: number;
  zones?: string[];
  tags?: Record<string, string>;
  cluster?: string;
  instanceGroup?: string;
  /**
   * What the group launches from. A member that names nothing was launched from it: from the
   * version number `$Latest`/`$Default` stands for now, as AWS records it.
   */
  launch?: SimGroupLaunch;
  members?: (string | (Partial<SimAsgMember> & { instanceId: string }))[];
  /** A warm pool; its instances default to `Warmed:<poolState>`. */
  warmPool?: {
    poolState?: SimWarmPool['poolState'];
    minSize?: number;
    instances?: (string | (Partial<SimAsgMember> & { instanceId: string }))[];
  };
  /** `Delete in progress` for a group being deleted (absent otherwise, as AWS omits it). */
  status?: string;
}

/** The identity STS reports for a credential. */
export interface SimCallerIdentity {
  account: string;
  arn: string;
  userId: string;
}

/** A credential STS accepts and the identity behind it. */
export interface SimPrincipal {
  credentials: SigV4Credentials;
  identity: SimCallerIdentity;
  /** IAM actions (`ec2:DescribeLaunchTemplates`) its policy does not allow; every other one is allowed. */
  deniedActions: ReadonlySet<string>;
}

/** What an IAM principal may do: everything but the actions listed. */
export interface SimPermissions {
  /** IAM actions refused, as `<service>:<Action>` (`ec2:DescribeLaunchTemplates`). */
  deniedActions?: readonly string[];
}

/** The tags kops writes on the resources of a cluster and an instance group. */
export function kopsTags(
  cluster: string | undefined,
  instanceGroup: string | undefined,
): Record<string, string> {
  const tags: Record<string, string> = {};
  if (cluster !== undefined) {
    tags['KubernetesCluster'] = cluster;
    tags[`kubernetes.io/cluster/${cluster}`] = 'owned';
  }
  if (instanceGroup !== undefined) tags['kops.k8s.io/instancegroup'] = instanceGroup;
  return tags;
}

const instanceIdPattern = /^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$/;

/** Whether a string is a well-formed EC2 instance id (8 or 17 hex digits). */
export function isInstanceId(id: string): boolean {
  return instanceIdPattern.test(id);
}

/** Whether a string is a well-formed launch template id (`lt-` and 17 hex digits). */
export function isLaunchTemplateId(id: string): boolean {
  return /^lt-[0-9a-f]{17}$/.test(id);
}

/** The launch template a group launches from, wherever the group names it. */
function launchTemplateRefOf(launch: SimGroupLaunch | undefined): SimLaunchTemplateRef | undefined {
  if (!launch || 'launchConfigurationName' in launch) return undefined;
  return 'launchTemplate' in launch ? launch.launchTemplate : launch.mixedInstancesPolicy.launchTemplate;
}

function lifecycleStateOf(state: Ec2StateName | undefined): string {
  switch (state) {
    case 'pending':
      return 'Pending';
    case 'shutting-down':
    case 'stopping':
      return 'Terminating';
    case 'terminated':
    case 'stopped':
      return 'Terminated';
    default:
      return 'InService';
  }
}

function randomKey(prefix: string, length: number): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  const bytes = randomBytes(length);
  return prefix + Array.from(bytes, (b) => alphabet[b % alphabet.length]).join('');
}

/** The simulated account. */
export class AwsWorld {
  readonly account: string;
  readonly region: string;
  readonly #instances = new Map<string, SimInstance>();
  readonly #groups = new Map<string, SimAutoScalingGroup>();
  readonly #launchTemplates = new Map<string, SimLaunchTemplate>();
  readonly #principals = new Map<string, SimPrincipal>();
  /** Instances EC2's API does not list yet, with the DescribeInstances calls naming them still to miss. */
  readonly #propagating = new Map<string, number>();
  #nextAddress = 1;

  constructor(account: string, region: string) {
    this.account = account;
    this.region = region;
  }

  /** Adds or replaces instances. */
  addInstances(inputs: readonly SimInstanceInput[]): SimInstance[] {
    return inputs.map((input) => {
      if (!isInstanceId(input.id)) {
        throw new Error(`simulator: "${input.id}" is not an EC2 instance id (i- and 8 or 17 hex digits)`);
      }
      const n = this.#nextAddress++;
      const privateIp = input.privateIp ?? `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
      const domain = this.region === 'us-east-1' ? 'ec2.internal' : `${this.region}.compute.internal`;
      const instance: SimInstance = {
        id: input.id,
        zone: input.zone,
        state: input.state ?? 'running',
        tags: { ...kopsTags(input.cluster, input.instanceGroup), ...input.tags },
        instanceType: input.instanceType ?? 't3.medium',
        privateIp,
        privateDnsName: input.privateDnsName ?? `ip-${privateIp.replaceAll('.', '-')}.${domain}`,
        // EC2's LaunchTime: when the instance was launched — or last started (see `startInstance`).
        // Re-adding an instance to change its record keeps its launch time.
        launchTime: input.launchTime ?? this.#instances.get(input.id)?.launchTime ?? new Date(),
        ...(input.publicIp === undefined ? {} : { publicIp: input.publicIp }),
        ...(input.publicDnsName === undefined ? {} : { publicDnsName: input.publicDnsName }),
        ...(input.ipv6 === undefined ? {} : { ipv6: input.ipv6 }),
        ...(input.ipv6Prefixes === undefined ? {} : { ipv6Prefixes: [...input.ipv6Prefixes] }),
        ...(input.secondaryNetworkInterfaces === undefined
          ? {}
          : { secondaryNetworkInterfaces: input.secondaryNetworkInterfaces.map((n) => ({ ...n })) }),
        ...(input.lifecycle === undefined ? {} : { lifecycle: input.lifecycle }),
      };
      this.#instances.set(instance.id, instance);
      return instance;
    });
  }

  /** Changes an instance's state (e.g. to `terminated`). */
  setInstanceState(id: string, state: Ec2StateName): void {
    const instance = this.#instances.get(id);
    if (!instance) throw new Error(`simulator: no instance ${id}`);
    instance.state = state;
  }

  /**
   * Starts a stopped instance: it runs again under its id, and EC2 reports the start as its new
   * LaunchTime (`at`, default now), as it does after every stop and start.
   */
  startInstance(id: string, at: Date = new Date()): void {
    const instance = this.#instances.get(id);
    if (!instance) throw new Error(`simulator: no instance ${id}`);
    instance.state = 'running';
    instance.launchTime = at;
  }

  /** Removes an instance entirely (as EC2 does about an hour after termination). */
  removeInstance(id: string): void {
    this.#instances.delete(id);
  }

  /**
   * Makes an instance unknown to the next `calls` DescribeInstances calls that name it, as EC2's API
   * is just after RunInstances: eventually consistent, an instance it has launched may be answered
   * `InvalidInstanceID.NotFound` for a while ("Eventual consistency in the Amazon EC2 API").
   */
  propagate(id: string, calls: number): void {
    if (!this.#instances.has(id)) throw new Error(`simulator: no instance ${id}`);
    this.#propagating.set(id, calls);
  }

  /**
   * Whether a DescribeInstances call naming `id` finds it: the instance exists and has propagated. A
   * call that misses a propagating instance uses up one of its misses.
   */
  listsInstance(id: string): boolean {
    const misses = this.#propagating.get(id);
    if (misses !== undefined) {
      if (misses <= 1) this.#propagating.delete(id);
      else this.#propagating.set(id, misses - 1);
      return false;
    }
    return this.#instances.has(id);
  }

  /** The instance with this id, if any. */
  instance(id: string): SimInstance | undefined {
    return this.#instances.get(id);
  }

  /** Every instance, in insertion order. */
  instances(): SimInstance[] {
    return [...this.#instances.values()];
  }

  /**
   * Adds or replaces a launch template (a new version is the same template with a higher
   * `latestVersion`, and `defaultVersion` when it is made the default).
   */
  addLaunchTemplate(input: SimLaunchTemplateInput): SimLaunchTemplate {
    if (!isLaunchTemplateId(input.id)) {
      throw new Error(`simulator: "${input.id}" is not a launch template id (lt- and 17 hex digits)`);
    }
    const latestVersion = input.latestVersion ?? 1;
    const defaultVersion = input.defaultVersion ?? 1;
    if (!Number.isInteger(latestVersion) || defaultVersion < 1 || defaultVersion > latestVersion) {
      throw new Error(`simulator: launch template ${input.id} has versions 1 to ${latestVersion}`);
    }
    const template: SimLaunchTemplate = {
      id: input.id,
      name: input.name ?? input.id,
      latestVersion,
      defaultVersion,
      createTime: new Date('2026-01-01T00:00:00Z'),
      tags: { ...input.tags },
    };
    this.#launchTemplates.set(template.id, template);
    return template;
  }

  /** One launch template by id. */
  launchTemplate(id: string): SimLaunchTemplate | undefined {
    return this.#launchTemplates.get(id);
  }

  /** Every launch template, in insertion order. */
  launchTemplates(): SimLaunchTemplate[] {
    return [...this.#launchTemplates.values()];
  }

  /**
   * What an instance launched by a group now is launched from: its launch configuration, or the
   * version number its launch template reference stands for. AWS refuses a group whose template does
   * not exist, and so does the simulator.
   */
  #launchedNow(launch: SimGroupLaunch | undefined, group: string): SimLaunchSource | undefined {
    if (!launch) return undefined;
    if ('launchConfigurationName' in launch) return launch;
    const ref = launchTemplateRefOf(launch) as SimLaunchTemplateRef;
    const template = this.#launchTemplates.get(ref.id);
    if (!template)
      throw new Error(`simulator: group ${group} names launch template ${ref.id}, which does not exist`);
    let version = ref.version ?? '$Default';
    if (version === '$Latest') version = String(template.latestVersion);
    else if (version === '$Default') version = String(template.defaultVersion);
    return { launchTemplate: { id: ref.id, version } };
  }

  /** Adds or replaces an Auto Scaling group. */
  addAutoScalingGroup(input: SimAutoScalingGroupInput): SimAutoScalingGroup {
    const launchedNow = this.#launchedNow(input.launch, input.name);
    const memberOf =
      (defaultLifecycle?: string) =>
      (m: string | (Partial<SimAsgMember> & { instanceId: string })): SimAsgMember => {
        const member = typeof m === 'string' ? { instanceId: m } : m;
        const instance = this.#instances.get(member.instanceId);
        const launchedFrom = member.launchedFrom ?? launchedNow;
        return {
          instanceId: member.instanceId,
          zone: member.zone ?? instance?.zone ?? input.zones?.[0] ?? `${this.region}a`,
          lifecycleState: member.lifecycleState ?? defaultLifecycle ?? lifecycleStateOf(instance?.state),
          healthStatus: member.healthStatus ?? 'Healthy',
          ...(launchedFrom && { launchedFrom }),
        };
      };
    const members = (input.members ?? []).map(memberOf());
    const poolState = input.warmPool?.poolState ?? 'Stopped';
    const warmPool = input.warmPool && {
      poolState,
      minSize: input.warmPool.minSize ?? 0,
      instances: (input.warmPool.instances ?? []).map(memberOf(`Warmed:${poolState}`)),
    };
    const group: SimAutoScalingGroup = {
      name: input.name,
      minSize: input.minSize ?? members.length,
      maxSize: input.maxSize ?? members.length,
      desiredCapacity: input.desiredCapacity ?? members.length,
      zones: input.zones ?? [...new Set(members.map((m) => m.zone))],
      tags: { ...kopsTags(input.cluster, input.instanceGroup), ...input.tags },
      members,
      ...(warmPool && { warmPool }),
      ...(input.launch && { launch: input.launch }),
      createdTime: new Date('2026-01-01T00:00:00Z'),
      ...(input.status !== undefined && { status: input.status }),
    };
    this.#groups.set(group.name, group);
    return group;
  }

  /** One Auto Scaling group by name. */
  autoScalingGroup(name: string): SimAutoScalingGroup | undefined {
    return this.#groups.get(name);
  }

  /** Every Auto Scaling group, sorted by name as AWS lists them. */
  autoScalingGroups(): SimAutoScalingGroup[] {
    return [...this.#groups.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Registers a long-term IAM user's access key, allowed every action but those denied; returns its credentials. */
  addUser(userName: string, permissions: SimPermissions = {}): SigV4Credentials {
    const credentials = {
      accessKeyId: randomKey('AKIA', 16),
      secretAccessKey: randomBytes(30).toString('base64'),
    };
    this.#principals.set(credentials.accessKeyId, {
      credentials,
      identity: {
        account: this.account,
        arn: `arn:aws:iam::${this.account}:user/${userName}`,
        userId: randomKey('AIDA', 17),
      },
      deniedActions: new Set(permissions.deniedActions),
    });
    return credentials;
  }

  /**
   * Issues the temporary credentials an instance profile gives an instance: the role's session is
   * named after the instance id, as EC2 does, so STS reports `assumed-role/<role>/<instance-id>`.
   */
  addInstanceProfileSession(roleName: string, instanceId: string): SigV4Credentials {
    const credentials = {
      accessKeyId: randomKey('ASIA', 16),
      secretAccessKey: randomBytes(30).toString('base64'),
      sessionToken: randomBytes(48).toString('base64'),
    };
    this.#principals.set(credentials.accessKeyId, {
      credentials,
      identity: {
        account: this.account,
        arn: `arn:aws:sts::${this.account}:assumed-role/${roleName}/${instanceId}`,
        userId: `${randomKey('AROA', 17)}:${instanceId}`,
      },
      deniedActions: new Set(),
    });
    return credentials;
  }

  /** Revokes a credential. */
  removeCredentials(accessKeyId: string): void {
    this.#principals.delete(accessKeyId);
  }

  /** The principal behind an access key, if STS knows it. */
  principal(accessKeyId: string): SimPrincipal | undefined {
    return this.#principals.get(accessKeyId);
  }
}
