import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConflictError, InvalidInputError, NotFoundError, UnavailableError } from '../../errors.ts';
import { resourceTypeByName } from './resources.ts';
import {
  alreadyExists,
  conflict,
  fieldErrorBody,
  injectedFailure,
  invalid,
  notFound,
  staleObjectMessage,
  statusOf,
  success,
} from './status.ts';

const nodes = resourceTypeByName('nodes')!;
const csrs = resourceTypeByName('certificatesigningrequests')!;

test('NotFound and AlreadyExists name the resource, qualified by group', () => {
  const missing = notFound(csrs, 'c1');
  assert.ok(missing instanceof NotFoundError);
  assert.deepEqual(statusOf(missing), {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message: 'certificatesigningrequests.certificates.k8s.io "c1" not found',
    reason: 'NotFound',
    details: { name: 'c1', group: 'certificates.k8s.io', kind: 'certificatesigningrequests' },
    code: 404,
  });
  const taken = alreadyExists(nodes, 'n1');
  assert.ok(taken instanceof ConflictError);
  assert.equal(statusOf(taken).reason, 'AlreadyExists');
  assert.equal(statusOf(conflict(nodes, 'n1', staleObjectMessage)).reason, 'Conflict');
});

test('Invalid lists field errors in the API wording', () => {
  const err = invalid(nodes, 'n1', [
    { type: 'Required', field: 'spec.x' },
    { type: 'Invalid', field: 'metadata.name', value: 'N', detail: 'bad' },
  ]);
  assert.ok(err instanceof InvalidInputError);
  const status = statusOf(err);
  assert.equal(status.code, 422);
  assert.equal(
    status.message,
    'Node "n1" is invalid: [spec.x: Required value, metadata.name: Invalid value: "N": bad]',
  );
  assert.deepEqual(status.details?.causes?.[1], {
    reason: 'FieldValueInvalid',
    message: 'Invalid value: "N": bad',
    field: 'metadata.name',
  });
  assert.equal(
    fieldErrorBody({ type: 'NotSupported', field: 'f', value: 3, detail: 'supported values: "a"' }),
    'Unsupported value: 3: supported values: "a"',
  );
});

test('injected failures and success carry what clients read', () => {
  const throttled = statusOf(injectedFailure(429, 5));
  assert.equal(throttled.code, 429);
  assert.equal(throttled.details?.retryAfterSeconds, 5);
  assert.ok(injectedFailure(503, 1) instanceof UnavailableError);
  assert.equal(statusOf(injectedFailure(500, 1)).reason, 'InternalError');
  assert.deepEqual(success(nodes, 'n1', 'u'), {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Success',
    details: { name: 'n1', kind: 'nodes', uid: 'u' },
  });
});
