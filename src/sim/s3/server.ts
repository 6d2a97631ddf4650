/**
 * A small S3 REST server for the state-store tests and `kops-controller dev`: path-style
 * GetObject, HeadObject, PutObject, ListObjectsV2 and DeleteObject with MD5 ETags, SigV4-verified.
 * It listens on loopback only.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type SigV4Credentials, SigV4Error, type SigV4ErrorCode } from '../../cloud/aws/sigv4.ts';
import { listenOnLoopback } from '../../net/loopback.ts';
import { readBody } from '../../net/read-body.ts';
import { verifySigV4 } from '../aws/sigv4-verify.ts';

/** Options of the simulated S3. */
export interface S3SimOptions {
  port?: number;
  /** Buckets that exist from the start. */
  buckets?: string[];
  /** Keys that may sign requests; one is generated when omitted. */
  credentials?: SigV4Credentials[];
  /** Whether unsigned or badly signed requests are refused (default true). */
  verifySignatures?: boolean;
}

interface SimObject {
  data: Buffer;
  etag: string;
  lastModified: Date;
}

/** A running simulated S3 and the helpers tests use to seed and inspect it. */
export interface S3Sim {
  /** Base URL for the SDK's `endpoint` (use with `forcePathStyle: true`). */
  endpoint: string;
  /** The credentials that sign valid requests. */
  credentials: SigV4Credentials;
  createBucket(name: string): void;
  putObject(bucket: string, key: string, data: Buffer | string): void;
  getObject(bucket: string, key: string): Buffer | undefined;
  deleteObject(bucket: string, key: string): void;
  /** How many requests each operation served (e.g. `HeadObject`), for tests of polling cost. */
  requestCounts(): Record<string, number>;
  /** Makes the next `count` requests fail with a 503 SlowDown, for failure tests. */
  failNext(count: number): void;
  /**
   * Answers every signed request of `operation` (`ListObjectsV2`, `GetObject`, `HeadObject`, …) with
   * `answer` instead, until cleared with undefined: a broken S3-compatible store (a listing that never
   * ends, a short body, an error in a 200) for the tests of what the controller believes. An answer
   * that returns false lets the simulator answer as usual.
   */
  answerWith(operation: string, answer: S3SimAnswer | undefined): void;
  close(): Promise<void>;
}

/** A test's own answer to one request (see {@link S3Sim.answerWith}); false: answer as usual. */
export type S3SimAnswer = (
  req: IncomingMessage,
  res: ServerResponse,
  target: { bucket: string; key: string; url: URL },
) => unknown;

