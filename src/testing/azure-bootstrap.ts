/** Test support: the bootstrap `azure` policy's decision for a VM of the simulator, with one ARM answer rewritten. */
import { azureProof } from '../agent/azure-proof.ts';
import { azurePolicy } from '../bootstrap/policies/azure.ts';
import { AttestedDocumentVerifier } from '../cloud/azure/attested-document.ts';
import type { AzureClient } from '../cloud/azure/client.ts';
import type { ArmRewrite } from '../sim/azure/arm.ts';
import type { AzureSimulator } from '../sim/azure/simulator.ts';
import type { SimVm } from '../sim/azure/world.ts';
import { contextAt, testRequest } from './bootstrap-request.ts';

/**
 * The policy's answer (a decision, or the error it threw) for `vm`'s proof, with the next answer of
 * `operation` rewritten; the simulator's faults are cleared after.
 */
export async function bootstrapWith(
  sim: AzureSimulator,
  options: { clusterName: string; client: AzureClient },
  vm: SimVm,
  operation: string,
  rewrite: ArmRewrite,
): Promise<unknown> {
  const requestBody = '{"node":1}';
  const authorization = (await azureProof({ imdsUrl: sim.imdsUrlOf(vm.name) })(
    Buffer.from(requestBody),
  )) as string;
  const policy = azurePolicy({
    ...options,
    attestation: new AttestedDocumentVerifier({ roots: [sim.authority.rootPem] }),
  });
  sim.rewriteNext(1, rewrite, operation);
  try {
    return await policy.evaluate(
      testRequest({
        body: Buffer.from(requestBody),
        proof: { kind: 'cloud-id', scheme: 'x-azure-id', token: authorization.slice('x-azure-id '.length) },
      }),
      contextAt(new Date()),
    );
  } catch (err) {
    return err;
  } finally {
    sim.resetFaults();
  }
}
