/**
 * The Scaleway metadata service as a server sees it (`http://169.254.42.42/conf?format=json`): the
 * server's own id (the node's proof) and zone (the controller's zone when `SCW_DEFAULT_ZONE` is not
 * set, as kops' verifier reads it). The URL is overridable so tests point it at the simulator.
 */
import { UnavailableError } from '../../errors.ts';
import { readMetadataJson } from '../metadata-service.ts';
import { zonePattern } from './client.ts';
import { isScalewayServerId } from './server.ts';

/** The metadata service's document. */
export const defaultScalewayMetadataUrl = 'http://169.254.42.42/conf?format=json';

/** What this project reads of the document. */
export interface ScalewayMetadata {
  id: string;
  zone: string;
}

/** Reads the server's id and zone; UnavailableError when the service cannot be read or says neither. */
export async function readScalewayMetadata(
  options: { url?: string; fetch?: typeof globalThis.fetch; signal?: AbortSignal } = {},
): Promise<ScalewayMetadata> {
  const document = await readMetadataJson({
    url: new URL(options.url ?? defaultScalewayMetadataUrl),
    service: 'the Scaleway metadata service',
    ...(options.fetch ? { fetch: options.fetch } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  const { id } = document;
  const zone = (document['location'] as { zone_id?: unknown } | undefined)?.zone_id;
  if (typeof id !== 'string' || !isScalewayServerId(id)) {
    throw new UnavailableError('the Scaleway metadata document has no server id');
  }
  if (typeof zone !== 'string' || !zonePattern.test(zone)) {
    throw new UnavailableError('the Scaleway metadata document has no zone (location.zone_id)');
  }
  return { id, zone };
}
