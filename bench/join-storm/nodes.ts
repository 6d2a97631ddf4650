/** The storm's cluster and its nodes: instance ids, kubelet CSRs made before the clock starts, request bodies. */
import { buildCsrPem } from '../../src/pki/csr-build.ts';
import { generateKey } from '../../src/pki/keys.ts';
import { nativeApiVersion } from '../../src/protocol/bootstrap-api.ts';
import { clusterInstances } from '../../src/sim/aws/scenario.ts';
import type { AwsSimulator } from '../../src/sim/aws/server.ts';
import type { StormNode } from './types.ts';

export const clusterName = 'storm.example.com';
export const nodesRole = `nodes.${clusterName}`;

/** A kubelet client CSR for node `name`, with a fresh ECDSA P-256 key. */
export function kubeletCsr(name: string): string {
  return buildCsrPem(generateKey('ecdsa-p256'), {
    subject: { commonName: `system:node:${name}`, organizations: ['system:nodes'] },
  });
}

/** The native API's request body for a kubelet CSR. */
export function bootstrapBody(csrPem: string): string {
  return JSON.stringify({ apiVersion: nativeApiVersion, certificateSigningRequests: { kubelet: csrPem } });
}

/** `count` running instances of the cluster's `nodes` group in `aws`, each with its CSR and instance profile session. */
export function stormNodes(aws: AwsSimulator, count: number): StormNode[] {
  const instances = clusterInstances({ cluster: clusterName, instanceGroup: 'nodes', count });
  aws.ec2.addInstances(instances);
  return instances.map(({ id }) => {
    const csrPem = kubeletCsr(id);
    return {
      name: id,
      csrPem,
      body: bootstrapBody(csrPem),
      credentials: aws.sts.addInstanceProfileSession(nodesRole, id),
    };
  });
}
