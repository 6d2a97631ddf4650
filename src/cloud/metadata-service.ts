/**
 * Reads of a cloud's link-local metadata service, as a server sees it: the node's proof (its own
 * server id), and the controller's zone or subscription where it runs on that cloud. Every failure
 * to read is UnavailableError (join retries, the controller reports a dependency it cannot reach);
 * only an answer that is not what the caller expects is another error, which no retry will change.
 * (Shared by the proofs of src/agent and by src/cloud/scaleway and src/cloud/azure.)
 */
import { InvalidInputError, KopsError, UnavailableError } from '../errors.ts';
import { isJsonObject } from '../json-object.ts';
import { httpsRequest } from '../net/https-client.ts';

/** The deadline of one read when the caller gives no signal. */
const metadataTimeoutMs = 10_000;

/**
 * One text value (`/instance-id`, a token, `key: value` lines), read with a fresh connection and a
 * bounded body. An answer that does not match `valid` is InvalidInputError.
 */
export async function readMetadataText(request: {
  url: URL;
  what: string;
  valid: RegExp;
  method?: string;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}): Promise<string> {
  const { url, what } = request;
  let answer: Awaited<ReturnType<typeof httpsRequest>>;
  try {
    answer = await httpsRequest({
      url,
      method: request.method ?? 'GET',
      headers: request.headers ?? {},
      // A fresh connection: the metadata service is local and a kept-alive one would outlive join.
      agent: false,
      timeoutMs: 5_000,
      maxBodyBytes: 64 * 1024,
      ...(request.signal ? { signal: request.signal } : {}),
    });
  } catch (err) {
    if (err instanceof KopsError) {
      throw new UnavailableError(
        `cannot read ${what} from the metadata service at ${url.origin}: ${err.message}`,
        { cause: err },
      );
    }
    throw err;
  }
  const text = answer.body.toString('utf8').trim();
  if (answer.status !== 200) {
    throw new UnavailableError(
      `the metadata service answered ${answer.status} for ${what}: ${text.slice(0, 200)}`,
    );
  }
  if (!request.valid.test(text)) {
    throw new InvalidInputError(
      `the metadata service's ${what} "${text.slice(0, 40)}" is not one; is this a server of that cloud?`,
    );
  }
  return text;
}

/** Where and how a JSON metadata document is read. */
export interface MetadataJsonRequest {
  url: URL;
  /** The service as the operator knows it (`the OpenStack metadata service`, `Azure IMDS`). */
  service: string;
  headers?: Record<string, string>;
  fetch?: typeof globalThis.fetch;
  signal?: AbortSignal;
}

/** One JSON object document (OpenStack's meta_data.json, Scaleway's /conf, Azure IMDS). */
export async function readMetadataJson(request: MetadataJsonRequest): Promise<Record<string, unknown>> {
  const { url, service } = request;
  let response: Response;
  try {
    response = await (request.fetch ?? globalThis.fetch)(url, {
      headers: request.headers ?? {},
      signal: request.signal ?? AbortSignal.timeout(metadataTimeoutMs),
    });
  } catch (err) {
    throw new UnavailableError(`cannot reach ${service} at ${url.origin}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const text = await response.text();
  if (!response.ok) {
    throw new UnavailableError(
      `${service} answered ${response.status} for ${url.pathname}: ${text.slice(0, 200)}`,
    );
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (!isJsonObject(body)) {
    throw new UnavailableError(`${service} answered something that is not JSON for ${url.pathname}`);
  }
  return body;
}
