/**
 * The `renewal` policy's address source for machines no cloud knows (kops metal): the node is found
 * by its name in the registries the operator enrols machines in, and a renewal certifies the
 * addresses those registries vouch for — none, when none records any.
 *
 * Why by name, and why the Host is the authority — kops' own metal design:
 * - a machine is enrolled by a `Host` object (`kops.k8s.io/v1alpha2`, `kops-system`) named after
 *   its host name, which is its node name (`kops toolbox enroll` names it `hostname`'s output;
 *   kops-controller's metal IPAM reads the Host of a Node by the Node's name). It holds the machine's
 *   key, its instance group and pod CIDRs, and no address;
 * - a metal Node has no providerID (nodeup sets none, kops' metal node identifier is a stub), so the
 *   cloud path of a renewal (the Node's providerID, then the cloud) has nothing to look up;
 * - kops' verifier certifies no name beyond the node's for a metal host (`CertificateNames` empty).
 * So a renewal on metal looks the node's name — which it proved with the key of its current
 * certificate — up in the registries, and never trusts the Node's providerID (the kubelet writes it).
 * A Host enrols the name and its group only: the renewal renews the kubelet client certificate, and
 * a serving certificate is refused for want of a verified address (the CSR approver handles those
 * on kops metal). Deleting the Host (`host delete`, kops' way of removing a machine) ends the
 * machine's renewals as it ends its first joins: a stolen kubelet key stops renewing when the
 * machine is removed, as on the clouds.
 *
 * The inventory (`metal/inventory.yaml`, this implementation's registry, which the `metal` policy,
 * the CSR approver and the node labeller read on `cloud: metal`) does list addresses: a host it lists
 * renews a serving certificate for exactly them, as its first join through `metal` got.
 *
 * Both registries are consulted when trusted; a Host and an inventory entry naming different
 * instance groups are a contradiction the controller does not resolve by guessing (refused, naming
 * both). A registry failing to answer is a fault (503), never a denial: the Host read is the API
 * server's (`kubernetes-api`), the inventory read the state store's (`state-store`), as for the
 * first joins. An inventory file that does not exist is "lists no host" unless the chain's `metal`
 * policy requires it (then a fault, as for that policy). When no Host registry is trusted and no
 * inventory exists, this cluster enrols no machines at all: there is nothing to check beyond the
 * Node, and the renewal renews client certificates only, as a server without an address source.
 */
import { type HostLookup, type HostObject, hostEnrolment, hostNamespace } from '../../cloud/metal/hosts.ts';
import { type InventoryStore, type MetalHost, MissingInventoryError } from '../../cloud/metal/inventory.ts';
import { withDeadline } from '../../deadline.ts';
import { isDnsSubdomain } from '../../dns-name.ts';
import { ForbiddenError, NotFoundError } from '../../errors.ts';
import { defaultCloudLookupTimeoutMs, dependencyFault } from '../dependency.ts';
import { hostFacts } from './metal.ts';
import type { NodeAddresses } from './renewal.ts';

/** The registries a renewal may find a metal host in: those the configured chain trusts. */
export interface MetalRegistries {
  /** kops' Host objects, when the chain's `pki-tpm` policy trusts them. */
  hosts?: HostLookup;
  /**
   * The inventory, when trusted (`cloud: metal` with a configBase, or the `metal` policy);
   * `required` when the chain's `metal` policy needs it, so that a missing file is a fault.
   */
  inventory?: { store: Pick<InventoryStore, 'current' | 'source'>; required: boolean };
  /** Deadline of the Host read (default 10 s). */
  timeoutMs?: number;
}

/** What the inventory says of a node: its entry, or whether the inventory exists at all. */
type Listed = { host?: MetalHost; inUse: boolean };

/**
 * A renewal's addresses for `nodeName` from the metal registries; throws a verdict (NotFoundError,
 * ForbiddenError: a denial) when they do not vouch for it, a dependency fault when one cannot be read.
 */
export function metalAddresses(registries: MetalRegistries): (nodeName: string) => Promise<NodeAddresses> {
  const timeoutMs = registries.timeoutMs ?? defaultCloudLookupTimeoutMs;

  async function hostOf(nodeName: string): Promise<HostObject | undefined> {
    // No Host can bear a name that is no object name; it is not looked up (nor put in a path).
    if (!registries.hosts || !isDnsSubdomain(nodeName)) return undefined;
    return withDeadline(
      registries.hosts.get(nodeName),
      timeoutMs,
      `read host ${hostNamespace}/${nodeName}`,
    ).catch((err: unknown) => {
      throw dependencyFault('kubernetes-api', err);
    });
  }

  async function listedOf(nodeName: string): Promise<Listed> {
    if (!registries.inventory) return { inUse: false };
    const { store, required } = registries.inventory;
    try {
      // Fresh, as the clouds' renewal lookups (maxAgeMs 0): a host just removed renews no more.
      const host = (await store.current(0)).lookup(nodeName);
      return { host: host?.name === nodeName ? host : undefined, inUse: true };
    } catch (err) {
      if (err instanceof MissingInventoryError && !required) return { inUse: false };
      throw dependencyFault('state-store', err);
    }
  }

  return async (nodeName) => {
    const [host, listed] = await Promise.all([hostOf(nodeName), listedOf(nodeName)]);
    const enrolment = host && hostEnrolment(host);
    if (enrolment && 'problem' in enrolment) throw new ForbiddenError(enrolment.problem);
    if (listed.host) {
      const facts = hostFacts(listed.host);
      if (enrolment && enrolment.instanceGroup !== facts.instanceGroup) {
        throw new ForbiddenError(
          `host ${hostNamespace}/${nodeName} enrols node ${nodeName} in instance group ${enrolment.instanceGroup}, the metal inventory ${registries.inventory?.store.source} in ${facts.instanceGroup}: correct one of them`,
        );
      }
      return {
        dnsNames: facts.dnsNames,
        ipAddresses: facts.ipAddresses,
        instanceGroup: facts.instanceGroup,
        instanceId: nodeName,
      };
    }
    if (enrolment) {
      return { dnsNames: [], ipAddresses: [], instanceGroup: enrolment.instanceGroup, instanceId: nodeName };
    }
    const nowhere = [
      ...(registries.hosts ? [`no Host ${hostNamespace}/${nodeName}`] : []),
      ...(listed.inUse ? [`the metal inventory ${registries.inventory?.store.source} does not list it`] : []),
    ];
    if (nowhere.length === 0) return { dnsNames: [], ipAddresses: [] };
    const enrol = registries.hosts
      ? 'kops toolbox enroll, or kops-controller host add'
      : `list it in ${registries.inventory?.store.source}`;
    throw new NotFoundError(
      `node ${nodeName} is enrolled nowhere: ${nowhere.join(', and ')}; a machine removed from the cluster renews no certificate (enrol it again: ${enrol})`,
    );
  };
}
