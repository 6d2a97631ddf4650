/**
 * What current kubectl (1.3x) sends: protobuf bodies for built-in types. kubectl 1.20 (the one in
 * `.tools/`) still sends JSON, so these tests send exactly the requests a current kubectl sends:
 *
 * - `kubectl certificate approve|deny` reads the CSR with the typed client, then writes it back with
 *   `UpdateApproval` (a PUT of `/approval`): staging/src/k8s.io/kubectl/pkg/cmd/certificates/certificates.go,
 *   `modifyCertificateCondition` (`clientSet.CertificatesV1().CertificateSigningRequests().Get(...)`,
 *   then `.UpdateApproval(...)`), condition from `addConditionIfNeeded` (reason `KubectlApprove`,
 *   message "This CSR was approved by kubectl certificate approve.", `lastUpdateTime` now).
 * - The typed clients are built with `gentype.PrefersProtobuf()` (staging/src/k8s.io/client-go/gentype/type.go,
 *   `func PrefersProtobuf`), and every request calls `UseProtobufAsDefaultIfPreferred`, which — when
 *   the config names no content type, as kubectl's does not — sets
 *   `Accept: application/vnd.kubernetes.protobuf,application/json` and
 *   `Content-Type: application/vnd.kubernetes.protobuf` (staging/src/k8s.io/client-go/rest/request.go,
 *   `func (r *Request) UseProtobufAsDefault`).
 * - The body is client-go's protobuf serializer output: `k8s\0` + a `runtime.Unknown`
 *   (staging/src/k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go; field numbers from
 *   staging/src/k8s.io/api/certificates/v1/generated.proto and apimachinery's meta/v1/generated.proto).
 */
import assert from 'node:assert/strict';
import { request } from 'node:https';
import { after, before, describe, test } from 'node:test';
import { createCertificateRequest } from '../tls.ts';
import { adminUser, type SimApiServer, startApiServer } from './index.ts';
import { decodeProtobuf } from './protobuf.ts';

/** A protobuf field: a number and a value (string/bytes, unsigned integer, bool, or nested fields). */
type PbValue = string | Buffer | number | boolean | PbField[];
type PbField = [number, PbValue];

function varint(n: bigint): Buffer {
  const out: number[] = [];
  let v = BigInt.asUintN(64, n);
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v > 0n) byte |= 0x80;
    out.push(byte);
  } while (v > 0n);
  return Buffer.from(out);
}

/** Encodes fields the way gogo-protobuf does for Kubernetes' types. */
function encode(fields: readonly PbField[]): Buffer {
  const parts: Buffer[] = [];
  for (const [number, value] of fields) {
    if (typeof value === 'number' || typeof value === 'boolean') {
      parts.push(varint(BigInt(number << 3)), varint(BigInt(Number(value))));
    } else {
      const bytes = Array.isArray(value)
        ? encode(value)
        : Buffer.isBuffer(value)
          ? value
          : Buffer.from(value, 'utf8');
      parts.push(varint(BigInt((number << 3) | 2)), varint(BigInt(bytes.length)), bytes);
    }
  }
  return Buffer.concat(parts);
}

/** client-go's envelope: the magic, then runtime.Unknown{typeMeta, raw, contentEncoding, contentType}. */
function envelope(apiVersion: string, kind: string, raw: readonly PbField[]): Buffer {
  return Buffer.concat([
    Buffer.from('k8s\0', 'latin1'),
    encode([
      [
        1,
        [
          [1, apiVersion],
          [2, kind],
        ],
      ],
      [2, encode(raw)],
      [3, ''],
      [4, ''],
    ]),
  ]);
}

const time = (iso: string): PbField[] => [
  [1, Math.floor(Date.parse(iso) / 1000)],
  [2, 0],
];

/** The JSON form of a CSR, as far as these tests read it. */
interface CsrJson {
  metadata: {
    name: string;
    uid: string;
    resourceVersion: string;
    creationTimestamp: string;
    managedFields?: unknown;
  };
  spec: {
    request: string;
    usages: string[];
    username: string;
    uid?: string;
    groups?: string[];
    signerName: string;
  };
  status?: {
    conditions?: { type: string; reason: string; message: string; status: string; lastUpdateTime?: string }[];
  };
}

