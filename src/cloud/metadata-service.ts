/**
 * Reads of a cloud's link-local metadata service, as a server sees it: the node's proof (its own
 * server id), and the controller's zone or subscription where it runs on that cloud. Every failure
 * to read is UnavailableError (join retries, the controller reports a dependency it cannot reach);
 * only an answer that is not what the caller expects is another error, which no retry will change.
 * (Shared by the proofs of src/agent and by src/cloud/scaleway and src/cloud/azure.)
 */
import { InvalidInputError, KopsError, UnavailableError } from '../errors.ts';
import { isJsonObject } from '../json-object.ts';
import { printable } from '../log.ts';
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
      `the metadata service answered ${answer.status} for ${what}: ${printable(text)}`,
    );
  }
  if (!request.valid.test(text)) {
    throw new InvalidInputError(
      `the metadata service's ${what} "${printable(text, 40)}" is not one; is this a server of that cloud?`,
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
  /** The caller's cancellation; the call's own deadline applies as well. */
  signal?: AbortSignal;
  /** The deadline of this call, connection to last byte (default 10 s). */
  timeoutMs?: number;
}

/** The largest metadata answer read (an Azure attested document or compute record is a few KiB). */
const maxMetadataBodyBytes = 1024 * 1024;

/**
 * One GET of a metadata service through `fetch`, its body read whole as text: the call has a deadline
 * (connection to last byte, also with a caller's signal), no redirect is followed (the answer is the
 * configured service's or nothing), and a body over `maxBytes` is not read further. A failure to
 * reach or read, a redirect and any other status than 200 are UnavailableError, one printable line.
 */
export async function fetchMetadataText(
  request: MetadataJsonRequest & {
    /** What is read, for messages (`the identity token`, `/metadata/instance/compute`). */
    what: string;
    maxBytes?: number;
  },
): Promise<string> {
  const { url, service, what } = request;
  const deadline = AbortSignal.timeout(request.timeoutMs ?? metadataTimeoutMs);
  const signal = request.signal ? AbortSignal.any([request.signal, deadline]) : deadline;
  const maxBytes = request.maxBytes ?? maxMetadataBodyBytes;
  const failed = (err: unknown) =>
    new UnavailableError(
      `cannot read ${what} from ${service} at ${url.origin}: ${printable(reasonOf(err, deadline, request.timeoutMs))}`,
      { cause: err },
    );
  let response: Response;
  try {
    response = await (request.fetch ?? globalThis.fetch)(url, {
      headers: request.headers ?? {},
      redirect: 'manual',
      signal,
    });
  } catch (err) {
    throw new UnavailableError(
      `cannot reach ${service} at ${url.origin}: ${printable(reasonOf(err, deadline, request.timeoutMs))}`,
      { cause: err },
    );
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    const reader = response.body?.getReader();
    for (;;) {
      const next = await reader?.read();
      if (!next || next.done) break;
      size += next.value.byteLength;
      if (size > maxBytes) {
        await reader?.cancel().catch(() => {});
        throw new UnavailableError(`${service} answered more than ${maxBytes} bytes for ${what}`);
      }
      chunks.push(Buffer.from(next.value));
    }
  } catch (err) {
    if (err instanceof KopsError) throw err;
    throw failed(err);
  }
  // As `Response.text()` reads it: UTF-8, a byte-order mark dropped.
  const text = Buffer.concat(chunks)
    .toString('utf8')
    .replace(/^\uFEFF/, '');
  if (response.status !== 200) {
    const location = response.headers.get('location');
    throw new UnavailableError(
      `${service} answered ${response.status} for ${what}${location ? ' (a redirect, not followed)' : ''}: ${printable(text)}`,
    );
  }
  return text;
}

/** Why a fetch failed, in words: the call's own deadline is named as such. */
function reasonOf(err: unknown, deadline: AbortSignal, timeoutMs: number | undefined): string {
  if (deadline.aborted) return `no whole answer within ${timeoutMs ?? metadataTimeoutMs} ms`;
  const message = (err as Error)?.message ?? String(err);
  const cause = (err as { cause?: { message?: unknown } })?.cause?.message;
  return typeof cause === 'string' && cause && !message.includes(cause) ? `${message}: ${cause}` : message;
}

/** One JSON object document (OpenStack's meta_data.json, Scaleway's /conf, Azure IMDS). */
export async function readMetadataJson(request: MetadataJsonRequest): Promise<Record<string, unknown>> {
  const { url, service } = request;
  const text = await fetchMetadataText({ ...request, what: url.pathname });
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
