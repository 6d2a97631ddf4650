/**
 * `join` on a droplet: kops' `x-digitalocean-droplet-id <droplet id>`, the id read from the droplet
 * metadata service (`/metadata/v1/id`). The controller checks the droplet's tags and then calls back
 * the challenge server `join` runs on the droplet's private address.
 */
import { dropletIds } from '../cloud/digitalocean/droplets.ts';
import { readMetadataText } from '../cloud/metadata-service.ts';
import type { ProofProvider } from './proofs.ts';

/** The droplet metadata service (override for the simulator). */
export const defaultDigitalOceanMetadataUrl = 'http://169.254.169.254/metadata/v1';

/** `Authorization: x-digitalocean-droplet-id <droplet id>` from the metadata service. */
export function digitalOceanProof(options: { metadataUrl?: string } = {}): ProofProvider {
  const base = (options.metadataUrl ?? defaultDigitalOceanMetadataUrl).replace(/\/$/, '');
  return async (_body, signal) => {
    const id = await readMetadataText({
      url: new URL(`${base}/id`),
      what: 'the droplet id',
      valid: dropletIds.pattern,
      ...(signal ? { signal } : {}),
    });
    return `x-digitalocean-droplet-id ${id}`;
  };
}
