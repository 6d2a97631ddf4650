import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { Registry } from 'prom-client';
import { cloudCallMetrics } from '../../cloud/metrics.ts';
import { TimeoutError, UnauthenticatedError, UnavailableError } from '../../errors.ts';
import { cloudCallsTimed, cloudRequests } from '../../testing/cloud-calls.ts';
import { parseCallerIdentity, StsClient } from './sts-client.ts';

const identityXml = `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <GetCallerIdentityResult><Arn>arn:aws:sts::123456789012:assumed-role/nodes/i-0123456789abcdef0</Arn>
  <UserId>AROA:i-0123456789abcdef0</UserId><Account>123456789012</Account></GetCallerIdentityResult>
</GetCallerIdentityResponse>`;

let server: Server;
let endpoint: string;
let handler: (req: IncomingMessage, res: ServerResponse) => void;
const seen: IncomingMessage[] = [];
let connections = 0;

before(async () => {
  server = createServer((req, res) => {
    seen.push(req);
    req.resume();
    req.on('end', () => handler(req, res));
  });
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const replay = {
  method: 'POST',
  url: '/',
  headers: { host: ['sts.us-east-1.amazonaws.com'], 'x-amz-date': ['20260301T120000Z'] },
  body: 'Action=GetCallerIdentity&Version=2011-06-15',
};

/** A client with a fresh pool, so connection counts do not depend on the other tests. */
function client(timeoutMs = 2_000, maxConnections?: number): StsClient {
  return new StsClient(endpoint, { timeoutMs, ...(maxConnections === undefined ? {} : { maxConnections }) });
}

/** Drops the connection of every request `drop` picks (a server that closed it), answers the others. */
function dropping(drop: (req: IncomingMessage) => boolean) {
  handler = (req, res) => {
    if (drop(req)) {
      req.socket.destroy();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/xml' });
    res.end(identityXml);
  };
}

function answer(status: number, body: string, headers: Record<string, string> = {}) {
  handler = (_req, res) => {
    res.writeHead(status, { 'content-type': 'text/xml', ...headers });
    res.end(body);
  };
}

test('a replay sends the signed Host and headers and reads the caller', async () => {
  answer(200, identityXml);
  seen.length = 0;
  const caller = await client().call(replay);
  assert.deepEqual(caller, {
    account: '123456789012',
    arn: 'arn:aws:sts::123456789012:assumed-role/nodes/i-0123456789abcdef0',
    userId: 'AROA:i-0123456789abcdef0',
  });
  assert.equal(seen[0]?.headers.host, 'sts.us-east-1.amazonaws.com');
  assert.equal(seen[0]?.headers['x-amz-date'], '20260301T120000Z');
});

test("STS's refusal is an authentication error carrying its code", async () => {
  answer(
    403,
    '<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code><Message>no</Message></Error></ErrorResponse>',
  );
  await assert.rejects(
    client().call(replay),
    (err) => err instanceof UnauthenticatedError && /SignatureDoesNotMatch: no/.test(err.message),
  );
});

test('a redirect is not followed', async () => {
  answer(302, '', { location: 'http://127.0.0.1:1/elsewhere' });
  seen.length = 0;
  await assert.rejects(client().call(replay), /HTTP 302/);
  assert.equal(seen.length, 1);
});

test('STS failures and throttling are unavailable; silence is a timeout; floods are cut', async () => {
  answer(503, '<ErrorResponse><Error><Code>ServiceUnavailable</Code></Error></ErrorResponse>');
  await assert.rejects(client().call(replay), UnavailableError);
  answer(400, '<ErrorResponse><Error><Code>Throttling</Code></Error></ErrorResponse>');
  await assert.rejects(client().call(replay), UnavailableError);
  handler = () => undefined;
  await assert.rejects(client(200).call(replay), TimeoutError);
  answer(200, 'x'.repeat(100_000));
  await assert.rejects(client().call(replay), /more than 65536 bytes/);
  await assert.rejects(new StsClient('http://127.0.0.1:1').call(replay), /cannot reach STS/);
});

test('replays share pooled connections, at most maxConnections at once', async () => {
  answer(200, identityXml);
  connections = 0;
  const sts = client(2_000, 2);
  for (let i = 0; i < 3; i++) await sts.call(replay);
  assert.equal(connections, 1, 'one after another, the replays reuse one connection');
  const shared = client(2_000, 2);
  connections = 0;
  let inFlight = 0;
  let most = 0;
  handler = (_req, res) => {
    most = Math.max(most, ++inFlight);
    setTimeout(() => {
      inFlight--;
      res.writeHead(200, { 'content-type': 'text/xml' });
      res.end(identityXml);
    }, 20);
  };
  await Promise.all(Array.from({ length: 6 }, () => shared.call(replay)));
  assert.equal(most, 2, 'six concurrent replays wait for the two connections');
  assert.equal(connections, 2);
});

test('a pooled connection STS already closed is retried once on a new one', async () => {
  const sts = client();
  answer(200, identityXml);
  await sts.call(replay);
  connections = 0;
  seen.length = 0;
  // The next request on the kept connection meets a server that has just dropped it.
  let dropped = 0;
  dropping(() => dropped++ === 0);
  const caller = await sts.call(replay);
  assert.equal(caller.account, '123456789012');
  assert.equal(seen.length, 2, 'sent twice: once on the dead connection, once on a new one');
  assert.equal(connections, 1);
});

test('the retry goes to a new connection, not to another pooled one that idled out too', async () => {
  const sts = client(2_000, 2);
  // Two pooled connections: two replays at once, answered together.
  const waiting: ServerResponse[] = [];
  handler = (_req, res) => {
    waiting.push(res);
    if (waiting.length < 2) return;
    for (const held of waiting.splice(0)) {
      held.writeHead(200, { 'content-type': 'text/xml' });
      held.end(identityXml);
    }
  };
  await Promise.all([sts.call(replay), sts.call(replay)]);
  // Now every connection that has served before is dead to the server; only a new one is answered.
  const served = new Set(seen.map((req) => req.socket));
  seen.length = 0;
  dropping((req) => served.has(req.socket));
  const caller = await sts.call(replay);
  assert.equal(caller.account, '123456789012');
  assert.equal(seen.length, 2, 'one attempt on a dead pooled connection, then one on a new connection');
});

test("characters Node cannot send are the proof's fault, not a crash", async () => {
  const odd = { ...replay, headers: { ...replay.headers, 'x-extra': ['\u0100'] } };
  await assert.rejects(
    client().call(odd),
    (err) => err instanceof UnauthenticatedError && /cannot be replayed/.test(err.message),
  );
});

test('a connection dropped on its first request, or twice, is not retried further', async () => {
  dropping(() => true);
  seen.length = 0;
  await assert.rejects(
    client().call(replay),
    (err) => err instanceof UnavailableError && /cannot reach STS/.test(err.message),
  );
  assert.equal(seen.length, 1, 'a new connection that fails is not a stale one');
  const sts = client();
  answer(200, identityXml);
  await sts.call(replay);
  dropping(() => true);
  seen.length = 0;
  await assert.rejects(sts.call(replay), UnavailableError);
  assert.equal(seen.length, 2, 'one retry, not more');
});

test('framing headers in a replay are dropped, so the next replay on the connection is read as sent', async () => {
  answer(200, identityXml);
  connections = 0;
  seen.length = 0;
  const sts = client();
  const smuggling = {
    ...replay,
    method: 'GET',
    url: '/?Action=GetCallerIdentity',
    body: '',
    headers: { ...replay.headers, 'content-length': ['100'], 'transfer-encoding': ['chunked'] },
  };
  await sts.call(smuggling);
  await sts.call(replay);
  assert.equal(connections, 1);
  assert.equal(seen.length, 2, 'two requests, neither swallowed as the body of the other');
  assert.equal(seen[0]?.headers['content-length'], undefined);
  assert.equal(seen[0]?.headers['transfer-encoding'], undefined);
  assert.equal(seen[1]?.headers['x-amz-date'], '20260301T120000Z');
});

test('the deadline covers waiting for a pooled connection', async () => {
  handler = () => undefined;
  const sts = client(300, 1);
  const started = Date.now();
  const results = await Promise.allSettled([sts.call(replay), sts.call(replay)]);
  for (const result of results) {
    assert.equal(result.status, 'rejected');
    assert.ok(result.reason instanceof TimeoutError, String(result.reason));
  }
  assert.ok(Date.now() - started < 2_000, 'the queued call timed out with the first, not after it');
});

test('each replay that reaches STS is counted once, by how STS answered', async () => {
  const registry = new Registry();
  const sts = new StsClient(endpoint, { timeoutMs: 300, cloudCalls: cloudCallMetrics(registry) });
  answer(200, identityXml);
  await sts.call(replay);
  answer(
    403,
    '<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code><Message>no</Message></Error></ErrorResponse>',
  );
  await assert.rejects(sts.call(replay), UnauthenticatedError);
  answer(400, '<ErrorResponse><Error><Code>Throttling</Code></Error></ErrorResponse>');
  await assert.rejects(sts.call(replay), UnavailableError);
  answer(503, '<ErrorResponse><Error><Code>ServiceUnavailable</Code></Error></ErrorResponse>');
  await assert.rejects(sts.call(replay), UnavailableError);
  answer(200, '<Other/>');
  await assert.rejects(sts.call(replay), UnavailableError);
  handler = () => undefined;
  await assert.rejects(sts.call(replay), TimeoutError);
  // A replay Node refuses to send never reaches STS; a dead pooled connection's attempt is not STS's.
  await assert.rejects(sts.call({ ...replay, headers: { ...replay.headers, 'x-extra': ['\u0100'] } }));
  answer(200, identityXml);
  await sts.call(replay);
  let dropped = 0;
  dropping(() => dropped++ === 0);
  await sts.call(replay);
  assert.deepEqual(await cloudRequests(registry), {
    'aws GetCallerIdentity.replay ok': 3,
    'aws GetCallerIdentity.replay rejected': 1,
    'aws GetCallerIdentity.replay throttled': 1,
    'aws GetCallerIdentity.replay error': 3,
  });
  assert.equal(await cloudCallsTimed(registry, 'aws', 'GetCallerIdentity.replay'), 8);
});

test('parseCallerIdentity decodes entities and refuses other documents', () => {
  const caller = parseCallerIdentity(identityXml.replace('AROA:', 'AROA&amp;'));
  assert.equal(caller.userId, 'AROA&i-0123456789abcdef0');
  assert.throws(() => parseCallerIdentity('<Other/>'), UnavailableError);
});

test('a 200 STS answer that is no GetCallerIdentityResponse is a fault to retry, not a verdict on the proof', async () => {
  // STS answers a signature it refuses with a 4xx ErrorResponse (the awsQuery error shape,
  // client-sts SignatureDoesNotMatch / InvalidClientTokenId): only that is about the node. A 200
  // whose body is not the documented GetCallerIdentityResponse (Arn, UserId, Account in
  // GetCallerIdentityResult) comes from STS or a proxy failing: a malformed answer, never a denial.
  const sts = client();
  for (const body of [
    '<html><body>proxy login</body></html>',
    '<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></GetCallerIdentityResponse>',
    '',
  ]) {
    answer(200, body);
    await assert.rejects(sts.call(replay), (err: unknown) => {
      assert.ok(err instanceof UnavailableError, String(err));
      assert.equal(err.details?.['reason'], 'malformed-answer');
      return true;
    });
  }
});
