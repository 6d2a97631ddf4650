import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { printable } from '../log.ts';
import { retryAfterSeconds } from '../net/retry-after.ts';
import { answerError } from './http-answer.ts';
import { isTransient } from './retry.ts';

describe('answerError', () => {
  test('the status decides the kind, whatever the body; faults are retryable, the rest final', () => {
    const html = Buffer.from('<html><body>nope</body></html>');
    const cases: [number, string][] = [
      [400, 'invalid'],
      [401, 'unauthenticated'],
      [403, 'forbidden'],
      [404, 'not-found'],
      [405, 'invalid'],
      [409, 'conflict'],
      [413, 'too-large'],
      [301, 'invalid'],
      [408, 'unavailable'],
      [429, 'rate-limited'],
      [500, 'unavailable'],
      [502, 'unavailable'],
      [503, 'unavailable'],
      [504, 'unavailable'],
    ];
    for (const [status, kind] of cases) {
      const err = answerError('GET https://h:3988/cluster-info', status, html, undefined);
      assert.equal(err.kind, kind, String(status));
      assert.equal(err.details?.['httpStatus'], status);
      assert.equal(isTransient(err), status === 408 || status === 429 || status >= 500, String(status));
    }
  });

  test('one line: the request, the status, the reason the body gives, and a hint for 404', () => {
    const bootstrapApi = Buffer.from('{"error":{"reason":"invalid","message":"unknown field \\"x\\""}}');
    assert.equal(
      answerError('POST https://h:3988/v1/certificates', 400, bootstrapApi, undefined).message,
      'POST https://h:3988/v1/certificates answered 400 Bad Request: unknown field "x" (invalid)',
    );
    const kubernetesStatus = Buffer.from(
      '{"kind":"Status","status":"Failure","message":"configmaps \\"cluster-info\\" is forbidden","reason":"Forbidden"}',
    );
    assert.equal(
      answerError('GET https://api/x', 403, kubernetesStatus, undefined).message,
      'GET https://api/x answered 403 Forbidden: configmaps "cluster-info" is forbidden (Forbidden)',
    );
    assert.equal(
      answerError('GET https://h/cluster-info', 404, Buffer.from('<html>'), undefined).message,
      'GET https://h/cluster-info answered 404 Not Found; check the URL given to --server',
    );
    const hostile = Buffer.from('{"error":{"message":"\\u001b[2Jgone\\nforged line"}}');
    assert.equal(
      answerError('GET https://h/', 500, hostile, undefined).message,
      'GET https://h/ answered 500 Internal Server Error: [2Jgone forged line',
    );
  });

  test('Retry-After is carried on faults only: seconds or an HTTP date', () => {
    assert.equal(answerError('GET u', 503, Buffer.alloc(0), '7').details?.['retryAfterSeconds'], 7);
    assert.equal(answerError('GET u', 404, Buffer.alloc(0), '7').details?.['retryAfterSeconds'], undefined);
    const now = Date.UTC(2026, 0, 1, 12, 0, 0);
    assert.equal(retryAfterSeconds('Thu, 01 Jan 2026 12:00:30 GMT', now), 30);
    assert.equal(retryAfterSeconds('Thu, 01 Jan 2026 11:59:00 GMT', now), undefined);
    assert.equal(retryAfterSeconds('0', now), undefined);
    assert.equal(retryAfterSeconds('soon', now), undefined);
    assert.equal(retryAfterSeconds(undefined, now), undefined);
  });

  test('a Retry-After date is read on the clock of the answer’s Date, whatever this machine’s clock says', () => {
    // The server's clock is a day ahead of this machine's (or this one a day behind).
    const serverNow = Date.now() + 86_400_000;
    const retryAfter = new Date(serverNow + 30_000).toUTCString();
    const date = new Date(serverNow).toUTCString();
    const err = answerError('GET u', 503, Buffer.alloc(0), retryAfter, undefined, date);
    assert.equal(err.details?.['retryAfterSeconds'], 30);
    // Without a Date (or an unreadable one), this machine's clock is all there is.
    const unread = answerError('GET u', 503, Buffer.alloc(0), retryAfter, undefined, 'yesterday');
    assert.ok(Number(unread.details?.['retryAfterSeconds']) > 86_000);
  });

  test('printable: control characters go, long text is cut', () => {
    assert.equal(printable('a\u0007b\u009bc'), 'a b c');
    assert.equal(printable('x'.repeat(300)).length, 201);
  });
});
