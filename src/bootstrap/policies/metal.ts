/**
 * `metal`: bootstrap for machines listed in the operator's inventory (src/cloud/metal). The claimed
 * node must be an inventory host and the request must come from one of that host's addresses; then
 * a valid bootstrap token approves it, or — when configured — it is queued for a human with the
 * inventory facts attached. Name, group and SANs come from the inventory, never from the request. An
 * inventory that cannot be read is a dependency fault (503, the node retries), not a denial.
 */
import { isIP } from 'node:net';
import type { MetalHost, MetalInventory } from '../../cloud/metal/inventory.ts';
import { dependencyFault } from '../dependency.ts';
import type { BootstrapPolicy, BootstrapTokenValidator, NodeFacts } from '../types.ts';
import { checkBootstrapToken } from './bootstrap-token.ts';
import { queueDecision } from './queue.ts';

/** Options of the `metal` policy. */
export interface MetalPolicyOptions {
  /** The current inventory (InventoryStore). */
  inventory: { current(): Promise<MetalInventory> };
  /** Validates bootstrap tokens; without it every verified host goes to `withoutToken`. */
  tokens?: BootstrapTokenValidator;
  /** What a verified host without a valid token gets: a `queue` verdict (default) or a denial. */
  withoutToken?: 'queue' | 'deny';
}

/** The TCP peer as the inventory lists it: IPv4-mapped IPv6 (`::ffff:10.0.0.5`) as plain IPv4. */
export function peerAddress(remoteAddress: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(remoteAddress);
  return mapped ? (mapped[1] as string) : remoteAddress.toLowerCase();
}

/** The node facts of an inventory host. */
export function hostFacts(host: MetalHost): NodeFacts {
  return {
    nodeName: host.name,
    instanceGroup: host.instanceGroup,
    instanceId: host.name,
    dnsNames: host.addresses.filter((a) => isIP(a) === 0 && a !== host.name),
    ipAddresses: host.addresses.filter((a) => isIP(a) !== 0),
    evidence: { providerID: host.providerID },
  };
}

/** The `metal` policy. */
export function metalPolicy(options: MetalPolicyOptions): BootstrapPolicy {
  const withoutToken = options.withoutToken ?? 'queue';
  return {
    name: 'metal',
    evaluate: async (request, context) => {
      const claimed = request.claimedNodeName;
      if (!claimed) return { verdict: 'deny', reasons: ['the request names no host'] };
      let inventory: MetalInventory;
      try {
        inventory = await options.inventory.current();
      } catch (err) {
        // Unreadable, missing or invalid: nothing is known about the host yet, so the node retries.
        throw dependencyFault('state-store', err);
      }
      const host = inventory.lookup(claimed);
      if (!host || host.name !== claimed) {
        return { verdict: 'deny', reasons: [`${claimed} is not a host of the inventory`] };
      }
      const peer = peerAddress(request.remoteAddress);
      if (!host.addresses.includes(peer)) {
        return {
          verdict: 'deny',
          reasons: [
            `the request comes from ${peer}, which is not an address of host ${host.name} (${host.addresses.join(', ')})`,
          ],
        };
      }
      const facts = hostFacts(host);
      if (request.proof.kind === 'bootstrap-token' && options.tokens) {
        const checked = await checkBootstrapToken(options.tokens, request.proof.token, context.now());
        if ('verdict' in checked) return checked;
        return {
          verdict: 'approve',
          facts: { ...facts, evidence: { ...facts.evidence, tokenId: checked.tokenId, peer } },
          reasons: [
            `inventory host ${host.name} asked from its address ${peer} with valid bootstrap token ${checked.tokenId}`,
          ],
        };
      }
      if (withoutToken === 'deny') {
        return { verdict: 'deny', reasons: [`host ${host.name} presented no valid bootstrap token`] };
      }
      return queueDecision(request, { ...facts, evidence: { ...facts.evidence, peer } });
    },
  };
}
