/**
 * Replays a node's signed GetCallerIdentity to STS and reads the answer. One request, no redirects
 * (node's http client follows none), no connection reuse, a short timeout and a bounded answer: the
 * node chose the headers, so nothing but STS's verdict on them is trusted.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { TimeoutError, UnauthenticatedError, UnavailableError } from '../../errors.ts';
import type { StsReplayRequest } from './aws-sts-proof.ts';

/** Who STS says signed the request. */
export interface StsCaller {
  account: string;
  arn: string;
  userId: string;
}

const maxAnswerBytes = 64 * 1024;

function xmlText(xml: string, tag: string): string | undefined {
  const m = new RegExp(`<${tag}>([^<]*)</${tag}>`).exec(xml);
  if (!m) return undefined;
  return (m[1] as string)
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&apos;/g, "'")
    .replace(/&amp;/g, '&');
}

/** Parses a GetCallerIdentityResponse document; throws UnauthenticatedError when it is not one. */
export function parseCallerIdentity(xml: string): StsCaller {
  const result = /<GetCallerIdentityResult>([\s\S]*)<\/GetCallerIdentityResult>/.exec(xml)?.[1];
  const account = result && xmlText(result, 'Account');
  const arn = result && xmlText(result, 'Arn');
  if (!account || !arn) throw new UnauthenticatedError('STS answered without a GetCallerIdentityResult');
  return { account, arn, userId: (result && xmlText(result, 'UserId')) ?? '' };
}

/**
 * Sends `replay.request` to `endpoint` (`https://sts.<region>.amazonaws.com` or the simulator) with the
 * signed Host header; resolves to the caller, or throws UnauthenticatedError (STS refused the
 * signature), UnavailableError (STS unreachable or failing) or TimeoutError.
 */
export function callSts(
  endpoint: string,
  replay: StsReplayRequest['request'],
  timeoutMs: number,
): Promise<StsCaller> {
  const base = new URL(endpoint);
  const send = base.protocol === 'https:' ? httpsRequest : httpRequest;
  const headers: Record<string, string | string[]> = { ...replay.headers, connection: 'close' };
  headers['host'] = replay.headers['host']?.[0] ?? base.host;
  return new Promise<StsCaller>((resolve, reject) => {
    const req = send(
      {
        protocol: base.protocol,
        hostname: base.hostname,
        port: base.port,
        method: replay.method,
        path: replay.url,
        headers,
        agent: false,
        timeout: timeoutMs,
        ...(base.protocol === 'https:' ? { servername: base.hostname } : {}),
      },
      (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > maxAnswerBytes) {
            req.destroy(new UnavailableError(`STS answered with more than ${maxAnswerBytes} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status === 200) {
            try {
              resolve(parseCallerIdentity(text));
            } catch (err) {
              reject(err);
            }
            return;
          }
          const code = xmlText(text, 'Code') ?? `HTTP ${status}`;
          const message = xmlText(text, 'Message') ?? '';
          const what = `${code}${message ? `: ${message}` : ''}`;
          reject(
            status >= 500 || status === 429 || code === 'Throttling'
              ? new UnavailableError(`STS failed (${what}); retry later`)
              : new UnauthenticatedError(what),
          );
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new TimeoutError(`STS did not answer within ${timeoutMs} ms`)));
    req.on('error', (err) =>
      reject(
        err instanceof TimeoutError || err instanceof UnavailableError
          ? err
          : new UnavailableError(`cannot reach STS at ${endpoint}: ${err.message}`, { cause: err }),
      ),
    );
    req.end(replay.body);
  });
}