const xmlEscape = (s: string) =>
  s.replace(
    /[<>&'"]/g,
    (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' })[c]!,
  );

function sendError(res: ServerResponse, status: number, code: string, message: string, resource = ''): void {
  const body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${xmlEscape(
    message,
  )}</Message><Resource>${xmlEscape(resource)}</Resource><RequestId>${randomBytes(8).toString(
    'hex',
  )}</RequestId></Error>`;
  res.writeHead(status, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** The status and error code S3 answers for a signature failure (S3 names them differently from STS). */
function s3ErrorFor(code: SigV4ErrorCode, message: string): [number, string] {
  switch (code) {
    case 'InvalidClientTokenId':
      return [403, 'InvalidAccessKeyId'];
    case 'RequestExpired':
      return [403, 'RequestTimeTooSkewed'];
    case 'MissingAuthenticationToken':
      return [403, 'AccessDenied'];
    case 'IncompleteSignature':
      return [400, 'AuthorizationHeaderMalformed'];
    default:
      return [403, message.includes('x-amz-content-sha256') ? 'XAmzContentSHA256Mismatch' : code];
  }
}

/** Starts the simulated S3 on 127.0.0.1. */
export async function startS3Sim(options: S3SimOptions = {}): Promise<S3Sim> {
  const credentials = options.credentials ?? [
    {
      accessKeyId: `AKIASIM${randomBytes(6).toString('hex').toUpperCase()}`,
      secretAccessKey: randomBytes(20).toString('base64'),
    },
  ];
  const verify = options.verifySignatures ?? true;
  const buckets = new Map<string, Map<string, SimObject>>();
  for (const name of options.buckets ?? []) buckets.set(name, new Map());
  const counts: Record<string, number> = {};
  let failures = 0;
  const answers = new Map<string, S3SimAnswer>();

  const store = (bucket: string, key: string, data: Buffer) => {
    const objects = buckets.get(bucket);
    if (!objects) throw new Error(`bucket ${bucket} does not exist`);
    objects.set(key, {
      data,
      etag: `"${createHash('md5').update(data).digest('hex')}"`,
      lastModified: new Date(),
    });
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const rawUrl = req.url ?? '/';
    const url = new URL(rawUrl, 'http://s3.local');
    const [, bucketName = '', ...keyParts] = url.pathname.split('/');
    const bucket = decodeURIComponent(bucketName);
    const key = keyParts.map(decodeURIComponent).join('/');
    const method = req.method ?? 'GET';
    const operation =
      key === ''
        ? method === 'GET' && url.searchParams.get('list-type') === '2'
          ? 'ListObjectsV2'
          : `${method} bucket`
        : ((
            { GET: 'GetObject', HEAD: 'HeadObject', PUT: 'PutObject', DELETE: 'DeleteObject' } as Record<
              string,
              string
            >
          )[method] ?? `${method} object`);
    counts[operation] = (counts[operation] ?? 0) + 1;

    if (failures > 0) {
      failures--;
      return sendError(res, 503, 'SlowDown', 'Please reduce your request rate.');
    }
    const body = await readBody(req, 64 * 1024 * 1024);
    if (verify) {
      try {
        verifySigV4(
          { method, url: rawUrl, headers: req.headers, body },
          { lookupSecret: (id) => credentials.find((c) => c.accessKeyId === id), service: 's3' },
        );
      } catch (err) {
        if (!(err instanceof SigV4Error)) throw err;
        const [status, code] = s3ErrorFor(err.awsCode, err.message);
        return sendError(res, status, code, err.message, url.pathname);
      }
    }
    const answer = answers.get(operation);
    if (answer && (await answer(req, res, { bucket, key, url })) !== false) return;
    const objects = buckets.get(bucket);
    if (!objects) return sendError(res, 404, 'NoSuchBucket', 'The specified bucket does not exist', bucket);

    switch (operation) {
      case 'ListObjectsV2': {
        const prefix = url.searchParams.get('prefix') ?? '';
        const maxKeys = Math.min(Number(url.searchParams.get('max-keys') ?? 1000) || 1000, 1000);
        const after = url.searchParams.get('continuation-token') ?? url.searchParams.get('start-after') ?? '';
        const keys = [...objects.keys()].filter((k) => k.startsWith(prefix) && k > after).sort();
        const page = keys.slice(0, maxKeys);
        const truncated = keys.length > page.length;
        const contents = page
          .map((k) => {
            const o = objects.get(k)!;
            return `<Contents><Key>${xmlEscape(k)}</Key><LastModified>${o.lastModified.toISOString()}</LastModified><ETag>${xmlEscape(
              o.etag,
            )}</ETag><Size>${o.data.length}</Size><StorageClass>STANDARD</StorageClass></Contents>`;
          })
          .join('');
        const xml =
          `<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` +
          `<Name>${xmlEscape(bucket)}</Name><Prefix>${xmlEscape(prefix)}</Prefix><KeyCount>${page.length}</KeyCount>` +
          `<MaxKeys>${maxKeys}</MaxKeys><IsTruncated>${truncated}</IsTruncated>${contents}` +
          (truncated ? `<NextContinuationToken>${xmlEscape(page.at(-1)!)}</NextContinuationToken>` : '') +
          `</ListBucketResult>`;
        res.writeHead(200, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(xml) });
        return void res.end(xml);
      }
      case 'GetObject':
      case 'HeadObject': {
        const object = objects.get(key);
        if (!object) {
          if (operation === 'HeadObject') return void res.writeHead(404).end();
          return sendError(res, 404, 'NoSuchKey', 'The specified key does not exist.', key);
        }
        res.writeHead(200, {
          etag: object.etag,
          'last-modified': object.lastModified.toUTCString(),
          'content-length': object.data.length,
          'content-type': 'application/octet-stream',
        });
        return void res.end(operation === 'GetObject' ? object.data : undefined);
      }
      case 'PutObject': {
        store(bucket, key, body);
        res.writeHead(200, { etag: objects.get(key)!.etag, 'content-length': 0 });
        return void res.end();
      }
      case 'DeleteObject': {
        objects.delete(key);
        return void res.writeHead(204).end();
      }
      default:
        return sendError(res, 501, 'NotImplemented', `${operation} is not implemented by the simulator`);
    }
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      if (!res.headersSent) sendError(res, 500, 'InternalError', err.message);
      else res.destroy();
    });
  });
  const listener = await listenOnLoopback(server, options.port ?? 0);

  return {
    endpoint: listener.url,
    credentials: credentials[0]!,
    createBucket: (name) => {
      if (!buckets.has(name)) buckets.set(name, new Map());
    },
    putObject: (bucket, key, data) => store(bucket, key, Buffer.from(data)),
    getObject: (bucket, key) => buckets.get(bucket)?.get(key)?.data,
    deleteObject: (bucket, key) => void buckets.get(bucket)?.delete(key),
    requestCounts: () => ({ ...counts }),
    failNext: (count) => {
      failures = count;
    },
    answerWith: (operation, answer) => {
      if (answer) answers.set(operation, answer);
      else answers.delete(operation);
    },
    close: listener.close,
  };
}
