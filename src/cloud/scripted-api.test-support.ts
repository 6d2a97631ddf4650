/**
 * Test support: a loopback HTTP server whose every answer a test scripts, to play a cloud API that
 * answers wrongly (pages that never end, another instance than the one asked for, error bodies with
 * 200, bodies that are not JSON). Counts the requests it served, so a test can prove a loop ended.
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { listenOnLoopback } from '../net/loopback.ts';

/** One request as the script sees it. */
export interface ScriptedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  /** How many requests were served before this one. */
  served: number;
}

/** One answer: a JSON value (or raw text when `raw`), a status (default 200) and headers. */
export interface ScriptedAnswer {
  status?: number;
  body: unknown;
  raw?: boolean;
  headers?: Record<string, string>;
}

export interface ScriptedApi {
  url: string;
  /** Requests served so far. */
  readonly served: number;
  close(): Promise<void>;
}

/** Starts the server on 127.0.0.1; `script` answers every request. */
export async function startScriptedApi(
  script: (request: ScriptedRequest) => ScriptedAnswer,
): Promise<ScriptedApi> {
  let served = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://scripted');
      let answer: ScriptedAnswer;
      try {
        answer = script({
          method: req.method ?? 'GET',
          path: url.pathname,
          query: url.searchParams,
          headers: req.headers,
          served,
        });
      } catch (err) {
        answer = { status: 500, body: { error: String(err) } };
      }
      served++;
      const text = answer.raw ? String(answer.body) : JSON.stringify(answer.body);
      res.writeHead(answer.status ?? 200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(text),
        ...answer.headers,
      });
      res.end(text);
    });
  });
  const listener = await listenOnLoopback(server);
  return {
    url: listener.url,
    get served() {
      return served;
    },
    close: () => listener.close(),
  };
}
