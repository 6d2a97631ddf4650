/**
 * A small Google Cloud Storage JSON API server for the state-store tests and `kops-controller dev`:
 * objects get (metadata, or `alt=media`), insert (`uploadType=media`), list with prefix and paging,
 * and delete, with a `generation` that changes on every write. It listens on loopback only.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { listenOnLoopback } from '../../net/loopback.ts';
import { readBody } from '../../net/read-body.ts';

/** Options of the simulated GCS. */
export interface GcsSimOptions {
  port?: number;
  /** Buckets that exist from the start. */
  buckets?: string[];
  /** When set, every request must carry `Authorization: Bearer <token>`. */
  token?: string;
}

interface SimObject {
  data: Buffer;
  generation: string;
  updated: Date;
}

/** A running simulated GCS and the helpers tests use to seed and inspect it. */
export interface GcsSim {
  /** Base URL to use instead of `https://storage.googleapis.com`. */
  endpoint: string;
  createBucket(name: string): void;
  putObject(bucket: string, name: string, data: Buffer | string): void;
  getObject(bucket: string, name: string): Buffer | undefined;
  deleteObject(bucket: string, name: string): void;
  /** How many requests each operation served (`objects.get`, `objects.list`, ...). */
  requestCounts(): Record<string, number>;
  /** Makes the next `count` requests fail with a 503, for failure tests. */
  failNext(count: number): void;
  /**
   * Answers every authorised request of `operation` (`objects.list`, `objects.get`, …) with `answer`
   * instead, until cleared with undefined: a broken store or proxy, for the tests of what the
   * controller believes. An answer that returns false lets the simulator answer as usual.
   */
  answerWith(operation: string, answer: GcsSimAnswer | undefined): void;
  close(): Promise<void>;
}

/** A test's own answer to one request (see {@link GcsSim.answerWith}); false: answer as usual. */
export type GcsSimAnswer = (req: IncomingMessage, res: ServerResponse, url: URL) => unknown;

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=UTF-8',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

function sendError(res: ServerResponse, status: number, message: string): void {
  sendJson(res, status, { error: { code: status, message, errors: [{ message, domain: 'global' }] } });
}

/** Starts the simulated GCS on 127.0.0.1. */
export async function startGcsSim(options: GcsSimOptions = {}): Promise<GcsSim> {
  const buckets = new Map<string, Map<string, SimObject>>();
  for (const name of options.buckets ?? []) buckets.set(name, new Map());
  const counts: Record<string, number> = {};
  let failures = 0;
  const answers = new Map<string, GcsSimAnswer>();
  // Real generations are microsecond timestamps; a counter from "now" keeps them unique and increasing.
  let lastGeneration = BigInt(Date.now()) * 1000n;

  const store = (bucket: string, name: string, data: Buffer): SimObject => {
    const objects = buckets.get(bucket);
    if (!objects) throw new Error(`bucket ${bucket} does not exist`);
    lastGeneration += 1n;
    const object = { data, generation: String(lastGeneration), updated: new Date() };
    objects.set(name, object);
    return object;
  };

  const metadata = (bucket: string, name: string, o: SimObject) => ({
    kind: 'storage#object',
    id: `${bucket}/${name}/${o.generation}`,
    name,
    bucket,
    generation: o.generation,
    metageneration: '1',
    contentType: 'application/octet-stream',
    size: String(o.data.length),
    md5Hash: createHash('md5').update(o.data).digest('base64'),
    etag: randomBytes(6).toString('base64'),
    updated: o.updated.toISOString(),
  });

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://gcs.local');
    const method = req.method ?? 'GET';
    const match = /^\/(upload\/)?storage\/v1\/b\/([^/]+)\/o(?:\/(.+))?$/.exec(url.pathname);
    const operation = !match
      ? 'unknown'
      : match[1]
        ? 'objects.insert'
        : match[3] === undefined
          ? method === 'GET'
            ? 'objects.list'
            : 'unknown'
          : method === 'GET'
            ? 'objects.get'
            : method === 'DELETE'
              ? 'objects.delete'
              : 'unknown';
    counts[operation] = (counts[operation] ?? 0) + 1;
    if (failures > 0) {
      failures--;
      return sendError(res, 503, 'Backend Error');
    }
    if (options.token !== undefined && req.headers.authorization !== `Bearer ${options.token}`) {
      return sendError(res, 401, 'Invalid Credentials');
    }
    const answer = answers.get(operation);
    if (answer && (await answer(req, res, url)) !== false) return;
    if (!match || operation === 'unknown')
      return sendError(res, 404, `no such API: ${method} ${url.pathname}`);
    const bucket = decodeURIComponent(match[2]!);
    const objects = buckets.get(bucket);
    if (!objects) return sendError(res, 404, 'The specified bucket does not exist.');

    switch (operation) {
      case 'objects.insert': {
        const name = url.searchParams.get('name');
        if (url.searchParams.get('uploadType') !== 'media' || !name) {
          return sendError(res, 400, 'only uploadType=media with a name is supported');
        }
        const object = store(bucket, name, await readBody(req, 64 * 1024 * 1024));
        return sendJson(res, 200, metadata(bucket, name, object));
      }
      case 'objects.list': {
        const prefix = url.searchParams.get('prefix') ?? '';
        const maxResults = Math.min(Number(url.searchParams.get('maxResults') ?? 1000) || 1000, 1000);
        const after = url.searchParams.get('pageToken') ?? '';
        const names = [...objects.keys()].filter((n) => n.startsWith(prefix) && n > after).sort();
        const page = names.slice(0, maxResults);
        return sendJson(res, 200, {
          kind: 'storage#objects',
          items: page.map((n) => metadata(bucket, n, objects.get(n)!)),
          ...(names.length > page.length ? { nextPageToken: page.at(-1) } : {}),
        });
      }
      case 'objects.get': {
        const name = decodeURIComponent(match[3]!);
        const object = objects.get(name);
        if (!object) return sendError(res, 404, `No such object: ${bucket}/${name}`);
        if (url.searchParams.get('alt') === 'media') {
          res.writeHead(200, {
            'content-type': 'application/octet-stream',
            'content-length': object.data.length,
            'x-goog-generation': object.generation,
            'x-goog-metageneration': '1',
          });
          return void res.end(object.data);
        }
        return sendJson(res, 200, metadata(bucket, name, object));
      }
      default: {
        const name = decodeURIComponent(match[3]!);
        if (!objects.delete(name)) return sendError(res, 404, `No such object: ${bucket}/${name}`);
        return void res.writeHead(204).end();
      }
    }
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      if (!res.headersSent) sendError(res, 500, err.message);
      else res.destroy();
    });
  });
  const listener = await listenOnLoopback(server, options.port ?? 0);

  return {
    endpoint: listener.url,
    createBucket: (name) => {
      if (!buckets.has(name)) buckets.set(name, new Map());
    },
    putObject: (bucket, name, data) => void store(bucket, name, Buffer.from(data)),
    getObject: (bucket, name) => buckets.get(bucket)?.get(name)?.data,
    deleteObject: (bucket, name) => void buckets.get(bucket)?.delete(name),
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
