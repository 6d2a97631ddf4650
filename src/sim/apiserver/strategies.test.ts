import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { KubeObject } from './objects.ts';
import { resourceTypeByName } from './resources.ts';
import { nameProblem, prepareForCreate, prepareForUpdate, validateObject } from './strategies.ts';

const type = (name: string) => resourceTypeByName(name)!;
const fields = (errors: { field: string; type: string }[]) => errors.map((e) => `${e.field} ${e.type}`);

describe('names', () => {
  test('follow the rule of each type', () => {
    assert.equal(nameProblem(type('nodes'), 'ip-10-0-0-1.ec2.internal'), undefined);
    assert.match(nameProblem(type('nodes'), 'Upper') ?? '', /RFC 1123 subdomain/);
    assert.match(nameProblem(type('namespaces'), 'a.b') ?? '', /RFC 1123 label/);
    assert.equal(nameProblem(type('certificatesigningrequests'), 'node-csr-ABC_x'), undefined);
    assert.equal(nameProblem(type('certificatesigningrequests'), 'a/b'), "may not contain '/'");
  });
});

describe('validation', () => {
  test('requires names, pod containers and valid taints', () => {
    assert.deepEqual(
      fields(
        validateObject(type('nodes'), { apiVersion: 'v1', kind: 'Node', metadata: {} }, undefined, 'main'),
      ),
      ['metadata.name Required'],
    );
    const pod: KubeObject = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'p', namespace: 'd' },
      spec: { containers: [{ name: 'c' }] },
    };
    assert.deepEqual(fields(validateObject(type('pods'), pod, undefined, 'main')), [
      'spec.containers[0].image Required',
    ]);
    const node: KubeObject = {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'n' },
      spec: { taints: [{ key: 'k', effect: 'Sometimes' }] },
    };
    assert.deepEqual(fields(validateObject(type('nodes'), node, undefined, 'main')), [
      'spec.taints[0].effect NotSupported',
    ]);
  });

  test('keeps immutable config maps immutable', () => {
    const old: KubeObject = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'c', namespace: 'd' },
      data: { a: '1' },
      immutable: true,
    };
    const changed = { ...old, data: { a: '2' } };
    assert.deepEqual(fields(validateObject(type('configmaps'), changed, old, 'main')), ['data Forbidden']);
  });

  test('limits config map and secret data to 1 MiB in all, as ValidateConfigMap and ValidateSecret do', () => {
    const mib = 1024 * 1024;
    const configMap = (data: Record<string, string>, binaryData?: Record<string, string>): KubeObject => ({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'c', namespace: 'd' },
      data,
      ...(binaryData ? { binaryData } : {}),
    });
    const secret = (data: Record<string, string>): KubeObject => ({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 's', namespace: 'd' },
      type: 'Opaque',
      data,
    });
    const base64 = (bytes: number) => Buffer.alloc(bytes, 1).toString('base64');
    // Exactly 1 MiB is allowed; the sum over every key (data and binaryData) counts.
    assert.deepEqual(
      validateObject(type('configmaps'), configMap({ a: 'x'.repeat(mib) }), undefined, 'main'),
      [],
    );
    // A ConfigMap reports the whole object (Go's field.NewPath("") prints as "[]"), with no value.
    assert.deepEqual(
      validateObject(
        type('configmaps'),
        configMap({ a: 'x'.repeat(mib / 2), b: 'x'.repeat(mib / 2 + 1) }),
        undefined,
        'main',
      ),
      [{ type: 'TooLong', field: '[]', detail: 'may not be more than 1048576 bytes' }],
    );
    // Bytes, not characters: 'é' is two bytes in UTF-8.
    assert.deepEqual(
      fields(
        validateObject(type('configmaps'), configMap({ a: 'é'.repeat(mib / 2 + 1) }), undefined, 'main'),
      ),
      ['[] TooLong'],
    );
    // binaryData counts decoded, not as the base64 on the wire.
    assert.deepEqual(
      validateObject(
        type('configmaps'),
        configMap({ a: 'x'.repeat(mib / 2) }, { b: base64(mib / 2) }),
        undefined,
        'main',
      ),
      [],
    );
    assert.deepEqual(
      fields(
        validateObject(
          type('configmaps'),
          configMap({ a: 'x'.repeat(mib / 2) }, { b: base64(mib / 2 + 1) }),
          undefined,
          'main',
        ),
      ),
      ['[] TooLong'],
    );
    // A Secret reports `data`, its values counted decoded.
    assert.deepEqual(validateObject(type('secrets'), secret({ a: base64(mib) }), undefined, 'main'), []);
    assert.deepEqual(
      validateObject(type('secrets'), secret({ a: base64(mib), b: base64(1) }), undefined, 'main'),
      [{ type: 'TooLong', field: 'data', detail: 'may not be more than 1048576 bytes' }],
    );
  });

  test('holds CSR conditions to the API rules per subresource', () => {
    const csr = (conditions: { type: string; status: string }[]): KubeObject => ({
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { name: 'c' },
      spec: { request: '', signerName: 'example.com/s', usages: ['client auth'] },
      status: { conditions },
    });
    const relevant = (errors: { field: string; type: string }[]) =>
      fields(errors).filter((f) => !f.startsWith('spec.request'));
    const approved = csr([{ type: 'Approved', status: 'True' }]);
    assert.deepEqual(
      relevant(validateObject(type('certificatesigningrequests'), approved, csr([]), 'approval')),
      [],
    );
    assert.deepEqual(
      relevant(validateObject(type('certificatesigningrequests'), approved, csr([]), 'status')),
      ['status.conditions Forbidden'],
    );
    assert.deepEqual(
      relevant(validateObject(type('certificatesigningrequests'), csr([]), approved, 'approval')),
      ['status.conditions Forbidden'],
    );
    assert.deepEqual(
      relevant(
        validateObject(
          type('certificatesigningrequests'),
          csr([{ type: 'Approved', status: 'False' }]),
          undefined,
          'raw',
        ),
      ),
      ['status.conditions[0].status NotSupported'],
    );
  });
});