/** The CSR as kubectl writes it back: what it read, plus its condition; gogo writes empty strings too. */
function approvalBody(csr: CsrJson, condition: { type: string; reason: string; message: string }) {
  const meta = csr.metadata;
  const spec = csr.spec;
  const conditions = [...(csr.status?.conditions ?? []), { ...condition, status: 'True' }];
  return envelope('certificates.k8s.io/v1', 'CertificateSigningRequest', [
    [
      1,
      [
        [1, meta.name],
        [2, ''],
        [3, ''],
        [5, meta.uid],
        [6, meta.resourceVersion],
        [7, 0],
        [8, time(meta.creationTimestamp)],
        // managedFields (17): a field this server does not read, skipped as protobuf readers do.
        [
          17,
          [
            [1, 'kubectl'],
            [2, 'Update'],
          ],
        ],
      ],
    ],
    [
      2,
      [
        [1, Buffer.from(spec.request, 'base64')],
        ...spec.usages.map((u: string): PbField => [2, u]),
        [3, spec.username],
        [4, spec.uid ?? ''],
        ...(spec.groups ?? []).map((g: string): PbField => [5, g]),
        [7, spec.signerName],
      ],
    ],
    [
      3,
      conditions.map(
        (c): PbField => [
          1,
          [
            [1, c.type],
            [2, c.reason],
            [3, c.message],
            [4, time(new Date().toISOString())],
            [5, [] as PbField[]],
            [6, c.status],
          ],
        ],
      ),
    ],
  ]);
}

interface Answer {
  status: number;
  contentType: string;
  body: Record<string, unknown>;
}

const token = 'protobuf-test-admin-token';

function send(
  sim: SimApiServer,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: Buffer,
) {
  const url = new URL(sim.url);
  return new Promise<Answer>((resolve, reject) => {
    const r = request(
      {
        host: url.hostname,
        port: url.port,
        method,
        path,
        ca: sim.caCertificate,
        // Go's client sends a byte body with its Content-Length.
        headers: {
          Authorization: `Bearer ${token}`,
          ...(body ? { 'Content-Length': String(body.length) } : {}),
          ...headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            contentType: String(res.headers['content-type'] ?? ''),
            body: JSON.parse(Buffer.concat(chunks).toString('utf8')),
          }),
        );
      },
    );
    r.on('error', reject);
    r.end(body);
  });
}

/** The headers client-go sets for a typed client that prefers protobuf (rest/request.go, UseProtobufAsDefault). */
const protobufHeaders = {
  Accept: 'application/vnd.kubernetes.protobuf,application/json',
  'Content-Type': 'application/vnd.kubernetes.protobuf',
  'User-Agent': 'kubectl/v1.34.1 (linux/amd64) kubernetes/0000000',
};

