import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { TimeoutError, UnauthenticatedError, UnavailableError } from '../../errors.ts';
import { callSts, parseCallerIdentity } from './sts-client.ts';

const identityXml = `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <GetCallerIdentityResult><Arn>arn:aws:sts::123456789012:assumed-role/nodes/i-0123456789abcdef0</Arn>
  <UserId>AROA:i-0123456789abcdef0</UserId><Account>123456789012</Account></GetCallerIdentityResult>
</GetCallerIdentityResponse>`;

let server: Server;
let endpoint: string;
let handler: (req: IncomingMessage, res: ServerResponse) => void;
const seen: IncomingMessage[] = [];

before(async () => {
  server = createServer((req, res) => {
    seen.push(req);
    req.resume();
    req.on('end', () => handler(req, res));
  });
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

function answer(status: number, body: string, headers: Record<string, string> = {}) {
  handler = (_req, res) => {
    res.writeHead(status, { 'content-type': 'text/xml', ...headers });
    res.end(body);
  };
}

test('callSts sends the signed Host and headers and reads the caller', async () => {
  answer(200, identityXml);
  seen.length = 0;
  const caller = await callSts(endpoint, replay, 2_000);
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
    callSts(endpoint, replay, 2_000),
    (err) => err instanceof UnauthenticatedError && /SignatureDoesNotMatch: no/.test(err.message),
  );
});

test('a redirect is not followed', async () => {
  answer(302, '', { location: 'http://127.0.0.1:1/elsewhere' });
  seen.length = 0;
  await assert.rejects(callSts(endpoint, replay, 2_000), /HTTP 302/);
  assert.equal(seen.length, 1);
});

test('STS failures and throttling are unavailable; silence is a timeout; floods are cut', async () => {
  answer(503, '<ErrorResponse><Error><Code>ServiceUnavailable</Code></Error></ErrorResponse>');
  await assert.rejects(callSts(endpoint, replay, 2_000), UnavailableError);
  answer(400, '<ErrorResponse><Error><Code>Throttling</Code></Error></ErrorResponse>');
  await assert.rejects(callSts(endpoint, replay, 2_000), UnavailableError);
  handler = () => undefined;
  await assert.rejects(callSts(endpoint, replay, 200), TimeoutError);
  answer(200, 'x'.repeat(100_000));
  await assert.rejects(callSts(endpoint, replay, 2_000), /more than 65536 bytes/);
  await assert.rejects(callSts('http://127.0.0.1:1', replay, 2_000), /cannot reach STS/);
});

test('parseCallerIdentity decodes entities and refuses other documents', () => {
  const caller = parseCallerIdentity(identityXml.replace('AROA:', 'AROA&amp;'));
  assert.equal(caller.userId, 'AROA&i-0123456789abcdef0');
  assert.throws(() => parseCallerIdentity('<Other/>'), UnauthenticatedError);
});