describe('create and update resets', () => {
  test('stamp the CSR requester and clear the status on API creates only', () => {
    const body = (): KubeObject => ({
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { name: 'c' },
      spec: { username: 'claimed', groups: ['system:masters'], extra: { a: ['b'] } },
      status: { certificate: 'x' },
    });
    const viaApi = body();
    prepareForCreate(type('certificatesigningrequests'), viaApi, 'main', { name: 'real', groups: ['g'] });
    assert.deepEqual(viaApi['spec'], { username: 'real', groups: ['g'] });
    assert.deepEqual(viaApi['status'], {});
    const seeded = body();
    prepareForCreate(type('certificatesigningrequests'), seeded, 'raw', undefined);
    assert.deepEqual(seeded['status'], { certificate: 'x' });
  });

  test('keep the status on main writes and everything but the status on status writes', () => {
    const old: KubeObject = {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'n', labels: { a: '1' } },
      spec: { podCIDR: 'x' },
      status: { phase: 'Running' },
    };
    const next = (): KubeObject => ({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'n', labels: { a: '2' } },
      spec: { podCIDR: 'y' },
      status: { phase: 'Terminated' },
    });
    const main = prepareForUpdate(type('nodes'), next(), old, 'main');
    assert.deepEqual(
      [main.metadata.labels, main['spec'], main['status']],
      // podCIDR alone becomes podCIDRs as the v1 → internal conversion makes it.
      [{ a: '2' }, { podCIDR: 'y', podCIDRs: ['y'] }, { phase: 'Running' }],
    );
    const status = prepareForUpdate(type('nodes'), next(), old, 'status');
    assert.deepEqual(
      [status.metadata.labels, status['spec'], status['status']],
      [{ a: '1' }, { podCIDR: 'x' }, { phase: 'Terminated' }],
    );
  });

  test('fold secret stringData into base64 data', () => {
    const secret: KubeObject = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 's', namespace: 'd' },
      stringData: { token: 'abc' },
    };
    prepareForCreate(type('secrets'), secret, 'main', undefined);
    assert.deepEqual(
      [secret['data'], secret['type'], 'stringData' in secret],
      [{ token: 'YWJj' }, 'Opaque', false],
    );
  });
});
