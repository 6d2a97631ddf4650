/**
 * The state store's answers treated as untrusted: each backend against its simulator over a real
 * socket, the simulator answering as a broken S3-compatible store, a proxy or an eventually
 * consistent replica would (listings that never end, keys outside the prefix, bodies cut short or
 * endless, errors inside a 200). Nothing may loop for ever, hold unbounded memory, or turn such an
 * answer into a kops object, a name of this cluster or a label.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { after, describe, test } from 'node:test';
import { OAuth2Client } from 'google-auth-library';
import { InvalidInputError, KopsError, NotFoundError, UnavailableError } from '../errors.ts';
import { startBlobStorageSimulator } from '../sim/azure/blob.ts';
import { startAzureSimulator } from '../sim/azure/simulator.ts';
import { startGcsSim } from '../sim/gcs/server.ts';
import { startOpenStackSimulator } from '../sim/openstack/simulator.ts';
import { startS3Sim } from '../sim/s3/server.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { outcomeWithin } from '../testing/silent-server.ts';
import { ClusterStore, type ClusterStoreOptions } from './cluster-store.ts';
import { GcsVfs } from './gcs-vfs.ts';
import { olderCopyGraceMs } from './older-copy.ts';
import { openVfs } from './open.ts';
import { S3Vfs } from './s3-vfs.ts';
import { maxObjectBytes, type Vfs } from './types.ts';

const s3 = await startS3Sim({ buckets: ['state'] });
const gcs = await startGcsSim({ buckets: ['state'], token: 'good-token' });
const openstack = await startOpenStackSimulator();
openstack.swift.createContainer('state');
const azure = await startAzureSimulator();
const blob = await startBlobStorageSimulator({ validToken: (token) => azure.validToken(token) });
blob.createContainer('kopsstate', 'state');
after(() => Promise.all([s3.close(), gcs.close(), openstack.close(), azure.close(), blob.close()]));

type Answer = (req: IncomingMessage, res: ServerResponse) => unknown;

/** One backend: how to open it at `s3://state/<root>` (or its own scheme), and how to fake its answers. */
interface Backend {
  name: string;
  open(root: string, options?: { pageSize?: number }): Vfs;
  /** Puts `answer` in place for the listing, the read or the version of an object (undefined: clears). */
  answer(operation: 'list' | 'read' | 'stat', answer: Answer | undefined): void;
  /** A listing page holding `keys` (full keys, as the store holds them), continued by `next`. */
  page(res: ServerResponse, keys: string[], next?: string): void;
  /** Seeds an object. */
  put(key: string, data: Buffer | string): void;
}

const gcsAuth = new OAuth2Client();
gcsAuth.setCredentials({ access_token: 'good-token', expiry_date: Date.now() + 3_600_000 });

