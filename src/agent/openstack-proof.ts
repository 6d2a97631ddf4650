/**
 * The node side of kops' OpenStack proof (openstackmetadata/authenticator.go): the server's own id,
 * read from the metadata service, sent as `x-openstack-id <uuid>`. It proves nothing by itself; the
 * controller checks that the request comes from an address Nova lists for that server.
 */

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
  const fetchFn = options.fetch ?? globalThis.fetch;
  const url = new URL(options.metadataUrl ?? defaultOpenStackMetadataUrl);
  let serverId: string | undefined;
  return async (_body, signal) => {
    if (serverId === undefined) {
      let response: Response;
      try {
        response = await fetchFn(url, { signal: signal ?? AbortSignal.timeout(10_000) });
      } catch (err) {
        throw new UnavailableError(
          `cannot reach the OpenStack metadata service at ${url.origin}: ${(err as Error).message}`,
          { cause: err },
        );
      }
      const text = await response.text();
      if (!response.ok) {
        throw new UnavailableError(
          `the OpenStack metadata service answered ${response.status} for ${url.pathname}: ${text.slice(0, 200)}`,
        );
      }
      let uuid: unknown;
      try {
        uuid = (JSON.parse(text) as { uuid?: unknown }).uuid;
      } catch {
        throw new UnavailableError('the OpenStack metadata service answered something that is not JSON');
      }
      if (typeof uuid !== 'string' || !isServerId(uuid)) {
        throw new UnavailableError('the OpenStack metadata document has no server uuid');
      }
      serverId = uuid;
    }
    return `x-openstack-id ${serverId}`;
  };
}
