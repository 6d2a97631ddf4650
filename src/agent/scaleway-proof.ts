/**
 * The node side of kops' Scaleway proof (scalewaymetadata/authenticator.go): the server's own id,
 * read from the metadata service, sent as `x-scaleway-instance-server-id <uuid>`. It proves nothing
 * by itself; the controller calls the node back on its private address (the callback challenge).
 */
import { readScalewayMetadata } from '../cloud/scaleway/metadata.ts';
import type { ProofProvider } from './proofs.ts';

/** Options of {@link scalewayProof}. */
export interface ScalewayProofOptions {
  /** Default `http://169.254.42.42/conf?format=json`. */
  metadataUrl?: string;
  fetch?: typeof globalThis.fetch;
}

/** The server id from the metadata service, read once and then reused (it never changes). */
export function scalewayProof(options: ScalewayProofOptions = {}): ProofProvider {
  let serverId: string | undefined;
  return async (_body, signal) => {
    serverId ??= (
      await readScalewayMetadata({
        ...(options.metadataUrl ? { url: options.metadataUrl } : {}),
        ...(options.fetch ? { fetch: options.fetch } : {}),
        ...(signal ? { signal } : {}),
      })
    ).id;
    return `x-scaleway-instance-server-id ${serverId}`;
  };
}
