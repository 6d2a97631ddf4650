/**
 * `join` on a Hetzner Cloud server: the proof is kops' `x-hetzner-id <server id>`, the id read from
 * the server's own metadata service. It proves nothing by itself; the controller checks the cloud's
 * record of that server and then calls back the challenge server `join` runs on its private address.
 */
import { hetznerServerIds } from '../cloud/hetzner/servers.ts';
import { readMetadataText } from '../cloud/metadata-service.ts';
import type { ProofProvider } from './proofs.ts';

/** The metadata service as a Hetzner server sees it (override for the simulator). */
export const defaultHetznerMetadataUrl = 'http://169.254.169.254/hetzner/v1/metadata';

/** `Authorization: x-hetzner-id <server id>` from the metadata service. */
export function hetznerProof(options: { metadataUrl?: string } = {}): ProofProvider {
  const base = (options.metadataUrl ?? defaultHetznerMetadataUrl).replace(/\/$/, '');
  return async (_body, signal) => {
    const id = await readMetadataText({
      url: new URL(`${base}/instance-id`),
      what: 'the Hetzner server id',
      valid: hetznerServerIds.pattern,
      ...(signal ? { signal } : {}),
    });
    return `x-hetzner-id ${id}`;
  };
}