describe('protobuf bodies, as current kubectl sends them', () => {
  let sim: SimApiServer;
  let request64: string;
  before(async () => {
    sim = await startApiServer();
    sim.addToken(token, adminUser);
    const { csr } = await createCertificateRequest({ name: 'system:node:pb-node', groups: ['system:nodes'] });
    request64 = Buffer.from(csr).toString('base64');
  });
  after(() => sim.close());

  const seed = (name: string) =>
    sim.store.create({
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { name },
      spec: {
        request: request64,
        signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
        usages: ['digital signature', 'client auth'],
        username: 'system:node:pb-node',
        groups: ['system:nodes', 'system:authenticated'],
      },
    } as never);

  for (const [verb, type, reason, message] of [
    ['approve', 'Approved', 'KubectlApprove', 'This CSR was approved by kubectl certificate approve.'],
    ['deny', 'Denied', 'KubectlDeny', 'This CSR was denied by kubectl certificate deny.'],
  ] as const) {
    test(`certificate ${verb}: the GET then the protobuf PUT of /approval succeed`, async () => {
      const name = `pb-${verb}`;
      seed(name);
      const path = `/apis/certificates.k8s.io/v1/certificatesigningrequests/${name}`;
      const got = await send(sim, 'GET', path, { Accept: protobufHeaders.Accept });
      assert.equal(got.status, 200);
      // JSON is in the Accept list; client-go decodes by the answer's Content-Type.
      assert.equal(got.contentType, 'application/json');
      const put = await send(
        sim,
        'PUT',
        `${path}/approval`,
        protobufHeaders,
        approvalBody(got.body as unknown as CsrJson, { type, reason, message }),
      );
      assert.equal(put.status, 200, JSON.stringify(put.body));
      const stored = sim.store.get('certificatesigningrequests', undefined, name) as unknown as CsrJson;
      const conditions = stored.status?.conditions ?? [];
      assert.deepEqual(
        conditions.map((c) => [c.type, c.reason, c.status]),
        [[type, reason, 'True']],
      );
      assert.match(String(conditions[0]?.lastUpdateTime), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
      assert.equal(stored.spec.request, request64, 'the spec round-trips through protobuf unchanged');
      assert.equal(stored.metadata.managedFields, undefined);
    });
  }

  test('a stale resourceVersion in a protobuf body is a 409 Conflict, as with JSON', async () => {
    seed('pb-stale');
    const path = '/apis/certificates.k8s.io/v1/certificatesigningrequests/pb-stale';
    const got = await send(sim, 'GET', path, {});
    sim.store.mutate('certificatesigningrequests', undefined, 'pb-stale', (o) => {
      o.metadata.labels = { touched: 'yes' };
    });
    const put = await send(
      sim,
      'PUT',
      `${path}/approval`,
      protobufHeaders,
      approvalBody(got.body as unknown as CsrJson, {
        type: 'Approved',
        reason: 'KubectlApprove',
        message: 'm',
      }),
    );
    assert.equal(put.status, 409);
    assert.equal(put.body['reason'], 'Conflict');
  });

  test('protobuf ConfigMap create (kubectl create configmap) and DeleteOptions', async () => {
    const body = envelope('v1', 'ConfigMap', [
      [
        1,
        [
          [1, 'pb-settings'],
          [3, 'default'],
          [
            11,
            [
              [1, 'app'],
              [2, 'web'],
            ],
          ],
        ],
      ],
      [
        2,
        [
          [1, 'mode'],
          [2, 'fast'],
        ],
      ],
      [
        3,
        [
          [1, 'blob'],
          [2, Buffer.from([0, 1, 2])],
        ],
      ],
    ]);
    const created = await send(sim, 'POST', '/api/v1/namespaces/default/configmaps', protobufHeaders, body);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const stored = sim.store.get('configmaps', 'default', 'pb-settings');
    assert.deepEqual(stored?.['data'], { mode: 'fast' });
    assert.deepEqual(stored?.['binaryData'], { blob: 'AAEC' });
    assert.deepEqual(stored?.metadata.labels, { app: 'web' });
    const wrongUid = envelope('v1', 'DeleteOptions', [[2, [[1, 'not-the-uid']]]]);
    const refused = await send(
      sim,
      'DELETE',
      '/api/v1/namespaces/default/configmaps/pb-settings',
      protobufHeaders,
      wrongUid,
    );
    assert.equal(refused.status, 409, 'the precondition inside the protobuf DeleteOptions is applied');
    const deleted = await send(
      sim,
      'DELETE',
      '/api/v1/namespaces/default/configmaps/pb-settings',
      protobufHeaders,
      envelope('v1', 'DeleteOptions', [[4, 'Background']]),
    );
    assert.equal(deleted.status, 200);
    assert.equal(sim.store.get('configmaps', 'default', 'pb-settings'), undefined);
  });

  test('bad protobuf bodies are 400s with a reason, never a crash', async () => {
    const path = '/api/v1/namespaces/default/configmaps';
    const cases: [Buffer, RegExp][] = [
      [Buffer.from('{"kind":"ConfigMap"}'), /does not appear to be a protobuf message/],
      [Buffer.from('k8s\0\x0a\xff', 'latin1'), /unable to decode the protobuf body: .*run/],
      [Buffer.from('k8s\0\x0a', 'latin1'), /unable to decode the protobuf body: truncated varint/],
      [
        envelope('v1', 'Pod', [[1, [[1, 'p']]]]),
        /cannot decode Pod \(v1\) from protobuf; it decodes .*ConfigMap/,
      ],
      [
        envelope('v1', 'Secret', [[1, [[1, 's']]]]),
        /the kind in the data \(Secret\) does not match the expected kind \(ConfigMap\)/,
      ],
    ];
    for (const [body, message] of cases) {
      const res = await send(sim, 'POST', path, protobufHeaders, body);
      assert.equal(res.status, 400, JSON.stringify(res.body));
      assert.match(String(res.body['message']), message);
    }
    assert.equal((await send(sim, 'GET', path, {})).status, 200, 'the server still answers');
  });

  test('a media type nobody speaks is still a 415 listing JSON, YAML and protobuf', async () => {
    const res = await send(
      sim,
      'POST',
      '/api/v1/namespaces/default/configmaps',
      { 'Content-Type': 'text/csv' },
      Buffer.from('a,b'),
    );
    assert.equal(res.status, 415);
    assert.match(
      String(res.body['message']),
      /accepted media types include: application\/json, application\/yaml, application\/vnd\.kubernetes\.protobuf$/,
    );
  });

  test('a CSR spec.extra decodes to lists of strings, as its JSON form has them', () => {
    const obj = decodeProtobuf(
      envelope('certificates.k8s.io/v1', 'CertificateSigningRequest', [
        [
          2,
          [
            [
              6,
              [
                [1, 'scopes'],
                [
                  2,
                  [
                    [1, 'a'],
                    [1, 'b'],
                  ],
                ],
              ],
            ],
          ],
        ],
      ]),
    );
    assert.deepEqual(obj['spec'], { extra: { scopes: ['a', 'b'] } });
  });

  test('decodes negative integers and drops Go zero values, as the JSON form omits them', () => {
    const obj = decodeProtobuf(
      envelope('v1', 'DeleteOptions', [
        [1, -1 as number],
        [3, false],
        [4, ''],
      ]),
    );
    assert.deepEqual(obj, { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: -1 });
  });
});
