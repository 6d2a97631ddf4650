/**
 * The node side of kops' OpenStack proof (openstackmetadata/authenticator.go): the server's own id,
 * read from the metadata service, sent as `x-openstack-id <uuid>`. It proves nothing by itself; the
 * controller checks that the request comes from an address Nova lists for that server.
 */

import { readMetadataJson } from '../cloud/metadata-service.ts';
import { isServerId } from '../cloud/openstack/nova.ts';
import { UnavailableError } from '../errors.ts';
import type { ProofProvider } from './proofs.ts';

/** The metadata service's document (override for the simulator or a config-drive proxy). */
export const defaultOpenStackMetadataUrl = 'http://169.254.169.254/openstack/latest/meta_data.json';

/** Options of {@link openstackProof}. */
export interface OpenStackProofOptions {
  metadataUrl?: string;
  fetch?: typeof globalThis.fetch;
}

/** The server id from the metadata service, read once and then reused (it never changes). */
export function openstackProof(options: OpenStackProofOptions = {}): ProofProvider {
  const url = new URL(options.metadataUrl ?? defaultOpenStackMetadataUrl);
  let serverId: string | undefined;
  return async (_body, signal) => {
    if (serverId === undefined) {
      const { uuid } = await readMetadataJson({
        url,
        service: 'the OpenStack metadata service',
        ...(options.fetch ? { fetch: options.fetch } : {}),
        ...(signal ? { signal } : {}),
      });
      if (typeof uuid !== 'string' || !isServerId(uuid)) {
        throw new UnavailableError('the OpenStack metadata document has no server uuid');
      }
      serverId = uuid;
    }
    return `x-openstack-id ${serverId}`;
  };
}
