/**
 * The Azure Instance Metadata Service as a VM reads it: its compute metadata (subscription,
 * resource group, resource id) and an attested document for a nonce. IMDS is plain HTTP on the
 * link-local address and wants `Metadata: true`; the base URL is overridable so tests point it at
 * the simulator. Failures are UnavailableErrors: the node retries, nothing is decided.
 */
import { UnavailableError } from '../../errors.ts';
import { readMetadataJson } from '../metadata-service.ts';

/** Where IMDS answers on every Azure VM. */
export const defaultImdsUrl = 'http://169.254.169.254';
/** The IMDS API version kops uses. */
export const imdsApiVersion = '2025-04-07';

/** The compute metadata the controller and the node use. */
export interface ImdsInstance {
  subscriptionId: string;
  resourceGroupName: string;
  resourceId: string;
  vmId: string;
  location: string;
}

/** Where and how IMDS is asked. */
export interface ImdsOptions {
  /** IMDS base URL (default {@link defaultImdsUrl}). */
  url?: string;
  fetch?: typeof globalThis.fetch;
  signal?: AbortSignal;
}

function imdsGet(
  options: ImdsOptions,
  path: string,
  params: Record<string, string>,
): Promise<Record<string, unknown>> {
  const url = new URL(`${(options.url ?? defaultImdsUrl).replace(/\/$/, '')}${path}`);
  for (const [k, v] of Object.entries({ ...params, 'api-version': imdsApiVersion }))
    url.searchParams.set(k, v);
  return readMetadataJson({
    url,
    service: 'Azure IMDS',
    headers: { Metadata: 'true' },
    ...(options.fetch ? { fetch: options.fetch } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
  });
}

function text(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

/** The VM's compute metadata; throws UnavailableError when IMDS fails or leaves out a field. */
export async function imdsInstance(options: ImdsOptions = {}): Promise<ImdsInstance> {
  const body = await imdsGet(options, '/metadata/instance/compute', { format: 'json' });
  const instance = {
    subscriptionId: text(body['subscriptionId']),
    resourceGroupName: text(body['resourceGroupName']),
    resourceId: text(body['resourceId']),
    vmId: text(body['vmId']),
    location: text(body['location']),
  };
  for (const [key, value] of Object.entries(instance)) {
    if (!value && key !== 'location') throw new UnavailableError(`Azure IMDS compute metadata has no ${key}`);
  }
  return instance;
}

/** The base64 PKCS#7 attested document IMDS signs for `nonce`. */
export async function imdsAttestedDocument(nonce: string, options: ImdsOptions = {}): Promise<string> {
  const body = await imdsGet(options, '/metadata/attested/document', { nonce });
  const signature = text(body['signature']);
  if (!signature) throw new UnavailableError('Azure IMDS returned an attested document without a signature');
  return signature;
}
