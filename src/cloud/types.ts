/**
 * What the controller needs from a cloud, as interfaces each provider (aws/, gce/, metal/) implements.
 * The rule behind all of them: identity comes from the cloud's own records, never from what a node or
 * a request claims about itself.
 */

/** Lifecycle state of an instance, normalised across clouds. */
export type InstanceState = 'pending' | 'running' | 'stopping' | 'stopped' | 'terminated' | 'unknown';

/** An address of an instance, as the cloud reports it (usable as a certificate SAN). */
export interface InstanceAddress {
  type: 'InternalIP' | 'ExternalIP' | 'InternalDNS' | 'ExternalDNS' | 'Hostname';
  address: string;
}

/** The verified facts about one node's instance. */
export interface NodeIdentity {
  /** The providerID the identity was resolved from, e.g. `aws:///us-east-1a/i-0123`. */
  providerID: string;
  /** The cloud's id of the instance (`i-0123…`, a GCE instance name, a metal host name). */
  instanceId: string;
  /** The kops instance group the cloud says the instance belongs to. */
  instanceGroup: string;
  state: InstanceState;
  addresses: InstanceAddress[];
  /** Zone or location of the instance, when the cloud has one. */
  zone?: string;
  /** Labels the cloud itself implies (e.g. `node-role.kubernetes.io/spot-worker` for spot instances). */
  cloudLabels?: Record<string, string>;
  /**
   * The instance carries kops' node-template label `node-role.kubernetes.io/api-server` (AWS tags,
   * OpenStack metadata): the kops CLI that launched it had the APIServerNodes feature on, which
   * kops-controller's own environment never has. It counts for control-plane groups only.
   */
  apiServerTagged?: boolean;
  /**
   * This incarnation of the instance. A node name can outlive its machine (GCE recreates an instance
   * under its name, an IP-based name follows its address, a server is re-created under its name), so
   * node certificates carry `id` (src/pki/incarnation.ts) and a renewal is bound to the machine the
   * presented certificate was issued to, not to whichever machine bears the name now.
   */
  incarnation?: Incarnation;
}

/**
 * One machine's life under its name: `id` is one the cloud never gives another machine (an AWS
 * instance id, a GCE instance's numeric id, an Azure vmId, a server's UUID or never-reused numeric
 * id); `createdAt`, where the cloud's record says it, when this machine came to be: a certificate
 * issued before then was issued to an earlier machine.
 */
export interface Incarnation {
  id: string;
  createdAt?: Date;
}

/** Why one providerID could not be identified; a typed error from src/errors.ts. */
export type IdentifyResult = { ok: true; identity: NodeIdentity } | { ok: false; error: Error };

/** How fresh the answers of one `identify` call must be. */
export interface IdentifyOptions {
  /**
   * Every cloud fact an answer rests on (an instance's state, its group membership) was read less
   * than this long ago; older cached facts are read again. Default: the identifier's cache lifetime.
   * Trust decisions (the CSR approver) ask for a short bound; labelling takes the cache as it is.
   */
  maxAgeMs?: number;
}

/**
 * Resolves nodes to their instance groups through the cloud API. Implementations batch: one call to
 * `identify` with many providerIDs makes as few cloud calls as the API allows, and concurrent calls
 * arriving within a short window are coalesced.
 */
export interface NodeIdentifier {
  identify(providerIDs: readonly string[], options?: IdentifyOptions): Promise<Map<string, IdentifyResult>>;
}

/** A cloud-side group of instances backing one instance group (an ASG, a MIG, a metal pool). */
export interface CloudGroup {
  /** The kops instance group name. */
  instanceGroup: string;
  /** The cloud's name for the group (ASG name, MIG name). */
  cloudName: string;
  minSize: number;
  maxSize: number;
  targetSize: number;
  /**
   * What the group launches new instances from, in a form members can be compared with: an AWS launch
   * template as `<id>:<version number>` (`$Latest`/`$Default` resolved) or a launch configuration's
   * name, a GCE instance template's URL. Undefined when the cloud would not say (then no member can be
   * judged out of date).
   */
  template?: string;
  members: CloudGroupMember[];
}

/** One instance of a cloud group. */
export interface CloudGroupMember {
  instanceId: string;
  /** The providerID a Node of this instance carries. */
  providerID: string;
  state: InstanceState;
  /** False when the cloud marks the member unhealthy or it is being replaced. */
  healthy: boolean;
  /**
   * In the group's warm pool (AWS): pre-initialised, counted towards the target size, but not
   * expected to have a Node, as kops' `WarmPool` member state.
   */
  warmPool?: boolean;
  /**
   * What the member was launched from, in the form of {@link CloudGroup.template}; undefined when the
   * cloud names nothing (kops then counts the member as needing an update).
   */
  template?: string;
}

/** Lists the cloud groups of a cluster (for `validate` and the metrics). */
export interface CloudGroups {
  list(clusterName: string): Promise<CloudGroup[]>;
}
