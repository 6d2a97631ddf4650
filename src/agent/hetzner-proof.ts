/**
 * `join` on a Hetzner Cloud server: the proof is kops' `x-hetzner-id <server id>`, the id read from
 * the server's own metadata service. It proves nothing by itself; the controller checks the cloud's
 * record of that server and then calls back the challenge server `join` runs on its private address.
 * Also {@link readMetadataText}, the metadata read the other id-only clouds' proofs share.
 */
import { InvalidInputError, KopsError, UnavailableError } from '../errors.ts';
import { httpsRequest } from '../net/https-client.ts';
import type { ProofProvider } from './proofs.ts';

/** The metadata service as a Hetzner server sees it (override for the simulator). */
export const defaultHetznerMetadataUrl = 'http://169.254.169.254/hetzner/v1/metadata';

/**
 * One text value of a link-local metadata service. Its failures are UnavailableError (join retries),
 * except an answer that is not what `valid` expects, which no retry will change.
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
        {
          cause: err,
        },
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

/** `Authorization: x-hetzner-id <server id>` from the metadata service. */
export function hetznerProof(options: { metadataUrl?: string } = {}): ProofProvider {
  const base = (options.metadataUrl ?? defaultHetznerMetadataUrl).replace(/\/$/, '');
  return async (_body, signal) => {
    const id = await readMetadataText({
      url: new URL(`${base}/instance-id`),
      what: 'the Hetzner server id',
      valid: /^[1-9]\d{0,18}$/,
      ...(signal ? { signal } : {}),
    });
    return `x-hetzner-id ${id}`;
  };
}
