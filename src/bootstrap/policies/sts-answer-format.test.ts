// STS answers GetCallerIdentity as JSON when asked with `Accept: application/json`
// (aws-iam-authenticator asks it so). A 200 no one can read is a fault (503), so a node that could
// choose the answer's form would turn its own denial into an STS fault at will: an Accept it signed
// is sent (STS needs it for the signature) and its JSON answer read as the XML one; an unsigned Accept
// is not sent (nor any header it did not sign), and Accept-Encoding is refused.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { KopsError } from '../../errors.ts';
import { StsClient } from './sts-client.ts';

test('attack: a proof asking STS for JSON (Accept header) is read as the XML answer is: a verdict on the caller, not an STS fault', async () => {
  const accepted: (string | undefined)[] = [];
  const server = createServer((req, res) => {
    accepted.push(req.headers.accept);
    req.resume();
    req.on('end', () => {
      if (req.headers.accept === 'application/json') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            GetCallerIdentityResponse: {
              GetCallerIdentityResult: {
                Account: '999999999999',
                Arn: 'arn:aws:iam::999999999999:user/mallory',
                UserId: 'AIDA',
              },
            },
          }),
        );
        return;
      }
      res.writeHead(200, { 'content-type': 'text/xml' });
      res.end(
        '<GetCallerIdentityResponse><GetCallerIdentityResult><Arn>arn:aws:iam::999999999999:user/mallory</Arn><UserId>AIDA</UserId><Account>999999999999</Account></GetCallerIdentityResult></GetCallerIdentityResponse>',
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const sts = new StsClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    const replay = {
      method: 'POST',
      url: '/',
      headers: {
        host: ['sts.us-east-1.amazonaws.com'],
        'x-amz-date': ['20260301T120000Z'],
        accept: ['application/json'],
      },
      body: 'Action=GetCallerIdentity&Version=2011-06-15',
    };
    const outcome = await sts.call(replay).then(
      (caller) => `caller ${caller.arn}`,
      (err: unknown) => (err instanceof KopsError ? err.kind : String(err)),
    );
    assert.equal(accepted[0], 'application/json', 'the node-chosen Accept header reached STS');
    assert.equal(outcome, 'caller arn:aws:iam::999999999999:user/mallory');
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

test('attack: a proof carrying Accept-Encoding (which would have STS compress its answer past our reading) is refused', async () => {
  const { signAwsStsProof } = await import('../../agent/aws-proof.ts');
  const { parseStsProof } = await import('./aws-sts-proof.ts');
  const { UnauthenticatedError } = await import('../../errors.ts');
  const body = Buffer.from('{}');
  const token = signAwsStsProof(body, { accessKeyId: 'AKIA', secretAccessKey: 's' }, 'us-east-1', 1);
  const headers = JSON.parse(Buffer.from(token.slice(token.indexOf(' ') + 1), 'base64').toString()) as Record<
    string,
    string[]
  >;
  headers['Accept-Encoding'] = ['gzip'];
  const forged = Buffer.from(JSON.stringify(headers)).toString('base64');
  assert.throws(() => parseStsProof(1, forged, body, 'sts.us-east-1.amazonaws.com'), UnauthenticatedError);
});

test('an Accept header the node did not sign is not sent to STS: the form of the answer is the controller to choose', async () => {
  const { signAwsStsProof } = await import('../../agent/aws-proof.ts');
  const { parseStsProof } = await import('./aws-sts-proof.ts');
  const body = Buffer.from('{}');
  const token = signAwsStsProof(body, { accessKeyId: 'AKIA', secretAccessKey: 's' }, 'us-east-1', 1);
  const headers = JSON.parse(Buffer.from(token.slice(token.indexOf(' ') + 1), 'base64').toString()) as Record<
    string,
    string[]
  >;
  headers['Accept'] = ['application/cbor'];
  headers['X-Amz-Target'] = ['AWSSecurityTokenServiceV20110615.GetCallerIdentity'];
  const forged = Buffer.from(JSON.stringify(headers)).toString('base64');
  const replay = parseStsProof(1, forged, body, 'sts.us-east-1.amazonaws.com');
  assert.equal(replay.request.headers['accept'], undefined);
  assert.equal(replay.request.headers['x-amz-target'], undefined, 'no header the node did not sign is sent');
  assert.ok(replay.request.headers['x-kops-request-sha'], 'the signed headers are kept');
});
