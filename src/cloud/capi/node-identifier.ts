/**
 * Node identity in Cluster API mode (`capi.enabled`), around any cloud's identifier (AWS, GCE, ...):
 * the cloud is asked first, and an instance it places in a kops instance group keeps that group.
 * An instance the cloud refuses only for being in no kops group (AWS: no instance-group tag; GCE: not
 * created by a MIG) — a machine Cluster API created — is
 * identified by the Machine whose `spec.providerID` is the node's: its MachineDeployment is the
 * group (as kops' capimanager), its phase, addresses and failure domain the facts. Trusting Machines
 * is trusting whoever may write them (Cluster API's controllers, cluster admins), as kops does.
 * Machines come from a watch (MachineIndex): a lookup costs no API call.
 *
 * A Machine answers only in the cloud's stead where the cloud itself gave a verdict, and only the
 * verdict "in no kops group": the cloud API refusing the controller's own call (HTTP 401/403: a
 * missing permission, rejected credentials) says nothing about the instance and is a fault the
 * caller retries, and every refusal that names another reason (another cluster's, not running,
 * another zone, …) is final.
 */
import { ForbiddenError, KopsError, UnavailableError } from '../../errors.ts';
import type { IdentifyOptions, IdentifyResult, NodeIdentifier } from '../types.ts';
import { deploymentNameLabel, type MachineIndex, type MachineRecord } from './machines.ts';

/** The instance id of a providerID: its last path segment (`aws:///zone/i-0123` → `i-0123`). */
function instanceIdOf(providerID: string): string {
  return providerID.slice(providerID.lastIndexOf('/') + 1);
}

/** The reason a cloud identifier gives for "this instance is in no kops instance group". */
export const noInstanceGroupReason = 'no-instance-group';

/** Whether `error` is the cloud API refusing the controller's own call (HTTP 401/403), not a verdict. */
function ownCallRefused(error: Error): error is KopsError {
  return error instanceof KopsError && (error.upstreamStatus === 401 || error.upstreamStatus === 403);
}

/**
 * Whether the cloud's answer is "this instance is refused only for being in no kops instance group",
 * the one refusal a Machine may answer in its stead. Said explicitly (`no-instance-group`), or by a
 * refusal that names no reason (those of GCE's MIG check and the server clouds' group check do not);
 * any other reason is final: `foreign-cluster`, `not-running`, `zone-mismatch`, and
 * whatever reason an identifier adds later. An error the cloud API answered (it carries the upstream
 * status) is never a verdict on the instance.
 */
function notInAKopsGroup(result: IdentifyResult): boolean {
  if (result.ok || !(result.error instanceof KopsError) || result.error.kind !== 'forbidden') return false;
  if (result.error.upstreamStatus !== undefined) return false;
  const reason = result.error.reasonCode;
  return reason === undefined || reason === noInstanceGroupReason;
}

/** The identity a single Machine gives `providerID`, or why it gives none. */
export function identityFromMachines(providerID: string, machines: readonly MachineRecord[]): IdentifyResult {
  if (machines.length > 1) {
    const keys = machines.map((m) => m.key).join(', ');
    return {
      ok: false,
      error: new ForbiddenError(`several Machines claim ${providerID} (${keys}); fix spec.providerID`),
    };
  }
  const [machine] = machines;
  if (!machine) return { ok: false, error: new ForbiddenError(`no Machine has providerID ${providerID}`) };
  if (!machine.deploymentName) {
    return {
      ok: false,
      error: new ForbiddenError(
        `Machine ${machine.key} has no ${deploymentNameLabel} label, so it names no instance group`,
      ),
    };
  }
  return {
    ok: true,
    identity: {
      providerID,
      instanceId: instanceIdOf(providerID),
      instanceGroup: machine.deploymentName,
      state: machine.state,
      addresses: machine.addresses,
      ...(machine.failureDomain ? { zone: machine.failureDomain } : {}),
    },
  };
}

/** A NodeIdentifier that falls back to Cluster API Machines for instances outside kops' groups. */
export class CapiNodeIdentifier implements NodeIdentifier {
  readonly #cloud: NodeIdentifier;
  readonly #machines: Pick<MachineIndex, 'hasSynced' | 'machinesOf'>;

  constructor(cloud: NodeIdentifier, machines: Pick<MachineIndex, 'hasSynced' | 'machinesOf'>) {
    this.#cloud = cloud;
    this.#machines = machines;
  }

  async identify(
    providerIDs: readonly string[],
    options?: IdentifyOptions,
  ): Promise<Map<string, IdentifyResult>> {
    const results = await this.#cloud.identify(providerIDs, options);
    for (const [providerID, result] of results) {
      if (!result.ok && ownCallRefused(result.error)) {
        // The controller's own credentials or permissions, not the instance: retried, never decided.
        results.set(providerID, {
          ok: false,
          error: new UnavailableError(
            `the cloud refused the controller's own call (HTTP ${result.error.upstreamStatus}), so ${providerID} cannot be identified now: ${result.error.message}`,
            { cause: result.error, upstreamStatus: result.error.upstreamStatus },
          ),
        });
        continue;
      }
      if (!notInAKopsGroup(result)) continue;
      if (!this.#machines.hasSynced()) {
        // Until the first list, "no Machine" would be a guess: the caller retries.
        results.set(providerID, {
          ok: false,
          error: new UnavailableError(
            `the Cluster API Machines have not been listed yet; ${providerID} is retried`,
          ),
        });
        continue;
      }
      const machines = this.#machines.machinesOf(providerID);
      // No Machine either: the cloud's own answer says best why the instance has no group.
      if (machines.length > 0) results.set(providerID, identityFromMachines(providerID, machines));
    }
    return results;
  }
}
