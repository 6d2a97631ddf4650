/**
 * `join` on an Akamai (Linode) instance: kops' `x-linode-instance-id <instance id>`, the id read from
 * the metadata service after its token dance — `PUT /v1/token` (with `Metadata-Token-Expiry-Seconds`)
 * answers a short-lived token, and `GET /v1/instance` with that token answers `key: value` lines, one
 * of them `id: <instance id>`. The controller checks the instance's tags and then calls back the
 * challenge server `join` runs on the instance's private address.
 */

import { linodeIds } from '../cloud/linode/instances.ts';
import { readMetadataText } from '../cloud/metadata-service.ts';
import type { ProofProvider } from './proofs.ts';

/** The metadata service (override for the simulator). */
export const defaultLinodeMetadataUrl = 'http://169.254.169.254';

/** The value of `key` in the metadata service's `key: value` lines. */
export function linodeMetadataValue(text: string, key: string): string | undefined {
  for (const line of text.split('\n')) {
    const [name, ...rest] = line.split(':');
    if (name?.trim() === key) return rest.join(':').trim();
  }
  return undefined;
}

/** `Authorization: x-linode-instance-id <instance id>` from the metadata service. */
export function linodeProof(options: { metadataUrl?: string } = {}): ProofProvider {
  const base = (options.metadataUrl ?? defaultLinodeMetadataUrl).replace(/\/$/, '');
  return async (_body, signal) => {
    const withSignal = signal ? { signal } : {};
    // The token lives five minutes, as kops asks; one is fetched per proof, so none is kept around.
    const token = await readMetadataText({
      url: new URL(`${base}/v1/token`),
      method: 'PUT',
      headers: { 'Metadata-Token-Expiry-Seconds': '300' },
      what: 'a metadata token',
      valid: /^[\w.-]{1,512}$/,
      ...withSignal,
    });
    const instance = await readMetadataText({
      url: new URL(`${base}/v1/instance`),
      headers: { 'Metadata-Token': token },
      what: 'the instance metadata',
      valid: /^id:/m,
      ...withSignal,
    });
    const id = linodeIds.parse(
      linodeMetadataValue(instance, 'id') ?? '',
      "the metadata service's instance id",
    );
    return `x-linode-instance-id ${id}`;
  };
}
