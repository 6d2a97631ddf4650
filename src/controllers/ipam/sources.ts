/**
 * Where each cloud's pod ranges are read. AWS and GCE read them through the node identifiers, so a
 * range comes only from an instance the cloud vouches for as this cluster's (a node cannot obtain
 * another cluster's range by naming its instance in its providerID), and lookups share the
 * identifiers' batching and cache with the NodeController: a cluster-wide resync costs a handful of
 * DescribeInstances or instance-list calls. Metal reads the `Host` records of `kops-system` from a
 * watch, as kops' metalipam.go reads them (one record per node name).
 */
import type { KubeConfig, KubernetesObject } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import type { AwsNodeIdentifier } from '../../cloud/aws/identify.ts';
import type { Outcome } from '../../cloud/batcher.ts';
import type { GceNodeIdentifier } from '../../cloud/gce/node-identifier.ts';
import {
  type HostObject,
  hostGroup,
  hostNamespace,
  hostPlural,
  hostVersion,
} from '../../cloud/metal/hosts.ts';
import type { NodeIdentity } from '../../cloud/types.ts';
import { InvalidInputError, UnavailableError } from '../../errors.ts';
import { isStringList } from '../../json-object.ts';
import { Informer, kubeList, kubeWatch } from '../../kube/informer.ts';
import type { Logger } from '../../log.ts';
import { awsPodRanges, type CloudPodRanges, gcePodRanges, hostPodRanges } from './pod-ranges.ts';

/** What the cloud says about one node: its pod ranges, and the instance they were read from. */
export interface CloudAnswer {
  ranges: CloudPodRanges;
  /** The verified instance (AWS, GCE), so that the node can be checked to be that instance's. */
  identity?: NodeIdentity;
}

/** A cloud's record of nodes' pod ranges. */
export interface PodCidrSource {
  /** Nodes are looked up by name (metal Hosts) rather than by providerID. */
  readonly byNodeName: boolean;
  /**
   * The pod ranges of each key (a providerID, or a node name when {@link byNodeName}); never rejects.
   * A failed outcome carries the typed error: a refusal (`forbidden`, `invalid`, `not-found`) when the
   * cloud does not vouch for the node, any other kind when the cloud could not be asked.
   */
  lookup(keys: readonly string[], signal?: AbortSignal): Promise<Map<string, Outcome<CloudAnswer>>>;
  /** Starts what the source watches; the controller calls it when it starts leading. */
  start?(): void;
  /** Stops it again when leadership ends. */
  stop?(): Promise<void>;
}

/** AWS: the IPv6 prefix of the instance's ENI, from the (cached, batched) DescribeInstances record. */
export class AwsPodCidrSource implements PodCidrSource {
  readonly byNodeName = false;
  readonly #identifier: Pick<AwsNodeIdentifier, 'identify'>;

  constructor(identifier: Pick<AwsNodeIdentifier, 'identify'>) {
    this.#identifier = identifier;
  }

