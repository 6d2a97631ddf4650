import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApiException } from '@kubernetes/client-node';
import {
  describeError,
  errorForHttpStatus,
  httpStatusOf,
  InvalidInputError,
  isFaultStatus,
  isRetryable,
  MethodNotAllowedError,
  NotFoundError,
  RateLimitedError,
  UnavailableError,
  UnsupportedMediaTypeError,
} from './errors.ts';
import { fromApiException } from './kube/api-errors.ts';

test('errorForHttpStatus: named statuses keep their kind, faults are unavailable, the rest is the caller’s', () => {
  const named: [number, string][] = [
    [400, 'invalid'],
    [401, 'unauthenticated'],
    [403, 'forbidden'],
    [404, 'not-found'],
    [409, 'conflict'],
    [410, 'gone'],
    [413, 'too-large'],
    [422, 'invalid'],
    [429, 'rate-limited'],
    [408, 'unavailable'],
    [500, 'unavailable'],
    [599, 'unavailable'],
  ];
  for (const otherwise of ['invalid', 'unavailable'] as const) {
    for (const [status, kind] of named) {
      const err = errorForHttpStatus(
        status,
        `HTTP ${status}`,
        { details: { httpStatus: status } },
        otherwise,
      );
      assert.equal(err.kind, kind, `${status} with otherwise=${otherwise}`);
      assert.equal(err.message, `HTTP ${status}`);
      assert.deepEqual(err.details, { httpStatus: status });
    }
    for (const status of [301, 405, 415, 600]) {
      assert.equal(errorForHttpStatus(status, 'x', {}, otherwise).kind, otherwise, String(status));
    }
  }
  assert.equal(errorForHttpStatus(404, 'x', {}, 'invalid').name, 'NotFoundError');
});

test('isFaultStatus: 408, 429 and 5xx are "not now"; the rest is an answer', () => {
  for (const status of [408, 429, 500, 503, 599]) assert.equal(isFaultStatus(status), true, String(status));
  for (const status of [200, 301, 400, 404, 413, 600])
    assert.equal(isFaultStatus(status), false, String(status));
  assert.equal(isRetryable(errorForHttpStatus(503, 'x', {}, 'invalid')), true);
});

test('an error carries its reason, its wait and the status it was answered as typed facts', () => {
  const err = new RateLimitedError('busy', {
    reason: 'queue-full',
    retryAfterSeconds: 7,
    upstreamStatus: 429,
  });
  assert.equal(err.reasonCode, 'queue-full');
  assert.equal(err.retryAfterSeconds, 7);
  assert.equal(err.upstreamStatus, 429);
  // Code that reads the details bag sees the same facts.
  assert.deepEqual(err.details, { reason: 'queue-full', retryAfterSeconds: 7, httpStatus: 429 });
  // And facts written into the bag are read as the typed ones.
  const legacy = new UnavailableError('x', { details: { reason: 'r', retryAfterSeconds: 3, status: 503 } });
  assert.deepEqual([legacy.reasonCode, legacy.retryAfterSeconds, legacy.upstreamStatus], ['r', 3, 503]);
  const plain = new NotFoundError('x');
  assert.deepEqual(
    [plain.reasonCode, plain.retryAfterSeconds, plain.upstreamStatus, plain.details],
    [undefined, undefined, undefined, undefined],
  );
});

test('the status an error maps to: its kind’s, or the more precise 405 and 415 of their classes', () => {
  assert.equal(httpStatusOf(new InvalidInputError('x')), 400);
  // The status a client edge was answered is not the status this server answers.
  assert.equal(httpStatusOf(new InvalidInputError('x', { upstreamStatus: 422 })), 400);
  const method = new MethodNotAllowedError('POST');
  assert.deepEqual(
    [httpStatusOf(method), method.allow, method.reasonCode, method.kind],
    [405, 'POST', 'method-not-allowed', 'invalid'],
  );
  const media = new UnsupportedMediaTypeError('send JSON');
  assert.deepEqual(
    [httpStatusOf(media), media.reasonCode, media.kind],
    [415, 'unsupported-media-type', 'invalid'],
  );
  assert.equal(httpStatusOf(new Error('bug')), 500);
});

test('describeError joins the causes, but not the whole answer of an API client exception a typed error already summarises', () => {
  const answer = new ApiException(
    403,
    'Unknown API Status Code!',
    JSON.stringify({
      kind: 'Status',
      message: 'secrets is forbidden: User "x" cannot list resource "secrets"',
    }),
    { date: new Date().toUTCString(), 'audit-id': crypto.randomUUID() },
  );
  const line = describeError(fromApiException(answer, 'list bootstrap token secrets in kube-system'));
  assert.equal(
    line,
    'list bootstrap token secrets in kube-system: HTTP 403: secrets is forbidden: User "x" cannot list resource "secrets"; grant the permission in RBAC',
  );
  assert.equal(
    describeError(
      new Error('read the instance groups', { cause: new Error('connect ECONNREFUSED 127.0.0.1:9') }),
    ),
    'read the instance groups: connect ECONNREFUSED 127.0.0.1:9',
  );
  // Alone, the exception is all there is to say, but for its headers, which differ at every answer.
  assert.match(
    describeError(answer),
    /^HTTP-Code: 403 Message: Unknown API Status Code! Body: .*secrets is forbidden/,
  );
  assert.doesNotMatch(describeError(answer), /Headers|audit-id|date/);
});