const xmlEscape = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function send(res: ServerResponse, type: string, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(200, { 'content-type': type, 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

const backends: Backend[] = [
  {
    name: 'S3',
    open: (root) =>
      new S3Vfs(new URL(`s3://state/${root}`), {
        endpoint: s3.endpoint,
        region: 'us-test-1',
        credentials: s3.credentials,
        timeoutMs: 4_000,
      }),
    answer: (operation, answer) =>
      s3.answerWith(
        { list: 'ListObjectsV2', read: 'GetObject', stat: 'HeadObject' }[operation],
        answer && ((req, res) => answer(req, res)),
      ),
    page: (res, keys, next) =>
      send(
        res,
        'application/xml',
        '<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' +
          `<Name>state</Name><KeyCount>${keys.length}</KeyCount><MaxKeys>1000</MaxKeys>` +
          `<IsTruncated>${next !== undefined}</IsTruncated>` +
          keys.map((k) => `<Contents><Key>${xmlEscape(k)}</Key><Size>1</Size></Contents>`).join('') +
          (next !== undefined ? `<NextContinuationToken>${xmlEscape(next)}</NextContinuationToken>` : '') +
          '</ListBucketResult>',
      ),
    put: (key, data) => s3.putObject('state', key, data),
  },
  {
    name: 'GCS',
    open: (root) =>
      new GcsVfs(new URL(`gs://state/${root}`), { endpoint: gcs.endpoint, auth: gcsAuth, timeoutMs: 4_000 }),
    answer: (operation, answer) =>
      gcs.answerWith(
        operation === 'list' ? 'objects.list' : 'objects.get',
        answer &&
          ((req, res, url) =>
            // A read is `alt=media`, a version the object's metadata: each answers only its own.
            operation === 'list' || (url.searchParams.get('alt') === 'media') === (operation === 'read')
              ? answer(req, res)
              : false),
      ),
    page: (res, keys, next) =>
      send(
        res,
        'application/json',
        JSON.stringify({ items: keys.map((name) => ({ name })), ...(next ? { nextPageToken: next } : {}) }),
      ),
    put: (key, data) => gcs.putObject('state', key, data),
  },
  {
    name: 'Swift',
    open: (root, options = {}) =>
      openVfs(`swift://state/${root}`, {
        env: openstack.env,
        swift: {
          timeoutMs: 4_000,
          retryDelayMs: 1,
          ...(options.pageSize ? { pageSize: options.pageSize } : {}),
        },
      }),
    answer: (operation, answer) =>
      openstack.swift.answerWith(
        { list: 'swift.container.list', read: 'swift.object.get', stat: 'swift.object.head' }[operation],
        answer && ((req, res) => answer(req, res)),
      ),
    // Swift pages by marker: a full page (of the page size asked) is continued, `next` is not used.
    page: (res, keys) => send(res, 'application/json', JSON.stringify(keys.map((name) => ({ name })))),
    put: (key, data) => openstack.swift.putObject('state', key, data),
  },
  {
    name: 'Azure Blob',
    open: (root, options = {}) =>
      openVfs(`azureblob://kopsstate/state/${root}`, {
        env: { KOPS_AZURE_BLOB_ENDPOINT: blob.endpoint },
        azureBlob: {
          credential: azure.credential,
          caPem: blob.caPem,
          timeoutMs: 4_000,
          retryDelayMs: 1,
          ...(options.pageSize ? { pageSize: options.pageSize } : {}),
        },
      }),
    answer: (operation, answer) =>
      blob.answerWith(
        { list: 'blob.list', read: 'blob.get', stat: 'blob.properties' }[operation],
        answer && ((req, res) => answer(req, res)),
      ),
    page: (res, keys, next) =>
      send(
        res,
        'application/xml',
        '<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="https://127.0.0.1/kopsstate/" ContainerName="state">' +
          `<MaxResults>5000</MaxResults><Blobs>${keys
            .map(
              (k) =>
                `<Blob><Name>${xmlEscape(k)}</Name><Properties><Etag>0x1</Etag><Content-Length>1</Content-Length>` +
                '<BlobType>BlockBlob</BlobType></Properties></Blob>',
            )
            .join('')}</Blobs>` +
          (next ? `<NextMarker>${xmlEscape(next)}</NextMarker>` : '<NextMarker />') +
          '</EnumerationResults>',
        { 'x-ms-version': '2025-11-05' },
      ),
    put: (key, data) => blob.putBlob('kopsstate', 'state', key, data),
  },
];

/** The error `work` ends with within `ms`; fails the test when it hangs or succeeds. */
async function failureWithin(work: Promise<unknown>, ms: number, what: string): Promise<unknown> {
  const outcome = await outcomeWithin(work, ms);
  assert.equal(outcome.pending, false, `${what}: still running after ${ms} ms`);
  assert.ok(outcome.pending === false && 'error' in outcome && outcome.error, `${what}: succeeded`);
  return (outcome as { error: unknown }).error;
}

const isKind = (err: unknown, kind: string) => err instanceof KopsError && err.kind === kind;

for (const backend of backends) {
  describe(`${backend.name}: a broken store's listings`, () => {
    test('a continuation token (or marker) that repeats ends the listing with an error, not an endless loop', async () => {
      let pages = 0;
      const vfs = backend.open('loop.example.com', { pageSize: 2 });
      backend.answer('list', (_req, res) => {
        pages++;
        backend.page(res, ['loop.example.com/instancegroup/a', 'loop.example.com/instancegroup/b'], 'same');
      });
      try {
        const err = await failureWithin(vfs.list('instancegroup/'), 8_000, 'the listing');
        assert.ok(isKind(err, 'unavailable'), String(err));
        assert.match((err as Error).message, /repeat/);
        assert.ok(pages <= 3, `${pages} pages were asked for`);
      } finally {
        backend.answer('list', undefined);
      }
    });

    test('a listing that goes on for ever (a new token each page) stops at a page limit', async () => {
      let pages = 0;
      const vfs = backend.open('endless.example.com', { pageSize: 2 });
      backend.answer('list', (_req, res) => {
        pages++;
        // S3, GCS and Azure: an empty page that says there is more; Swift: a full page each time.
        const keys =
          backend.name === 'Swift'
            ? [`endless.example.com/instancegroup/${pages}a`, `endless.example.com/instancegroup/${pages}b`]
            : [];
        backend.page(res, keys, `token-${pages}`);
      });
      try {
        const err = await failureWithin(vfs.list('instancegroup/'), 60_000, 'the listing');
        assert.ok(isKind(err, 'unavailable'), String(err));
        assert.match((err as Error).message, /pages/);
      } finally {
        backend.answer('list', undefined);
      }
    });

    test("a key outside the prefix asked for (another cluster's instance group) refuses the listing", async () => {
      // Same length as this cluster's root: today's slicing would make it `instancegroup/gpu`.
      const vfs = backend.open('c1.example.com');
      backend.answer('list', (_req, res) =>
        backend.page(res, ['c1.example.com/instancegroup/nodes', 'c2.example.com/instancegroup/gpu']),
      );
      try {
        const err = await failureWithin(vfs.list('instancegroup/'), 8_000, 'the listing');
        assert.ok(isKind(err, 'unavailable'), String(err));
        assert.match((err as Error).message, /c2\.example\.com\/instancegroup\/gpu/);
        assert.match((err as Error).message, /outside/);
      } finally {
        backend.answer('list', undefined);
      }
    });

    test('keys with "..", "." or empty segments are left out, and a key listed twice is listed once', async () => {
      const vfs = backend.open('c1.example.com');
      backend.answer('list', (_req, res) =>
        backend.page(res, [
          'c1.example.com/instancegroup/nodes',
          'c1.example.com/instancegroup/nodes',
          'c1.example.com/instancegroup/..',
          'c1.example.com/instancegroup/../../c2.example.com/instancegroup/gpu',
          'c1.example.com/instancegroup//gpu',
          'c1.example.com/instancegroup/./gpu',
        ]),
      );
      try {
        assert.deepEqual(await vfs.list('instancegroup/'), ['instancegroup/nodes']);
      } finally {
        backend.answer('list', undefined);
      }
    });
  });

  describe(`${backend.name}: a broken store's objects`, () => {
    test('a body cut short (fewer bytes than Content-Length, then the connection closes) is an outage, never a shorter object', async () => {
      const vfs = backend.open('short.example.com');
      backend.put('short.example.com/instancegroup/nodes', 'x');
      const whole = Buffer.from('kind: InstanceGroup\nspec:\n  nodeLabels:\n    a: b\n    c: d\n');
      backend.answer('read', (_req, res) => {
        res.writeHead(200, {
          'content-length': whole.length,
          'content-type': 'application/octet-stream',
          etag: '"0x8D000000000001"',
          'x-ms-version': '2025-11-05',
          'x-goog-generation': '1',
        });
        res.write(whole.subarray(0, 30));
        setTimeout(() => res.socket?.destroy(), 50);
      });
      try {
        const err = await failureWithin(vfs.read('instancegroup/nodes'), 10_000, 'the read');
        assert.ok(isKind(err, 'unavailable') || isKind(err, 'timeout'), String(err));
      } finally {
        backend.answer('read', undefined);
      }
    });

    for (const announced of [3 * 1024 ** 3, undefined]) {
      // Azure's SDK refuses an answer without a length by itself.
      if (announced === undefined && backend.name === 'Azure Blob') continue;
      test(`an endless object (${announced ? 'a multi-GB Content-Length' : 'no Content-Length'}) is refused past the size limit, without holding it all`, async () => {
        const vfs = backend.open('huge.example.com');
        backend.put('huge.example.com/instancegroup/nodes', 'x');
        let sent = 0;
        const chunk = Buffer.alloc(1024 * 1024, 'a');
        backend.answer('read', (_req, res) => {
          // Without Content-Length the size shows only as the bytes come (a multi-GB object, or a proxy).
          res.writeHead(200, {
            ...(announced ? { 'content-length': String(announced) } : {}),
            'content-type': 'application/octet-stream',
            etag: '"0x8D000000000001"',
            'x-ms-version': '2025-11-05',
            'x-goog-generation': '1',
          });
          const pump = () => {
            while (!res.destroyed && sent < 4 * maxObjectBytes) {
              sent += chunk.length;
              if (!res.write(chunk)) return void res.once('drain', pump);
            }
          };
          res.on('close', () => undefined);
          pump();
        });
        try {
          const err = await failureWithin(vfs.read('instancegroup/nodes'), 20_000, 'the read');
          assert.ok(isKind(err, 'too-large'), String(err));
          assert.match((err as Error).message, /huge\.example\.com\/instancegroup\/nodes/);
          assert.ok(sent < 4 * maxObjectBytes, `the whole ${sent} bytes were sent`);
        } finally {
          backend.answer('read', undefined);
        }
      });
    }
  });
}

describe('S3: answers only S3 gives', () => {
  test('IsTruncated true without a continuation token is an error, not a silently shorter listing', async () => {
    const vfs = backends[0]!.open('notoken.example.com');
    s3.answerWith('ListObjectsV2', (_req, res) => {
      send(
        res,
        'application/xml',
        '<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' +
          '<Name>state</Name><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>' +
          '<Contents><Key>notoken.example.com/instancegroup/a</Key></Contents></ListBucketResult>',
      );
      return true;
    });
    try {
      const err = await failureWithin(vfs.list('instancegroup/'), 8_000, 'the listing');
      assert.ok(isKind(err, 'unavailable'), String(err));
      assert.match((err as Error).message, /truncated/);
    } finally {
      s3.answerWith('ListObjectsV2', undefined);
    }
  });
});

for (const backend of backends) {
  describe(`${backend.name}: an error inside a 200`, () => {
    test('a listing answered 200 with an error body is an outage, not an empty listing', async () => {
      const vfs = backend.open('err200.example.com');
      backend.answer('list', (_req, res) => {
        if (backend.name === 'GCS' || backend.name === 'Swift') {
          send(res, 'application/json', JSON.stringify({ error: { code: 503, message: 'Backend Error' } }));
        } else {
          send(
            res,
            'application/xml',
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>',
            { 'x-ms-version': '2025-11-05' },
          );
        }
      });
      try {
        const err = await failureWithin(vfs.list('instancegroup/'), 8_000, 'the listing');
        assert.ok(isKind(err, 'unavailable'), String(err));
      } finally {
        backend.answer('list', undefined);
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------
// What ClusterStore makes of such answers (over S3, the backend kops uses most).

const clusterYaml = `apiVersion: kops.k8s.io/v1alpha2
kind: Cluster
metadata:
  name: c.example.com
spec:
  cloudProvider: aws
  kubernetesVersion: 1.30.0
`;
const igYaml = (name: string, extra = '') => `apiVersion: kops.k8s.io/v1alpha2
kind: InstanceGroup
metadata:
  name: ${name}
spec:
  role: Node
  nodeLabels:
    team: ${name}
${extra}`;

let clusters = 0;
/** A fresh cluster in the S3 simulator, with the groups given, and its store. */
function s3Cluster(
  groups: Record<string, string>,
  options: ClusterStoreOptions = {},
): { root: string; store: ClusterStore } {
  const root = `cs${++clusters}.example.com`;
  s3.putObject('state', `${root}/config`, clusterYaml);
  for (const [name, text] of Object.entries(groups))
    s3.putObject('state', `${root}/instancegroup/${name}`, text);
  return { root, store: new ClusterStore(backends[0]!.open(root), options) };
}

describe('ClusterStore over a broken S3', () => {
  test('an instance group listed but gone when read (deleted in between, or a lagging listing) is left out, not a failure of them all', async () => {
    const { root, store } = s3Cluster({ a: igYaml('a'), b: igYaml('b') });
    s3.answerWith('ListObjectsV2', (_req, res) =>
      backends[0]!.page(res, [
        `${root}/instancegroup/a`,
        `${root}/instancegroup/b`,
        `${root}/instancegroup/gone`,
      ]),
    );
    try {
      const groups = await store.instanceGroups();
      assert.deepEqual(
        groups.map((g) => g.metadata.name),
        ['a', 'b'],
      );
    } finally {
      s3.answerWith('ListObjectsV2', undefined);
    }
  });

  test('kops objects of the wrong kind, apiVersion or field types, or naming another group, are refused naming the file; the last good one stays', async () => {
    const bad: Record<string, string> = {
      'role-number': igYaml('role-number').replace('role: Node', 'role: 3'),
      'labels-number': igYaml('labels-number', '    gpu: 1\n'),
      'labels-map': igYaml('labels-map', '    gpu: {a: b}\n'),
      'taints-string': igYaml('taints-string', '  taints: "dedicated=gpu:NoSchedule"\n'),
      'taints-numbers': igYaml('taints-numbers', '  taints: [1, 2]\n'),
      'kind-cluster': igYaml('kind-cluster').replace('kind: InstanceGroup', 'kind: Cluster'),
      'kind-pod': igYaml('kind-pod').replace('kind: InstanceGroup', 'kind: Pod'),
      'api-v1': igYaml('api-v1').replace('kops.k8s.io/v1alpha2', 'v1'),
      'name-other': igYaml('nodes'),
      'two-groups': `${igYaml('two-groups')}---\n${igYaml('two-groups')}`,
      'name-number': igYaml('name-number').replace('name: name-number', 'name: 7'),
      'metadata-list': igYaml('metadata-list').replace(/metadata:\n {2}name: metadata-list/, 'metadata: [a]'),
    };
    const { root, store } = s3Cluster({ ...bad, nodes: igYaml('nodes') });
    for (const name of Object.keys(bad)) {
      await assert.rejects(
        store.instanceGroup(name),
        (err: unknown) =>
          err instanceof InvalidInputError &&
          err.message.includes(`s3://state/${root}/instancegroup/${name}`),
        name,
      );
    }
    // `name-other` claims group `nodes`: group `nodes` is still its own file's.
    assert.equal((await store.instanceGroup('nodes')).spec.nodeLabels?.['team'], 'nodes');
    // A good group edited into each bad shape keeps its last good version, the failure reported.
    const errors: string[] = [];
    store.on('readError', (e) => errors.push(e.error.message));
    // (The bad names cannot be renamed `nodes` and stay bad; the rest can.)
    const edits = Object.entries(bad).filter(
      ([name]) => !['name-other', 'name-number', 'metadata-list'].includes(name),
    );
    for (const [, text] of edits) {
      s3.putObject('state', `${root}/instancegroup/nodes`, text.replace(/name: [\w-]+\n/, 'name: nodes\n'));
      await store.refresh();
      assert.equal((await store.instanceGroup('nodes')).spec.nodeLabels?.['team'], 'nodes');
    }
    assert.equal(errors.length, edits.length, errors.join('\n'));
    assert.ok(errors.every((message) => message.includes(`s3://state/${root}/instancegroup/nodes`)));
  });

  test('an instance group that is not UTF-8 is refused naming the file, as kops refuses it', async () => {
    const latin1 = Buffer.concat([
      Buffer.from(igYaml('latin')),
      Buffer.from('  # caf'),
      Buffer.from([0xe9]),
      Buffer.from('\n'),
    ]);
    const { root, store } = s3Cluster({ latin: latin1.toString('latin1') });
    s3.putObject('state', `${root}/instancegroup/latin`, latin1);
    await assert.rejects(
      store.instanceGroup('latin'),
      (err: unknown) =>
        err instanceof InvalidInputError &&
        /UTF-8/.test(err.message) &&
        err.message.includes(`s3://state/${root}/instancegroup/latin`),
    );
  });

  test('a version that goes back to an older object (a lagging replica) does not bring back its labels', async () => {
    const { root, store } = s3Cluster({ nodes: igYaml('nodes') });
    const key = `${root}/instancegroup/nodes`;
    const older = { data: igYaml('nodes'), lastModified: new Date(Date.now() - 60_000) };
    s3.putObject('state', key, igYaml('nodes', '    edited: "yes"\n'));
    assert.equal((await store.instanceGroup('nodes')).spec.nodeLabels?.['edited'], 'yes');
    // A replica that lags: the object's older version, its older ETag and Last-Modified.
    const etag = `"${(await import('node:crypto')).createHash('md5').update(older.data).digest('hex')}"`;
    const answer = (head: boolean) => (_req: IncomingMessage, res: ServerResponse) => {
      res.writeHead(200, {
        etag,
        'last-modified': older.lastModified.toUTCString(),
        'content-length': Buffer.byteLength(older.data),
        'content-type': 'application/octet-stream',
      });
      res.end(head ? undefined : older.data);
    };
    s3.answerWith('HeadObject', answer(true));
    s3.answerWith('GetObject', answer(false));
    try {
      await store.refresh();
      assert.equal(
        (await store.instanceGroup('nodes')).spec.nodeLabels?.['edited'],
        'yes',
        'the older object replaced the newer one',
      );
    } finally {
      s3.answerWith('HeadObject', undefined);
      s3.answerWith('GetObject', undefined);
    }
    // The replica catches up, then a real edit: read at once.
    s3.putObject('state', key, igYaml('nodes', '    edited: "again"\n'));
    await store.refresh();
    assert.equal((await store.instanceGroup('nodes')).spec.nodeLabels?.['edited'], 'again');
  });
});

test('an S3-compatible store that sends no ETag: an edit is still seen, by its Last-Modified and length', async () => {
  const { store } = s3Cluster({ nodes: igYaml('nodes') });
  let current = { data: igYaml('nodes', '    edited: "one"\n'), at: new Date(Date.now() - 60_000) };
  const answer = (head: boolean) => (_req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(200, {
      'last-modified': current.at.toUTCString(),
      'content-length': Buffer.byteLength(current.data),
      'content-type': 'application/octet-stream',
    });
    res.end(head ? undefined : current.data);
  };
  s3.answerWith('HeadObject', answer(true));
  s3.answerWith('GetObject', answer(false));
  try {
    assert.equal((await store.instanceGroup('nodes')).spec.nodeLabels?.['edited'], 'one');
    await store.refresh();
    assert.equal((await store.instanceGroup('nodes')).spec.nodeLabels?.['edited'], 'one');
    current = { data: igYaml('nodes', '    edited: "two"\n'), at: new Date() };
    await store.refresh();
    assert.equal((await store.instanceGroup('nodes')).spec.nodeLabels?.['edited'], 'two');
  } finally {
    s3.answerWith('HeadObject', undefined);
    s3.answerWith('GetObject', undefined);
  }
});

test('an older copy the store keeps answering past the grace is believed (a file restored with its time kept), with a warning', async () => {
  let monotonic = 0;
  const { logger, lines } = capturedLogger();
  const { root, store } = s3Cluster(
    { nodes: igYaml('nodes') },
    { clock: { monotonic: () => monotonic }, logger },
  );
  const key = `${root}/instancegroup/nodes`;
  s3.putObject('state', key, igYaml('nodes', '    edited: "yes"\n'));
  assert.equal((await store.instanceGroup('nodes')).spec.nodeLabels?.['edited'], 'yes');
  const restored = igYaml('nodes', '    edited: "restored"\n');
  const etag = `"${createHash('md5').update(restored).digest('hex')}"`;
  const answer = (head: boolean) => (_req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(200, {
      etag,
      'last-modified': new Date(Date.now() - 86_400_000).toUTCString(),
      'content-length': Buffer.byteLength(restored),
      'content-type': 'application/octet-stream',
    });
    res.end(head ? undefined : restored);
  };
  s3.answerWith('HeadObject', answer(true));
  s3.answerWith('GetObject', answer(false));
  try {
    await store.refresh();
    monotonic += olderCopyGraceMs - 1;
    await store.refresh();
    assert.equal((await store.instanceGroup('nodes')).spec.nodeLabels?.['edited'], 'yes', 'within the grace');
    monotonic += 1;
    await store.refresh();
    assert.equal((await store.instanceGroup('nodes')).spec.nodeLabels?.['edited'], 'restored', 'past it');
    assert.ok(
      lines.some((l) => /older than the one in use.*for 10 minutes: believed/.test(l)),
      lines.join('\n'),
    );
  } finally {
    s3.answerWith('HeadObject', undefined);
    s3.answerWith('GetObject', undefined);
  }
});

describe('file: a state store on a file system', () => {
  test('a file larger than the size limit is refused without being read', async () => {
    const { mkdtemp, open, rm } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const dir = await mkdtemp(join(tmpdir(), 'store-answers-'));
    try {
      await (await import('node:fs/promises')).mkdir(join(dir, 'instancegroup'));
      const file = await open(join(dir, 'instancegroup', 'nodes'), 'w');
      // Sparse: the size without the bytes.
      await file.truncate(maxObjectBytes + 1);
      await file.close();
      const vfs = openVfs(`file://${dir}`);
      await assert.rejects(vfs.read('instancegroup/nodes'), (err: unknown) => isKind(err, 'too-large'));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

void NotFoundError;
void UnavailableError;
