/**
 * GCE node identity. The instance group of a node is never read from the instance itself — its live
 * metadata can be edited by anyone with access to the instance. Instead the chain kops follows is
 * walked through the compute API, in batches:
 *   providerID (our project) → instance (must be RUNNING) → `created-by` names a zonal MIG →
 *   the MIG lists the instance's id among its members → that member's instance template (immutable)
 *   → template metadata `kops-k8s-io-instance-group-name` (and `cluster-name` = our cluster).
 * A batch costs one instance read per zone, one MIG get + member listing per MIG and one read per
 * template never seen before; verified instance ids are cached (bounded), so steady-state reconciles
 * cost only the instance reads. The instance itself, hence its status, is read on every call; a
 * caller deciding trust also bounds the age of the cached MIG membership with `maxAgeMs`.
 */
import { ForbiddenError, NotFoundError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import type { Outcome } from '../batcher.ts';
import { mapConcurrent } from '../concurrency.ts';
import { IdentifyBatches } from '../identify-batches.ts';
import { instanceGroupNameProblem } from '../instance-group-name.ts';
import { LruCache } from '../lru.ts';
import type {
  IdentifyOptions,
  Incarnation,
  InstanceAddress,
  InstanceState,
  NodeIdentifier,
  NodeIdentity,
} from '../types.ts';
import {
  type ComputeClient,
  type GceInstance,
  type GceManagedInstance,
  type GceNetworkInterface,
  lastComponent,
  metadataValue,
} from './compute.ts';
import { incarnationOf } from './incarnation.ts';
import {
  type GceInstanceRef,
  type MigRef,
  parseCreatedBy,
  parseGceProviderID,
  parseTemplateUrl,
  parseZonalUrl,
} from './resource-names.ts';
import { instanceGroupMetadataKey, TemplateGroups } from './template-groups.ts';

/** Options of {@link GceNodeIdentifier}. */
export interface GceNodeIdentifierOptions {
  compute: ComputeClient;
  /** Our kops cluster; templates of other clusters do not identify our nodes. */
  clusterName: string;
  logger?: Logger;
  /** Zones asked about this many instances or fewer are read with instances.get (default 2). */
  getThreshold?: number;
  /** Up to this many names are fetched with a name filter; more list the zone(s) whole (default 50). */
  filterMaxNames?: number;
  /** Verified instance ids remembered (default 20,000). */
  cacheSize?: number;
  /** How long a verified instance id is trusted without re-checking its MIG (default 1 hour). */
  cacheTtlMs?: number;
  /** Calls to `identify` within this window share one batch (default 10 ms). */
  coalesceWindowMs?: number;
  /** Parallel compute calls at most (default 16). */
  concurrency?: number;
  /** The clock of the verified-id cache's ages (default monotonic, see src/cloud/age.ts). */
  now?: () => number;
}

/**
 * The ranges GCE routes to an instance, as it reports them: IPAM takes a node's pod range from here
 * (the external IPv6 range, as kops' gceipam.go).
 */
export interface GceRoutedRanges {
  /**
   * Every interface's `ipv6AccessConfigs[]` as `<externalIpv6>/<externalIpv6PrefixLength>`, e.g.
   * `2600:1900:4000:1::/96`, in the order GCE lists them (kops reads all interfaces too).
   */
  externalIpv6Ranges: string[];
}

/**
 * A verified identity with the ranges routed to the instance. Its `incarnation.id` is the numeric
 * `id` of the incarnation read by this call (`instance_id` in its identity tokens): `instanceId` is the
 * name, which a MIG reuses when it recreates an instance; the id never is, so a proof naming an id is
 * checked against this one.
 */
export type GceNodeIdentity = NodeIdentity & {
  routedRanges: GceRoutedRanges;
};

/** One providerID's answer: its identity, or the typed error saying why it has none. */
export type GceIdentifyResult = { ok: true; identity: GceNodeIdentity } | { ok: false; error: Error };

/** The ranges routed to an instance's network interfaces, in the order GCE lists them. */
export function routedRangesOf(nics: readonly GceNetworkInterface[] | undefined): GceRoutedRanges {
  return {
    externalIpv6Ranges: (nics ?? []).flatMap((nic) =>
      (nic.ipv6AccessConfigs ?? []).flatMap((c) =>
        c.externalIpv6 ? [`${c.externalIpv6}/${c.externalIpv6PrefixLength ?? 96}`] : [],
      ),
    ),
  };
}

interface VerifiedGroup {
  instanceGroup: string;
  createdBy: string;
}

type TemplateVerdict = { ok: true; instanceGroup: string } | { ok: false; error: Error };

/** An instance whose own read checked out, waiting for the MIG its `created-by` names to confirm it. */
interface PendingMember {
  id: string;
  ref: GceInstanceRef;
  instance: GceInstance;
  incarnation: Incarnation;
  mig: MigRef;
}

/** The key of a MIG among the ones a batch lists. */
const migKey = (mig: MigRef) => `${mig.zone}/${mig.name}`;

const stateByStatus: Record<string, InstanceState> = {
  PROVISIONING: 'pending',
  STAGING: 'pending',
  RUNNING: 'running',
  REPAIRING: 'running',
  STOPPING: 'stopping',
  SUSPENDING: 'stopping',
  STOPPED: 'stopped',
  SUSPENDED: 'stopped',
  TERMINATED: 'stopped',
};

/** Resolves `gce://` providerIDs to kops instance groups through the compute API. */
export class GceNodeIdentifier implements NodeIdentifier {
  readonly #compute: ComputeClient;
  readonly #clusterName: string;
  readonly #logger: Logger;
  readonly #getThreshold: number;
  readonly #filterMaxNames: number;
  readonly #concurrency: number;
  readonly #verified: LruCache<string, VerifiedGroup>;
  readonly #templates: TemplateGroups;
  readonly #batches: IdentifyBatches<GceNodeIdentity>;

  constructor(options: GceNodeIdentifierOptions) {
    this.#compute = options.compute;
    this.#clusterName = options.clusterName;
    this.#logger = options.logger ?? silentLogger;
    this.#getThreshold = options.getThreshold ?? 2;
    this.#filterMaxNames = options.filterMaxNames ?? 50;
    this.#concurrency = options.concurrency ?? 16;
    this.#verified = new LruCache({
      maxEntries: options.cacheSize ?? 20_000,
      ttlMs: options.cacheTtlMs ?? 3_600_000,
      now: options.now,
    });
    this.#templates = new TemplateGroups(this.#compute, {
      concurrency: this.#concurrency,
      logger: this.#logger,
    });
    this.#batches = new IdentifyBatches({
      windowMs: options.coalesceWindowMs,
      maxConcurrent: 2,
      fetch: (ids, maxAges) => this.#identifyBatch(ids, maxAges),
    });
  }

  /**
   * Identifies nodes by providerID; one result per distinct providerID asked. A MIG membership
   * verified longer than `options.maxAgeMs` ago is verified again.
   */
  identify(
    providerIDs: readonly string[],
    options?: IdentifyOptions,
  ): Promise<Map<string, GceIdentifyResult>> {
    return this.#batches.identify(providerIDs, options);
  }

  async #identifyBatch(
    providerIDs: string[],
    maxAgeMs: ReadonlyMap<string, number>,
  ): Promise<Map<string, Outcome<GceNodeIdentity>>> {
    const results = new Map<string, Outcome<GceNodeIdentity>>();
    const fail = (id: string, error: Error) => results.set(id, { ok: false, error });
    const refs = this.#parseOwnRefs(providerIDs, fail);

    const instances = await this.#fetchInstances([...refs.values()]);
    const pending: PendingMember[] = [];
    for (const [id, ref] of refs) {
      const found = instances.get(`${ref.zone}/${ref.name}`);
      const checked = this.#checkInstance(id, ref, found, maxAgeMs.get(id));
      if (checked instanceof Error) fail(id, checked);
      else if ('mig' in checked) pending.push(checked);
      else results.set(id, { ok: true, value: checked });
    }

    const members = await this.#listMigMembers(pending);
    const templateOf = new Map<string, string>();
    for (const p of pending) {
      const template = this.#checkMembership(p, members.get(migKey(p.mig)));
      if (template instanceof Error) fail(p.id, template);
      else templateOf.set(p.id, template);
    }

    const verdicts = await this.#templateVerdicts([...new Set(templateOf.values())]);
    for (const p of pending) {
      const templateName = templateOf.get(p.id);
      if (templateName === undefined) continue;
      const verdict = verdicts.get(templateName) as TemplateVerdict;
      if (!verdict.ok) {
        fail(p.id, verdict.error);
        continue;
      }
      this.#verified.set(p.instance.id, {
        instanceGroup: verdict.instanceGroup,
        createdBy: metadataValue(p.instance.metadata, 'created-by') ?? '',
      });
      results.set(p.id, {
        ok: true,
        value: this.#identity(p.id, p.ref, p.instance, p.incarnation, verdict.instanceGroup),
      });
    }
    this.#logger.debug({ nodes: providerIDs.length, migs: members.size }, 'identified GCE nodes');
    return results;
  }

  /** The instance refs of the providerIDs that parse and name our project; the others fail. */
  #parseOwnRefs(
    providerIDs: string[],
    fail: (id: string, error: Error) => void,
  ): Map<string, GceInstanceRef> {
    const refs = new Map<string, GceInstanceRef>();
    for (const id of providerIDs) {
      try {
        const ref = parseGceProviderID(id);
        if (ref.project !== this.#compute.project) {
          // `foreign-cluster`, as the other clouds say it: a final refusal that no Cluster API
          // Machine may override with a group (capi/node-identifier.ts).
          fail(
            id,
            new ForbiddenError(
              `providerID "${id}" names project "${ref.project}", not this cluster's project "${this.#compute.project}"`,
              { details: { instanceId: ref.name, reason: 'foreign-cluster' } },
            ),
          );
        } else {
          refs.set(id, ref);
        }
      } catch (err) {
        fail(id, err as Error);
      }
    }
    return refs;
  }

  /**
   * Checks what the instance read says: it must be RUNNING and `created-by` a zonal MIG of its own
   * zone. A membership verified recently enough for the same `created-by` yields the identity at
   * once; otherwise the MIG still has to confirm the instance. An error says why it is not trusted.
   */
  #checkInstance(
    id: string,
    ref: GceInstanceRef,
    found: GceInstance | Error | undefined,
    maxAgeMs: number | undefined,
  ): GceNodeIdentity | PendingMember | Error {
    if (!found || found instanceof Error) {
      return (
        found ??
        new NotFoundError(`instance ${ref.name} not found in project ${ref.project} zone ${ref.zone}`)
      );
    }
    if (found.status !== 'RUNNING') {
      return new ForbiddenError(
        `instance ${ref.name} is ${found.status}, not RUNNING; a stopped instance gets no identity`,
        { details: { instanceId: ref.name, reason: 'not-running' } },
      );
    }
    const incarnation = incarnationOf(found);
    if (incarnation instanceof Error) return incarnation;
    const createdBy = metadataValue(found.metadata, 'created-by') ?? '';
    const cached = this.#verified.get(found.id, maxAgeMs);
    if (cached && cached.createdBy === createdBy)
      return this.#identity(id, ref, found, incarnation, cached.instanceGroup);
    const mig = parseCreatedBy(createdBy);
    if (!mig && createdBy) {
      return new ForbiddenError(
        `instance ${ref.name}: created-by "${createdBy}" is not a zonal managed instance group; kops nodes are created by zonal MIGs`,
      );
    }
    if (!mig) {
      return new ForbiddenError(
        `instance ${ref.name} has no created-by metadata: it was not created by a managed instance group`,
      );
    }
    if (mig.zone !== ref.zone) {
      return new ForbiddenError(
        `instance ${ref.name} in zone ${ref.zone} claims MIG ${mig.name} of zone ${mig.zone}`,
      );
    }
    return { id, ref, instance: found, incarnation, mig };
  }

  /** The members of each MIG the pending instances claim, by {@link migKey}, or why they are unknown. */
  async #listMigMembers(
    pending: PendingMember[],
  ): Promise<Map<string, Map<string, GceManagedInstance> | Error>> {
    const migKeys = [...new Set(pending.map((p) => migKey(p.mig)))];
    const members = new Map<string, Map<string, GceManagedInstance> | Error>();
    await mapConcurrent(migKeys, this.#concurrency, async (key) => {
      const [zone, name] = key.split('/') as [string, string];
      members.set(key, await this.#migMembers(zone, name).catch((err: Error) => err));
    });
    return members;
  }

  /**
   * The name of the template the MIG runs the instance from, once the MIG lists it under its id and
   * name and that template is a global one of our project; otherwise why the instance is not trusted.
   */
  #checkMembership(
    p: PendingMember,
    listed: Map<string, GceManagedInstance> | Error | undefined,
  ): string | Error {
    if (listed instanceof Error) return listed;
    const member = listed?.get(p.instance.id);
    const listedAs = member ? parseZonalUrl(member.instance) : undefined;
    if (
      !listedAs ||
      listedAs.name !== p.ref.name ||
      listedAs.zone !== p.ref.zone ||
      listedAs.project !== this.#compute.project
    ) {
      return new ForbiddenError(
        `instance ${p.ref.name} (id ${p.instance.id}) is not managed by MIG ${p.mig.name}, which its created-by metadata claims`,
      );
    }
    const template = member?.version?.instanceTemplate;
    const templateRef = template ? parseTemplateUrl(template) : undefined;
    if (!templateRef || templateRef.project !== this.#compute.project) {
      return new ForbiddenError(
        `MIG ${p.mig.name} runs instance ${p.ref.name} from template "${template ?? ''}", not a global template of project ${this.#compute.project}`,
      );
    }
    return templateRef.name;
  }

  /**
   * Reads the asked instances with as few calls as the API allows: instances.get for zones asked
   * about only a few, otherwise one (paginated) list — per zone, or aggregated over zones — filtered
   * by name when the names fit in a filter.
   */
  async #fetchInstances(refs: GceInstanceRef[]): Promise<Map<string, GceInstance | Error>> {
    const out = new Map<string, GceInstance | Error>();
    const byZone = new Map<string, Set<string>>();
    for (const ref of refs) byZone.set(ref.zone, (byZone.get(ref.zone) ?? new Set()).add(ref.name));

    const singles: GceInstanceRef[] = [];
    const listed = new Map<string, Set<string>>();
    for (const [zone, names] of byZone) {
      if (names.size <= this.#getThreshold) {
        for (const name of names) singles.push({ project: this.#compute.project, zone, name });
      } else {
        listed.set(zone, names);
      }
    }

    await mapConcurrent(singles, this.#concurrency, async (ref) => {
      out.set(
        `${ref.zone}/${ref.name}`,
        await this.#compute.getInstance(ref.zone, ref.name).catch((err: Error) => err),
      );
    });

    if (listed.size > 0) {
      const names = [...listed.values()].flatMap((set) => [...set]);
      // Names were validated as RFC 1035 labels by the providerID parser, so they need no escaping.
      const filter =
        names.length <= this.#filterMaxNames ? names.map((n) => `(name = "${n}")`).join(' OR ') : undefined;
      const [onlyZone] = listed.keys();
      try {
        const found =
          listed.size === 1 && onlyZone
            ? await this.#compute.listInstances(onlyZone, filter)
            : await this.#compute.aggregatedListInstances(filter);
        for (const instance of found) {
          const zone = lastComponent(instance.zone);
          if (listed.get(zone)?.has(instance.name)) out.set(`${zone}/${instance.name}`, instance);
        }
      } catch (err) {
        for (const [zone, set] of listed) for (const name of set) out.set(`${zone}/${name}`, err as Error);
      }
    }
    return out;
  }

  /** A MIG's members by instance id, after checking the MIG is the one in our project and zone. */
  async #migMembers(zone: string, name: string): Promise<Map<string, GceManagedInstance>> {
    let mig: Awaited<ReturnType<ComputeClient['getInstanceGroupManager']>>;
    try {
      mig = await this.#compute.getInstanceGroupManager(zone, name);
    } catch (err) {
      if (err instanceof NotFoundError) {
        throw new ForbiddenError(
          `created-by names MIG ${name}, which does not exist in project ${this.#compute.project} zone ${zone}`,
          { cause: err },
        );
      }
      throw err;
    }
    const self = parseZonalUrl(mig.selfLink);
    if (!self || self.project !== this.#compute.project || self.zone !== zone || self.name !== name) {
      throw new ForbiddenError(
        `MIG ${name} reports self link ${mig.selfLink}, not project ${this.#compute.project} zone ${zone}`,
      );
    }
    const members = new Map<string, GceManagedInstance>();
    for (const member of await this.#compute.listManagedInstances(zone, name)) {
      if (member.id) members.set(member.id, member);
    }
    return members;
  }

  /** The group each template names, or why it identifies no node of our cluster. */
  async #templateVerdicts(names: string[]): Promise<Map<string, TemplateVerdict>> {
    const out = new Map<string, TemplateVerdict>();
    for (const [name, facts] of await this.#templates.facts(names)) {
      if (facts instanceof Error) {
        out.set(name, { ok: false, error: facts });
      } else if (!facts.instanceGroup) {
        const reason = `instance template ${name} has no ${instanceGroupMetadataKey} metadata, so it names no kops instance group`;
        out.set(name, { ok: false, error: new ForbiddenError(reason) });
      } else if (facts.clusterName !== this.#clusterName) {
        // A kops template (it names a group) of another cluster, or of none: the instance is not
        // ours, finally — `foreign-cluster`, so no Cluster API Machine overrides the refusal.
        const reason = `instance template ${name} belongs to cluster "${facts.clusterName ?? ''}", not "${this.#clusterName}"`;
        out.set(name, {
          ok: false,
          error: new ForbiddenError(reason, { details: { reason: 'foreign-cluster' } }),
        });
      } else if (instanceGroupNameProblem(facts.instanceGroup)) {
        const reason = `instance template ${name}: its ${instanceGroupMetadataKey} metadata ${instanceGroupNameProblem(facts.instanceGroup)}`;
        out.set(name, {
          ok: false,
          error: new ForbiddenError(reason, { details: { reason: 'invalid-instance-group' } }),
        });
      } else {
        out.set(name, { ok: true, instanceGroup: facts.instanceGroup });
      }
    }
    return out;
  }

  /**
   * The identity of a verified instance. Its internal addresses, IPv6 included (kops puts the first
   * interface's `networkIP` and `ipv6Address` in the node's certificates), become InternalIP; NAT
   * and external IPv6 addresses ExternalIP.
   */
  #identity(
    providerID: string,
    ref: GceInstanceRef,
    instance: GceInstance,
    incarnation: Incarnation,
    instanceGroup: string,
  ): GceNodeIdentity {
    const addresses: InstanceAddress[] = [];
    for (const nic of instance.networkInterfaces ?? []) {
      if (nic.networkIP) addresses.push({ type: 'InternalIP', address: nic.networkIP });
      if (nic.ipv6Address) addresses.push({ type: 'InternalIP', address: nic.ipv6Address });
      for (const access of nic.accessConfigs ?? []) {
        if (access.natIP) addresses.push({ type: 'ExternalIP', address: access.natIP });
      }
      for (const access of nic.ipv6AccessConfigs ?? []) {
        if (access.externalIpv6) addresses.push({ type: 'ExternalIP', address: access.externalIpv6 });
      }
    }
    addresses.push({ type: 'Hostname', address: instance.name });
    return {
      providerID,
      instanceId: instance.name,
      instanceGroup,
      state: stateByStatus[instance.status] ?? 'unknown',
      addresses,
      zone: ref.zone,
      incarnation,
      routedRanges: routedRangesOf(instance.networkInterfaces),
    };
  }
}
