/**
 * What the simulated AWS account holds: EC2 instances, Auto Scaling groups and the credentials STS
 * knows. Tests and `kops-controller dev` seed it; the service handlers read it.
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

/** One member of an Auto Scaling group. */
export interface SimAsgMember {
  instanceId: string;
  zone: string;
  lifecycleState: string;
  healthStatus: 'Healthy' | 'Unhealthy';
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
  createdTime: Date;
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
  members?: (string | (Partial<SimAsgMember> & { instanceId: string }))[];
  /** A warm pool; its instances default to `Warmed:<poolState>`. */
  warmPool?: {
    poolState?: SimWarmPool['poolState'];
    minSize?: number;
    instances?: (string | (Partial<SimAsgMember> & { instanceId: string }))[];
  };
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
  readonly #principals = new Map<string, SimPrincipal>();
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
        launchTime: input.launchTime ?? new Date('2026-01-01T00:00:00Z'),
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

  /** Removes an instance entirely (as EC2 does about an hour after termination). */
  removeInstance(id: string): void {
    this.#instances.delete(id);
  }

  /** The instance with this id, if any. */
  instance(id: string): SimInstance | undefined {
    return this.#instances.get(id);
  }

  /** Every instance, in insertion order. */
  instances(): SimInstance[] {
    return [...this.#instances.values()];
  }

  /** Adds or replaces an Auto Scaling group. */
  addAutoScalingGroup(input: SimAutoScalingGroupInput): SimAutoScalingGroup {
    const memberOf =
      (defaultLifecycle?: string) =>
      (m: string | (Partial<SimAsgMember> & { instanceId: string })): SimAsgMember => {
        const member = typeof m === 'string' ? { instanceId: m } : m;
        const instance = this.#instances.get(member.instanceId);
        return {
          instanceId: member.instanceId,
          zone: member.zone ?? instance?.zone ?? input.zones?.[0] ?? `${this.region}a`,
          lifecycleState: member.lifecycleState ?? defaultLifecycle ?? lifecycleStateOf(instance?.state),
          healthStatus: member.healthStatus ?? 'Healthy',
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
      createdTime: new Date('2026-01-01T00:00:00Z'),
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

  /** Registers a long-term IAM user's access key; returns its credentials. */
  addUser(userName: string): SigV4Credentials {
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
