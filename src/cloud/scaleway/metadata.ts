/**
 * The Scaleway metadata service as a server sees it (`http://169.254.42.42/conf?format=json`): the
 * server's own id (the node's proof) and zone (the controller's zone when `SCW_DEFAULT_ZONE` is not
 * set, as kops' verifier reads it). The URL is overridable so tests point it at the simulator.
 */
import { UnavailableError } from '../../errors.ts';
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
  const url = new URL(options.url ?? defaultScalewayMetadataUrl);
  let response: Response;
  try {
    response = await (options.fetch ?? globalThis.fetch)(url, {
      signal: options.signal ?? AbortSignal.timeout(10_000),
    });
  } catch (err) {
    throw new UnavailableError(
      `cannot reach the Scaleway metadata service at ${url.origin}: ${(err as Error).message}`,
      { cause: err },
    );
  }
  const text = await response.text();
  if (!response.ok) {
    throw new UnavailableError(
      `the Scaleway metadata service answered ${response.status} for ${url.pathname}: ${text.slice(0, 200)}`,
    );
  }
  let document: { id?: unknown; location?: { zone_id?: unknown } };
  try {
    document = JSON.parse(text);
  } catch {
    throw new UnavailableError('the Scaleway metadata service answered something that is not JSON');
  }
  const { id } = document;
  const zone = document.location?.zone_id;
  if (typeof id !== 'string' || !isScalewayServerId(id)) {
    throw new UnavailableError('the Scaleway metadata document has no server id');
  }
  if (typeof zone !== 'string' || !zonePattern.test(zone)) {
    throw new UnavailableError('the Scaleway metadata document has no zone (location.zone_id)');
  }
  return { id, zone };
}
