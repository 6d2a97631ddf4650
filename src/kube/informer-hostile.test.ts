/**
 * The informer against an API server whose answers are wrong: objects of the wrong shape or kind,
 * lists that never end, odd watch events, odd statuses and bodies — over real HTTP on loopback
 * (src/testing/hostile-apiserver.ts). What must hold: no crash, no hang, no unbounded loop, nothing
 * malformed in the cache (skipped or refused with a logged reason), and recovery once the answers
 * are right again.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { Registry } from 'prom-client';
import type { Logger } from '../log.ts';
import {
  answer,
  eventually,
  type HostileHandler,
  hostileApiServer,
  startStream,
  watchLine,
} from '../testing/hostile-apiserver.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { Informer, kubeList, kubeWatch } from './informer.ts';

interface Obj {
  kind?: string;
  metadata: { name: string; namespace?: string; resourceVersion?: string; labels?: Record<string, string> };
}

const node = (name: string, rv: number | string, v = 'a'): Obj => ({
  metadata: { name, resourceVersion: String(rv), labels: { v } },
});
const nodeList = (items: unknown, metadata: unknown = { resourceVersion: '1' }) => ({
  kind: 'NodeList',
  apiVersion: 'v1',
  metadata,
  items,
});

async function withInformer(
  handler: HostileHandler,
  run: (ctx: {
    informer: Informer<Obj>;
    api: Awaited<ReturnType<typeof hostileApiServer>>;
    lines: string[];
    registry: Registry;
    events: string[];
  }) => Promise<void>,
  options: { kind?: string; logger?: Logger; maxStreamMs?: number } = {},
): Promise<void> {
  const api = await hostileApiServer(handler);
  const { logger, lines } = capturedLogger({ level: 'debug' });
  const registry = new Registry();
  const informer = new Informer<Obj>({
    name: 'nodes',
    path: '/api/v1/nodes',
    ...(options.kind ? { kind: options.kind } : {}),
    list: kubeList(api.kubeConfig, '/api/v1/nodes'),
    watch: kubeWatch(api.kubeConfig, options.maxStreamMs ? { maxStreamMs: options.maxStreamMs } : {}),
    backoff: { initialMs: 20, maxMs: 100 },
    registry,
    logger: options.logger ?? logger,
  });
  const events: string[] = [];
  informer.addHandlers({
    add: (o) => events.push(`add ${String(o.metadata.name)}`),
    update: (_, o) => events.push(`update ${String(o.metadata.name)}`),
    delete: (o) => events.push(`delete ${String(o.metadata.name)}`),
  });
  informer.start();
  try {
    await run({ informer, api, lines, registry, events });
  } finally {
    await informer.stop();
    await api.close();
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const lists = (api: { requests: { watch: boolean }[] }) => api.requests.filter((r) => !r.watch).length;
const watches = (api: { requests: { watch: boolean }[] }) => api.requests.filter((r) => r.watch).length;

describe('informer against a hostile API server: lists', () => {
  test('a continue token the server sends again is a paging loop: the list fails (logged, backed off), it is not followed forever', async () => {
    let page = 0;
    await withInformer(
      (req, res) => {
        if (req.watch) return startStream(res);
        page++;
        // New objects on every page, and always the same continue token: without a bound, the list
        // never ends and its objects pile up.
        answer(res, 200, nodeList([node(`n${page}`, 1)], { resourceVersion: '1', continue: 'again' }));
      },
      async ({ informer, api, lines }) => {
        await sleep(1_000);
        assert.equal(informer.hasSynced(), false);
        assert.ok(lists(api) < 60, `${lists(api)} list requests in a second: the loop was followed`);
        assert.ok(
          lines.some((l) => /continue token/.test(l) && /list\/watch failed; retrying/.test(l)),
          'the loop is logged as a failed list',
        );
      },
    );
  });

  test('an empty page with a continue token is followed to the end (a selector may leave a page empty)', async () => {
    await withInformer(
      (req, res) => {
        if (req.watch) return startStream(res);
        const token = req.query.get('continue');
        if (!token) return answer(res, 200, nodeList([], { resourceVersion: '5', continue: 'p2' }));
        if (token === 'p2') return answer(res, 200, nodeList([], { resourceVersion: '5', continue: 'p3' }));
        answer(res, 200, nodeList([node('last', 5)], { resourceVersion: '5' }));
      },
      async ({ informer }) => {
        await eventually(() => informer.hasSynced(), 'the sync');
        assert.deepEqual(informer.keys(), ['last']);
        assert.equal(informer.resourceVersion, '5');
      },
    );
  });

  test('list items that are not objects, or have no usable name, are skipped with a logged reason; the rest is cached', async () => {
    const items = [
      null,
      'a string',
      5,
      ['an', 'array'],
      {},
      { metadata: null },
      { metadata: {} },
      { metadata: { name: '' } },
      { metadata: { name: 5 } },
      { metadata: { name: { not: 'a string' } } },
      { metadata: { name: 'ns-bad', namespace: 7 } },
      { metadata: { name: 'rv-bad', resourceVersion: { a: 1 } } },
      node('good', 1),
    ];
    await withInformer(
      (req, res) => (req.watch ? startStream(res) : answer(res, 200, nodeList(items))),
      async ({ informer, lines, events, registry }) => {
        await eventually(() => informer.hasSynced(), 'the sync despite the malformed items');
        assert.deepEqual(informer.keys(), ['good']);
        assert.deepEqual(events, ['add good']);
        const warning = lines.find((l) => /malformed/.test(l));
        assert.ok(warning, 'the skipped items are logged');
        assert.match(warning, /"skipped":12/);
        const skipped = await registry.getSingleMetric('informer_skipped_objects_total')?.get();
        assert.deepEqual(
          skipped?.values.map((v) => [v.labels, v.value]),
          [[{ resource: 'nodes' }, 12]],
          'and counted, so an alert can see them',
        );
      },
    );
  });

  test('a list whose items is not an array, or whose body is not a list, is a failed list retried until it is one, never a cache of its characters', async () => {
    const bodies: unknown[] = [
      nodeList('abc'),
      nodeList(null),
      nodeList({ 0: node('x', 1) }),
      'null',
      '5',
      '"a string"',
      '[]',
    ];
    let served = 0;
    await withInformer(
      (req, res) => {
        if (req.watch) return startStream(res);
        const body = bodies[served++];
        answer(res, 200, body ?? nodeList([node('healed', 2)], { resourceVersion: '2' }));
      },
      async ({ informer, lines }) => {
        await eventually(() => informer.hasSynced(), 'the sync once the list is a list', 15_000);
        assert.deepEqual(informer.keys(), ['healed']);
        assert.ok(served > bodies.length, 'each bad answer was a failed list');
        assert.ok(!lines.some((l) => /is not iterable|Cannot read properties/.test(l)), 'no TypeError text');
        assert.ok(lines.some((l) => /items is not an array|not a list/.test(l)));
      },
    );
  });

  test('a list of another kind (a PodList answered for nodes) is refused, when the informer knows its kind', async () => {
    let served = 0;
    await withInformer(
      (req, res) => {
        if (req.watch) return startStream(res);
        if (served++ === 0) {
          return answer(res, 200, {
            kind: 'PodList',
            metadata: { resourceVersion: '1' },
            items: [{ metadata: { name: 'p', namespace: 'default', resourceVersion: '1' } }],
          });
        }
        answer(
          res,
          200,
          nodeList([
            { ...node('n1', 2), kind: 'Node' },
            { ...node('p2', 2), kind: 'Pod' },
          ]),
        );
      },
      async ({ informer }) => {
        await eventually(() => informer.hasSynced(), 'the sync once the list is a NodeList');
        assert.deepEqual(informer.keys(), ['n1'], 'an item of another kind is skipped');
      },
      { kind: 'Node' },
    );
  });

  test('a list resourceVersion the server then refuses to watch from (400) is dropped: the informer lists again instead of being refused for ever', async () => {
    let healed = false;
    await withInformer(
      (req, res) => {
        if (!req.watch) {
          return healed
            ? answer(res, 200, nodeList([node('n1', 8, 'b')], { resourceVersion: '8' }))
            : answer(res, 200, nodeList([node('n1', 1)], { resourceVersion: 'not-a-number' }));
        }
        if (req.query.get('resourceVersion') === 'not-a-number') {
          healed = true;
          return answer(res, 400, {
            kind: 'Status',
            code: 400,
            reason: 'BadRequest',
            message: 'invalid resource version: strconv.ParseUint: parsing "not-a-number": invalid syntax',
          });
        }
        startStream(res);
      },
      async ({ informer, api }) => {
        await eventually(
          () => informer.get('n1')?.metadata.labels?.['v'] === 'b',
          'the list after the refusal',
        );
        assert.equal(informer.resourceVersion, '8');
        assert.equal(lists(api), 2);
      },
    );
  });

  for (const retryAfter of [
    '-1',
    'abc',
    '99999999999999999999',
    '3600',
    'Fri, 01 Jan 2100 00:00:00 GMT',
    '',
  ]) {
    test(`a 429 or 503 with Retry-After ${JSON.stringify(retryAfter)} waits at most the backoff's cap`, async () => {
      let refused = 0;
      await withInformer(
        (req, res) => {
          if (refused < 2) {
            refused++;
            res.writeHead(refused === 1 ? 429 : 503, {
              'retry-after': retryAfter,
              'content-type': 'text/html',
            });
            return res.end('<html>slow down</html>');
          }
          if (req.watch) return startStream(res);
          answer(res, 200, nodeList([node('n1', 1)]));
        },
        async ({ informer }) => {
          const started = Date.now();
          await eventually(() => informer.hasSynced(), 'the sync after the refusals', 3_000);
          assert.ok(Date.now() - started < 2_000);
        },
      );
    });
  }

  test('a 200 whose body is not JSON, is truncated, gzip-encoded, protobuf or HTML is a failed list; it recovers when the answers heal', async () => {
    const bad: ((res: import('node:http').ServerResponse) => void)[] = [
      (res) => {
        res.writeHead(200, { 'content-type': 'text/html' });
        res.end('<html><body>proxy error</body></html>');
      },
      (res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"kind":"NodeList","items":[{"metadata":');
      },
      (res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
        res.end(gzipSync(JSON.stringify(nodeList([node('zipped', 1)]))));
      },
      (res) => {
        res.writeHead(200, { 'content-type': 'application/vnd.kubernetes.protobuf' });
        res.end(Buffer.from([0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0f]));
      },
    ];
    let served = 0;
    await withInformer(
      (req, res) => {
        if (req.watch) return startStream(res);
        const next = bad[served++];
        if (next) return next(res);
        answer(res, 200, nodeList([node('healed', 2)], { resourceVersion: '2' }));
      },
      async ({ informer, lines, registry }) => {
        await eventually(() => informer.hasSynced(), 'the sync once the answers heal', 15_000);
        assert.deepEqual(informer.keys(), ['healed']);
        assert.ok(lines.some((l) => /body that is not JSON/.test(l)));
        assert.match(await registry.metrics(), /informer_lists_total\{resource="nodes",result="error"\} 4/);
      },
    );
  });
});

describe('informer against a hostile API server: watch events', () => {
  /** A list of n1 at rv 1, and the watch streams `streams` writes, the n-th for the n-th watch. */
  function streamsHandler(streams: ((res: import('node:http').ServerResponse) => void)[]): HostileHandler {
    let watch = 0;
    return (req, res) => {
      if (!req.watch) return answer(res, 200, nodeList([node('n1', 1)]));
      startStream(res);
      streams[watch++]?.(res);
    };
  }

  test('an event whose object is of another kind ends the stream and is not cached; the watch resumes from the last applied event', async () => {
    await withInformer(
      streamsHandler([
        (res) => {
          res.write(watchLine('MODIFIED', { ...node('n1', 2, 'b'), kind: 'Node' }));
          res.write(
            watchLine('ADDED', {
              kind: 'Pod',
              apiVersion: 'v1',
              metadata: { name: 'p', namespace: 'default', resourceVersion: '3' },
            }),
          );
        },
        (res) => res.write(watchLine('ADDED', { ...node('n2', 4), kind: 'Node' })),
      ]),
      async ({ informer, api, lines }) => {
        await eventually(() => informer.get('n2') !== undefined, 'the next stream');
        assert.deepEqual(informer.keys().sort(), ['n1', 'n2']);
        assert.equal(informer.get('n1')?.metadata.labels?.['v'], 'b');
        assert.deepEqual(
          api.requests.filter((r) => r.watch).map((r) => r.query.get('resourceVersion')),
          ['1', '2', '4'].slice(0, watches(api)),
        );
        assert.ok(lines.some((l) => /an object of kind \\"Pod\\", not Node/.test(l)));
      },
      { kind: 'Node' },
    );
  });

  test('an event whose object has no usable name (missing, empty, not a string) ends the stream and is not cached', async () => {
    const bad: unknown[] = [
      { metadata: { resourceVersion: '2' } },
      { metadata: { name: '', resourceVersion: '2' } },
      { metadata: { name: 5, resourceVersion: '2' } },
      { metadata: { name: { x: 1 }, resourceVersion: '2' } },
      { metadata: { name: 'n9', namespace: [], resourceVersion: '2' } },
      { metadata: { name: 'n9', resourceVersion: 2 } },
    ];
    await withInformer(
      streamsHandler([
        ...bad.map((object) => (res: import('node:http').ServerResponse) => {
          res.write(watchLine('ADDED', object));
        }),
        (res) => res.write(watchLine('ADDED', node('n2', 3))),
      ]),
      async ({ informer, api }) => {
        await eventually(() => informer.get('n2') !== undefined, 'the stream after the damaged ones');
        assert.deepEqual(informer.keys().sort(), ['n1', 'n2']);
        assert.equal(watches(api) >= bad.length + 1, true);
        assert.ok(
          api.requests
            .filter((r) => r.watch)
            .every((r) => r.query.get('resourceVersion') === '1' || r.query.get('resourceVersion') === '3'),
          'every damaged stream resumed from the last applied event',
        );
      },
    );
  });

  test('a BOOKMARK whose resourceVersion is missing or not a string is ignored: the informer resumes from the last good one', async () => {
    await withInformer(
      streamsHandler([
        (res) => {
          res.write(watchLine('BOOKMARK', { metadata: { resourceVersion: '5' } }));
          res.write(watchLine('BOOKMARK', { metadata: {} }));
          res.write(watchLine('BOOKMARK', { metadata: { resourceVersion: { a: 1 } } }));
          res.write(watchLine('BOOKMARK', { metadata: { resourceVersion: 6 } }));
          res.write(watchLine('BOOKMARK', { metadata: { resourceVersion: '' } }));
          setTimeout(() => res.end(), 50);
        },
      ]),
      async ({ informer, api }) => {
        await eventually(() => watches(api) >= 2, 'the resumed watch');
        assert.equal(informer.resourceVersion, '5');
        assert.equal(api.requests.filter((r) => r.watch)[1]?.query.get('resourceVersion'), '5');
      },
    );
  });

  test('MODIFIED of an object never added is an add, DELETED of an unknown object changes nothing, a decreasing bookmark is followed', async () => {
    await withInformer(
      streamsHandler([
        (res) => {
          res.write(watchLine('MODIFIED', node('n7', 5)));
          res.write(watchLine('DELETED', node('ghost', 6)));
          res.write(watchLine('BOOKMARK', { metadata: { resourceVersion: '3' } }));
          setTimeout(() => res.end(), 50);
        },
      ]),
      async ({ informer, api, events }) => {
        await eventually(() => watches(api) >= 2, 'the resumed watch');
        assert.deepEqual(informer.keys().sort(), ['n1', 'n7']);
        assert.deepEqual(events, ['add n1', 'add n7']);
        assert.equal(api.requests.filter((r) => r.watch)[1]?.query.get('resourceVersion'), '3');
      },
    );
  });

  test('ERROR events with odd Status bodies are watch failures backed off; a 410 without a reason re-lists', async () => {
    const errors: unknown[] = [
      null,
      { code: 'not a number' },
      { kind: 'Status', code: '410' },
      { kind: 'Status', message: { nested: true } },
      'a string',
    ];
    await withInformer(
      streamsHandler([
        ...errors.map((object) => (res: import('node:http').ServerResponse) => {
          res.write(watchLine('ERROR', object));
        }),
        (res) => res.write(watchLine('ERROR', { code: 410 })),
      ]),
      async ({ api, registry, informer }) => {
        await eventually(() => lists(api) >= 2, 'the re-list after the 410');
        const metrics = await registry.metrics();
        assert.match(metrics, new RegExp(`reason="error"\\} ${errors.length}`));
        assert.match(metrics, /reason="gone"\} 1/);
        assert.equal(informer.hasSynced(), true);
      },
    );
  });

  test('an event of unknown type, a protobuf or gzip-encoded stream are damaged lines: the watch resumes, nothing applied', async () => {
    await withInformer(
      streamsHandler([
        (res) => res.write(watchLine('EXPLODED', node('n1', 2, 'x'))),
        (res) => res.write(Buffer.from([0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0a, 0x0a])),
        (res) => res.end(gzipSync(watchLine('ADDED', node('z', 2)))),
        (res) => res.write(watchLine('ADDED', node('n2', 3))),
      ]),
      async ({ informer }) => {
        await eventually(() => informer.get('n2') !== undefined, 'the healthy stream');
        assert.deepEqual(informer.keys().sort(), ['n1', 'n2']);
        assert.equal(informer.get('n1')?.metadata.labels?.['v'], 'a');
      },
    );
  });

  test('a stream that trickles bytes and never a whole line is not kept open for ever: it ends past its lifetime and is reopened', async () => {
    const timers: NodeJS.Timeout[] = [];
    await withInformer(
      streamsHandler([
        (res) => {
          // A byte every 50 ms: the idle timeout (90 s) never fires, and no line ever completes.
          timers.push(setInterval(() => res.write(' '), 50));
        },
        (res) => res.write(watchLine('ADDED', node('n2', 3))),
      ]),
      async ({ informer, api, registry }) => {
        try {
          await eventually(() => informer.get('n2') !== undefined, 'the reopened stream', 5_000);
        } finally {
          for (const timer of timers) clearInterval(timer);
        }
        assert.equal(watches(api), 2);
        assert.match(
          await registry.metrics(),
          /informer_watch_restarts_total\{resource="nodes",reason="timeout"\} 1/,
        );
      },
      { maxStreamMs: 500 },
    );
  });

  test('Node and label names such as __proto__ and constructor are keys like any other', async () => {
    const proto = JSON.parse(
      '{"metadata":{"name":"__proto__","resourceVersion":"1","labels":{"__proto__":"x"}}}',
    );
    await withInformer(
      (req, res) =>
        req.watch
          ? startStream(res)
          : answer(res, 200, nodeList([proto, node('constructor', 1), node('toString', 1)])),
      async ({ informer }) => {
        await eventually(() => informer.hasSynced(), 'the sync');
        assert.deepEqual(informer.keys().sort(), ['__proto__', 'constructor', 'toString']);
        assert.equal(informer.get('__proto__')?.metadata.name, '__proto__');
        assert.equal(informer.get('hasOwnProperty'), undefined);
      },
    );
  });

  test('a flood of tiny events is applied without starving the event loop, and the cache stays bounded', async () => {
    const total = 100_000;
    await withInformer(
      streamsHandler([
        (res) => {
          let i = 0;
          const pump = () => {
            while (i < total) {
              const batch: string[] = [];
              for (let j = 0; j < 1000 && i < total; j++, i++) {
                batch.push(watchLine('MODIFIED', node(`n${i % 10}`, i + 2)));
              }
              if (!res.write(batch.join(''))) return void res.once('drain', pump);
            }
          };
          pump();
        },
      ]),
      async ({ informer }) => {
        let maxLag = 0;
        let last = performance.now();
        const timer = setInterval(() => {
          const now = performance.now();
          maxLag = Math.max(maxLag, now - last - 10);
          last = now;
        }, 10);
        try {
          await eventually(() => informer.resourceVersion === String(total + 1), 'every event', 20_000);
        } finally {
          clearInterval(timer);
        }
        assert.equal(informer.size, 10);
        assert.ok(maxLag < 500, `a timer waited ${Math.round(maxLag)} ms behind the flood`);
      },
    );
  });
});