  async lookup(providerIDs: readonly string[]): Promise<Map<string, Outcome<CloudAnswer>>> {
    const answers = new Map<string, Outcome<CloudAnswer>>();
    const answer = (results: Awaited<ReturnType<AwsNodeIdentifier['identify']>>) => {
      for (const [providerID, result] of results) {
        if (!result.ok) {
          answers.set(providerID, result);
          continue;
        }
        const { identity } = result;
        const ranges = awsPodRanges(identity.instanceId, identity.networkInterfaces);
        answers.set(providerID, { ok: true, value: { ranges, identity } });
      }
    };
    answer(await this.#identifier.identify(providerIDs));
    // A cached record may predate the prefix's delegation: an instance without one is read again.
    const without = providerIDs.filter((id) => {
      const found = answers.get(id);
      return found?.ok === true && found.value.ranges.kind === 'none';
    });
    if (without.length > 0) answer(await this.#identifier.identify(without, { maxAgeMs: 0 }));
    return answers;
  }
}

/** GCE: the alias and external IPv6 ranges of the instance's first interface, read with its identity. */
export class GcePodCidrSource implements PodCidrSource {
  readonly byNodeName = false;
  readonly #identifier: Pick<GceNodeIdentifier, 'identify'>;

  constructor(identifier: Pick<GceNodeIdentifier, 'identify'>) {
    this.#identifier = identifier;
  }

  async lookup(providerIDs: readonly string[]): Promise<Map<string, Outcome<CloudAnswer>>> {
    const answers = new Map<string, Outcome<CloudAnswer>>();
    for (const [providerID, result] of await this.#identifier.identify(providerIDs)) {
      if (!result.ok) {
        answers.set(providerID, result);
        continue;
      }
      const { identity } = result;
      const ranges = gcePodRanges(identity.instanceId, identity.routedRanges);
      answers.set(providerID, { ok: true, value: { ranges, identity } });
    }
    return answers;
  }
}

/** Where kops keeps its `Host` records (src/cloud/metal/hosts.ts). */
const hostsPath = `/apis/${hostGroup}/${hostVersion}/namespaces/${hostNamespace}/${hostPlural}`;

/** A `Host` as the watch delivers it: IPAM reads its `spec.podCIDRs`. */
type HostWire = KubernetesObject & Pick<HostObject, 'spec'>;

/** What the host watch keeps per Host: its name and pod ranges. */
interface HostRecord {
  name: string;
  podCIDRs: string[];
}

/**
 * A Host's record; a `spec.podCIDRs` that is not a list of strings (the CRD's schema forbids it, so a
 * broken answer) is refused, and the informer skips the Host (logged and counted): a node without a
 * Host gets no range, where the characters of a string or a number would have been read as ranges.
 */
function hostRecordOf(host: HostWire): HostRecord {
  const podCIDRs: unknown = host.spec?.podCIDRs ?? [];
  if (!isStringList(podCIDRs)) throw new InvalidInputError('spec.podCIDRs is not a list of strings');
  return { name: host.metadata?.name ?? '', podCIDRs };
}

/** Options of {@link HostPodCidrSource}. */
export interface HostPodCidrSourceOptions {
  kubeConfig: KubeConfig;
  /** How long a lookup waits for the first list of Hosts before it fails and is retried (default 10 s). */
  syncWaitMs?: number;
  registry?: Registry;
  logger?: Logger;
}

/** Metal: `spec.podCIDRs` of the `Host` named as the node, from a watch of `kops-system` Hosts. */
export class HostPodCidrSource implements PodCidrSource {
  readonly byNodeName = true;
  readonly #options: HostPodCidrSourceOptions;
  #informer: Informer<HostWire, HostRecord> | undefined;

  constructor(options: HostPodCidrSourceOptions) {
    this.#options = options;
  }

  start(): void {
    const { kubeConfig, registry, logger } = this.#options;
    this.#informer = new Informer<HostWire, HostRecord>({
      name: 'hosts',
      path: hostsPath,
      kind: 'Host',
      list: kubeList<HostWire>(kubeConfig, hostsPath),
      watch: kubeWatch(kubeConfig),
      transform: hostRecordOf,
      ...(registry ? { registry } : {}),
      ...(logger ? { logger } : {}),
    });
    this.#informer.start();
  }

  async stop(): Promise<void> {
    await this.#informer?.stop();
    this.#informer = undefined;
  }

  async lookup(
    nodeNames: readonly string[],
    signal?: AbortSignal,
  ): Promise<Map<string, Outcome<CloudAnswer>>> {
    const informer = this.#informer;
    // A Host list that keeps failing (RBAC, the CRD missing) must not hold reconciles: it is a failed
    // lookup, retried with backoff, while the informer logs why and keeps trying.
    const bounded = AbortSignal.any([
      AbortSignal.timeout(this.#options.syncWaitMs ?? 10_000),
      ...(signal ? [signal] : []),
    ]);
    const synced = (await informer?.waitForSync(bounded)) ?? false;
    const answers = new Map<string, Outcome<CloudAnswer>>();
    for (const name of nodeNames) {
      const host = informer?.get(`${hostNamespace}/${name}`);
      answers.set(
        name,
        synced
          ? { ok: true, value: { ranges: hostPodRanges(name, host?.podCIDRs) } }
          : {
              ok: false,
              error: new UnavailableError(
                `the Host records of ${hostNamespace} are not listed yet (see the hosts informer's log)`,
              ),
            },
      );
    }
    return answers;
  }
}
